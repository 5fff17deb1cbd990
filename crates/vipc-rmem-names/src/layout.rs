//! The table every clerk exports, laid out identically on every node: a
//! 64-byte header, then `buckets` entries of [`ENTRY_SIZE`] bytes. A clerk
//! that knows a peer's bucket count (its header) computes where any name
//! sits in the peer's table without asking it.

use vipc::{HostId, SegmentName};

/// Bytes of the header at offset 0.
pub const HEADER_SIZE: usize = 64;
/// Bytes of one entry (bucket).
pub const ENTRY_SIZE: usize = 128;
/// The longest name, in bytes (what is left of an entry after its fields).
pub const NAME_MAX: usize = 80;
/// The most buckets a table may have (128 MiB of entries).
pub const MAX_BUCKETS: u32 = 1 << 20;
/// The header's first word: "VNAM".
const MAGIC: [u8; 4] = *b"VNAM";
/// The layout's version.
const VERSION: u16 = 1;

/// The well-known segment name of host `host`'s clerk: the first 16 bytes
/// of BLAKE3("vipc-names/v1/clerk", host). Every node computes it, so no
/// lookup is needed to find a clerk (003 reserves such segments for the
/// name service to bootstrap from).
pub fn well_known_name(host: HostId) -> SegmentName {
    derived_name(b"vipc-names/v1/clerk", host)
}

/// The well-known name of host `host`'s clerk's request segment (the
/// lookups by notification): BLAKE3("vipc-names/v1/requests", host), first
/// 16 bytes — derived like the table's, so it too needs no lookup.
pub fn well_known_requests(host: HostId) -> SegmentName {
    derived_name(b"vipc-names/v1/requests", host)
}

fn derived_name(label: &[u8], host: HostId) -> SegmentName {
    let mut h = blake3::Hasher::new();
    h.update(label);
    h.update(&host.to_le_bytes());
    let mut name = [0u8; 16];
    name.copy_from_slice(&h.finalize().as_bytes()[..16]);
    name
}

/// The home bucket of `name` in a table of `buckets` buckets: the same
/// hash on every clerk, so a name normally sits at the same place in every
/// table (003 §7.3.2). `buckets` must be non-zero.
pub fn bucket_of(name: &str, buckets: u32) -> u32 {
    let h = blake3::hash(name.as_bytes());
    let mut w = [0u8; 8];
    w.copy_from_slice(&h.as_bytes()[..8]);
    (u64::from_le_bytes(w) % u64::from(buckets.max(1))) as u32
}

/// Offset of bucket `slot` in the segment.
pub(crate) fn slot_offset(slot: u32) -> u32 {
    HEADER_SIZE as u32 + slot * ENTRY_SIZE as u32
}

/// Segment size of a table of `buckets` buckets.
pub(crate) fn table_size(buckets: u32) -> usize {
    HEADER_SIZE + buckets as usize * ENTRY_SIZE
}

/// A table's header: written once when the clerk starts, never changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Buckets in the table.
    pub buckets: u32,
    /// A random non-zero word chosen when the clerk started: entries carry
    /// it, so an entry cached from an earlier run of the clerk never matches.
    pub incarnation: u32,
    /// The clerk's host.
    pub host: HostId,
}

impl Header {
    /// The header's bytes: magic, version (u16), entry size (u16), buckets
    /// (u32), incarnation (u32), host (u16), zeros; little-endian.
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut b = [0u8; HEADER_SIZE];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&(ENTRY_SIZE as u16).to_le_bytes());
        b[8..12].copy_from_slice(&self.buckets.to_le_bytes());
        b[12..16].copy_from_slice(&self.incarnation.to_le_bytes());
        b[16..18].copy_from_slice(&self.host.to_le_bytes());
        b
    }

    /// Parses header bytes read from a segment of `segment_size` bytes
    /// (from the network: every field is checked, nothing panics).
    pub fn parse(b: &[u8], segment_size: u32) -> Result<Header, String> {
        let b: &[u8; HEADER_SIZE] = b.get(..HEADER_SIZE).and_then(|s| s.try_into().ok()).ok_or("short header")?;
        if b[0..4] != MAGIC {
            return Err("no magic word".into());
        }
        let version = u16::from_le_bytes([b[4], b[5]]);
        let entry = u16::from_le_bytes([b[6], b[7]]);
        if version != VERSION || entry as usize != ENTRY_SIZE {
            return Err(format!("version {version} with {entry}-byte entries"));
        }
        let buckets = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        if buckets == 0 || buckets > MAX_BUCKETS || table_size(buckets) > segment_size as usize {
            return Err(format!("{buckets} buckets in a segment of {segment_size} bytes"));
        }
        let incarnation = u32::from_le_bytes([b[12], b[13], b[14], b[15]]);
        if incarnation == 0 {
            return Err("incarnation 0".into());
        }
        Ok(Header { buckets, incarnation, host: u16::from_le_bytes([b[16], b[17]]) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_names_differ_by_host_and_are_stable() {
        assert_eq!(well_known_name(3), well_known_name(3));
        assert_ne!(well_known_name(3), well_known_name(4));
        assert_ne!(well_known_name(3), well_known_requests(3));
    }

    #[test]
    fn headers_round_trip_and_reject_what_does_not_fit() {
        let h = Header { buckets: 16, incarnation: 9, host: 5 };
        let size = table_size(16) as u32;
        assert_eq!(Header::parse(&h.encode(), size), Ok(h));
        assert!(Header::parse(&h.encode(), size - 1).is_err());
        assert!(Header::parse(&h.encode()[..63], size).is_err());
        let mut bad = h.encode();
        bad[8..12].copy_from_slice(&0u32.to_le_bytes());
        assert!(Header::parse(&bad, size).is_err());
        let mut bad = h.encode();
        bad[0] = b'X';
        assert!(Header::parse(&bad, size).is_err());
    }

    #[test]
    fn buckets_spread_and_stay_in_range() {
        let mut hit = [0u32; 8];
        for i in 0..800 {
            let b = bucket_of(&format!("name-{i}"), 8);
            hit[b as usize] += 1;
        }
        assert!(hit.iter().all(|&n| n > 50), "{hit:?}");
        assert_eq!(bucket_of("x", 1), 0);
    }
}
