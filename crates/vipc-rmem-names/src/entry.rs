//! One bucket of a name table, byte by byte, and its parser. Entries are
//! read from other nodes' tables over the network, so the parser checks
//! every length and field and never panics; a check word over the whole
//! entry makes a torn or damaged one fail instead of parse as another.

use crate::layout::{ENTRY_SIZE, NAME_MAX};
use vipc::{Access, HostId, SegmentName};

/// What a name is bound to: a segment and where it lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The segment's 128-bit name (what `Node::import_segment` takes).
    pub segment: SegmentName,
    /// The host exporting it.
    pub host: HostId,
    /// Its size in bytes.
    pub size: u32,
    /// The access its owner grants.
    pub access: Access,
    /// The registrant's own word (a version, a type tag …); the service does not look at it.
    pub meta: u64,
}

/// A used bucket's state. Empty buckets parse as `None`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryState {
    /// The name is registered.
    Live,
    /// The name was deleted (lazily: the bucket keeps the entry, marked, so
    /// probe chains through it stay intact and readers see the generation).
    Deleted,
}

/// A used bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Live or deleted.
    pub state: EntryState,
    /// The table's incarnation when the entry was written.
    pub incarnation: u32,
    /// The registration's generation: non-zero, new for every registration in a table.
    pub generation: u32,
    /// The registered name.
    pub name: String,
    /// What it is bound to.
    pub binding: Binding,
}

/// Why bytes are not an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Fewer than [`ENTRY_SIZE`] bytes.
    #[error("short entry")]
    Short,
    /// The check word does not match the bytes (torn or damaged).
    #[error("check word mismatch")]
    Check,
    /// A field out of its range (state, name length, reserved bytes, generation 0).
    #[error("bad field {0}")]
    Field(&'static str),
}

const STATE_LIVE: u8 = 1;
const STATE_DELETED: u8 = 2;
const ACCESS_READ: u8 = 1;
const ACCESS_WRITE: u8 = 2;
/// Where the name's bytes start.
const NAME_AT: usize = 48;

/// A check word: the first 4 bytes of BLAKE3 over `bytes`. Not a MAC (the
/// protection group guards the segments); it catches torn and damaged
/// records, which a plain sum could miss.
fn check_word(bytes: &[u8]) -> u32 {
    let h = blake3::hash(bytes);
    let w = h.as_bytes();
    u32::from_le_bytes([w[0], w[1], w[2], w[3]])
}

/// Writes the check word over `b[4..]` into `b[0..4]`.
pub(crate) fn seal(b: &mut [u8]) {
    let c = check_word(&b[4..]);
    b[0..4].copy_from_slice(&c.to_le_bytes());
}

/// The first `N` bytes, if there are as many.
pub(crate) fn sized<const N: usize>(bytes: &[u8]) -> Result<&[u8; N], ParseError> {
    bytes.get(..N).and_then(|s| s.try_into().ok()).ok_or(ParseError::Short)
}

/// The first `N` bytes, if there are as many and bytes 0..4 hold the check word over the rest.
pub(crate) fn sealed<const N: usize>(bytes: &[u8]) -> Result<&[u8; N], ParseError> {
    let b = sized::<N>(bytes)?;
    match u32_at(b, 0) == check_word(&b[4..]) {
        true => Ok(b),
        false => Err(ParseError::Check),
    }
}

/// The little-endian u32 at `at` (the caller checked the length).
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl Entry {
    /// The entry's 128 bytes (little-endian): check word (4), state (1),
    /// name length (1), access bits (1), zero (1), incarnation (4),
    /// generation (4), host (2), zero (2), size (4), segment name (16),
    /// meta (8), name (80, zero-padded). A name longer than [`NAME_MAX`] is cut
    /// (callers check it first).
    pub fn encode(&self) -> [u8; ENTRY_SIZE] {
        let mut b = [0u8; ENTRY_SIZE];
        let name = &self.name.as_bytes()[..self.name.len().min(NAME_MAX)];
        b[4] = match self.state {
            EntryState::Live => STATE_LIVE,
            EntryState::Deleted => STATE_DELETED,
        };
        b[5] = name.len() as u8;
        let a = self.binding.access;
        b[6] = if a.read { ACCESS_READ } else { 0 } | if a.write { ACCESS_WRITE } else { 0 };
        b[8..12].copy_from_slice(&self.incarnation.to_le_bytes());
        b[12..16].copy_from_slice(&self.generation.to_le_bytes());
        b[16..18].copy_from_slice(&self.binding.host.to_le_bytes());
        b[20..24].copy_from_slice(&self.binding.size.to_le_bytes());
        b[24..40].copy_from_slice(&self.binding.segment);
        b[40..48].copy_from_slice(&self.binding.meta.to_le_bytes());
        b[NAME_AT..NAME_AT + name.len()].copy_from_slice(name);
        seal(&mut b);
        b
    }

    /// Parses one bucket's bytes: `Ok(None)` for an empty bucket (all zero).
    /// Never panics, whatever the bytes.
    pub fn parse(bytes: &[u8]) -> Result<Option<Entry>, ParseError> {
        if sized::<ENTRY_SIZE>(bytes)?.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        let b = sealed::<ENTRY_SIZE>(bytes)?;
        let state = match b[4] {
            STATE_LIVE => EntryState::Live,
            STATE_DELETED => EntryState::Deleted,
            _ => return Err(ParseError::Field("state")),
        };
        let len = b[5] as usize;
        if len == 0 || len > NAME_MAX {
            return Err(ParseError::Field("name length"));
        }
        if b[6] & !(ACCESS_READ | ACCESS_WRITE) != 0 || b[7] != 0 || b[18] != 0 || b[19] != 0 {
            return Err(ParseError::Field("reserved bits"));
        }
        if b[NAME_AT + len..].iter().any(|&x| x != 0) {
            return Err(ParseError::Field("name padding"));
        }
        let name = std::str::from_utf8(&b[NAME_AT..NAME_AT + len]).map_err(|_| ParseError::Field("name"))?;
        let generation = u32_at(b, 12);
        if generation == 0 {
            return Err(ParseError::Field("generation"));
        }
        let mut segment = [0u8; 16];
        segment.copy_from_slice(&b[24..40]);
        let mut meta = [0u8; 8];
        meta.copy_from_slice(&b[40..48]);
        let binding = Binding {
            segment,
            host: u16::from_le_bytes([b[16], b[17]]),
            size: u32_at(b, 20),
            access: Access { read: b[6] & ACCESS_READ != 0, write: b[6] & ACCESS_WRITE != 0 },
            meta: u64::from_le_bytes(meta),
        };
        Ok(Some(Entry { state, incarnation: u32_at(b, 8), generation, name: name.to_string(), binding }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Entry {
        Entry {
            state: EntryState::Live,
            incarnation: 77,
            generation: 5,
            name: "fileserver".into(),
            binding: Binding { segment: [9; 16], host: 3, size: 4096, access: Access::READ, meta: 0xfeed },
        }
    }

    #[test]
    fn entries_round_trip_and_empty_buckets_are_none() {
        let e = sample();
        assert_eq!(Entry::parse(&e.encode()), Ok(Some(e.clone())));
        let d = Entry { state: EntryState::Deleted, ..e };
        assert_eq!(Entry::parse(&d.encode()), Ok(Some(d)));
        assert_eq!(Entry::parse(&[0u8; ENTRY_SIZE]), Ok(None));
        assert_eq!(Entry::parse(&[0u8; ENTRY_SIZE - 1]), Err(ParseError::Short));
    }

    #[test]
    fn a_torn_entry_fails_its_check() {
        // The first half of one entry and the second half of another: what a
        // reader would see if two writes were mixed.
        let a = sample().encode();
        let mut other = sample();
        other.generation = 6;
        other.binding.segment = [1; 16];
        let b = other.encode();
        let mut torn = a;
        torn[64..].copy_from_slice(&b[64..]);
        torn[20..40].copy_from_slice(&b[20..40]);
        assert_eq!(Entry::parse(&torn), Err(ParseError::Check));
    }
}
