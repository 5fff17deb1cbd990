//! The bytes of a lookup by notification (003 Table 7.3, last row): the
//! request a clerk writes into a slot of another clerk's request segment,
//! and the answer written back into the asker's answer segment. Both are
//! read from memory other hosts write, so both parsers check every field
//! and never panic; each carries a check word over all its bytes, so a torn
//! or damaged one fails instead of parsing as another.

use crate::entry::{seal, sealed, u32_at, Entry, EntryState, ParseError};
use crate::layout::{ENTRY_SIZE, NAME_MAX};
use vipc::{HostId, SegmentName};

/// Bytes of one request slot.
pub const REQUEST_SIZE: usize = 128;
/// Bytes of one answer: a 16-byte head, then an entry.
pub const ANSWER_SIZE: usize = 16 + ENTRY_SIZE;

/// Where a request's name starts.
const NAME_AT: usize = 32;
/// Answer status: the name is live in the answering table.
const FOUND: u8 = 1;
/// Answer status: it is not.
const NOT_FOUND: u8 = 2;

/// A lookup request: what the asking clerk writes, with notify, into its
/// slot of the asked clerk's request segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The asker's sequence number (non-zero); the answer repeats it.
    pub seq: u32,
    /// The asking host (it also picks the slot: host mod slots).
    pub host: HostId,
    /// The name looked up (1 to [`NAME_MAX`] bytes).
    pub name: String,
    /// The segment the answer is written into (the asker exports it).
    pub answer: SegmentName,
    /// Where in it.
    pub answer_at: u32,
}

impl Request {
    /// The slot's bytes (little-endian): check word (4) over bytes 4–127,
    /// sequence number (4), host (2), name length (1), zero (1), answer
    /// offset (4), answer segment name (16), name (80, zero-padded), zero
    /// (16). A name longer than [`NAME_MAX`] is cut (callers check it first).
    pub fn encode(&self) -> [u8; REQUEST_SIZE] {
        let mut b = [0u8; REQUEST_SIZE];
        let name = &self.name.as_bytes()[..self.name.len().min(NAME_MAX)];
        b[4..8].copy_from_slice(&self.seq.to_le_bytes());
        b[8..10].copy_from_slice(&self.host.to_le_bytes());
        b[10] = name.len() as u8;
        b[12..16].copy_from_slice(&self.answer_at.to_le_bytes());
        b[16..32].copy_from_slice(&self.answer);
        b[NAME_AT..NAME_AT + name.len()].copy_from_slice(name);
        seal(&mut b);
        b
    }

    /// Parses a slot's bytes. Never panics, whatever the bytes.
    pub fn parse(bytes: &[u8]) -> Result<Request, ParseError> {
        let b = sealed::<REQUEST_SIZE>(bytes)?;
        let seq = u32_at(b, 4);
        if seq == 0 {
            return Err(ParseError::Field("sequence number"));
        }
        let len = b[10] as usize;
        if len == 0 || len > NAME_MAX {
            return Err(ParseError::Field("name length"));
        }
        if b[11] != 0 || b[NAME_AT + len..].iter().any(|&x| x != 0) {
            return Err(ParseError::Field("reserved bytes"));
        }
        let name = std::str::from_utf8(&b[NAME_AT..NAME_AT + len]).map_err(|_| ParseError::Field("name"))?;
        let mut answer = [0u8; 16];
        answer.copy_from_slice(&b[16..32]);
        let host = u16::from_le_bytes([b[8], b[9]]);
        Ok(Request { seq, host, name: name.to_string(), answer, answer_at: u32_at(b, 12) })
    }
}

/// A lookup's answer: what the asked clerk writes, with notify, into the
/// asker's answer segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The request's sequence number.
    pub seq: u32,
    /// The answering host (whose table was searched).
    pub host: HostId,
    /// The live entry of the name and its bucket, or `None`: not registered there.
    pub found: Option<(u32, Entry)>,
}

impl Answer {
    /// The answer's bytes (little-endian): check word (4) over bytes 4–143,
    /// sequence number (4), host (2), status (1: 1 found, 2 not found), zero
    /// (1), bucket (4), then the entry's 128 bytes exactly as in the table
    /// (zero when not found).
    pub fn encode(&self) -> [u8; ANSWER_SIZE] {
        let mut b = [0u8; ANSWER_SIZE];
        b[4..8].copy_from_slice(&self.seq.to_le_bytes());
        b[8..10].copy_from_slice(&self.host.to_le_bytes());
        b[10] = NOT_FOUND;
        if let Some((slot, e)) = &self.found {
            b[10] = FOUND;
            b[12..16].copy_from_slice(&slot.to_le_bytes());
            b[16..].copy_from_slice(&e.encode());
        }
        seal(&mut b);
        b
    }

    /// Parses an answer's bytes; the entry is parsed as one pulled from a
    /// table (its own check word included). Never panics, whatever the bytes.
    pub fn parse(bytes: &[u8]) -> Result<Answer, ParseError> {
        let b = sealed::<ANSWER_SIZE>(bytes)?;
        if b[11] != 0 {
            return Err(ParseError::Field("reserved bytes"));
        }
        let (seq, host, slot) = (u32_at(b, 4), u16::from_le_bytes([b[8], b[9]]), u32_at(b, 12));
        let found = match b[10] {
            FOUND => match Entry::parse(&b[16..])? {
                Some(e) if e.state == EntryState::Live => Some((slot, e)),
                _ => return Err(ParseError::Field("entry")),
            },
            NOT_FOUND if slot == 0 && b[16..].iter().all(|&x| x == 0) => None,
            _ => return Err(ParseError::Field("status")),
        };
        Ok(Answer { seq, host, found })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Binding;
    use vipc::Access;

    fn request() -> Request {
        Request { seq: 7, host: 12, name: "fileserver".into(), answer: [3; 16], answer_at: 0 }
    }

    fn entry() -> Entry {
        let binding = Binding { segment: [9; 16], host: 3, size: 4096, access: Access::READ, meta: 1 };
        Entry { state: EntryState::Live, incarnation: 5, generation: 2, name: "fileserver".into(), binding }
    }

    #[test]
    fn requests_and_answers_round_trip() {
        let r = request();
        assert_eq!(Request::parse(&r.encode()), Ok(r));
        for found in [None, Some((41, entry()))] {
            let a = Answer { seq: 9, host: 3, found };
            assert_eq!(Answer::parse(&a.encode()), Ok(a));
        }
    }

    #[test]
    fn garbage_slots_are_refused_with_a_reason() {
        assert_eq!(Request::parse(&[0u8; REQUEST_SIZE]), Err(ParseError::Check), "an empty slot");
        assert_eq!(Request::parse(&[0u8; REQUEST_SIZE - 1]), Err(ParseError::Short));
        // Well-formed check words over bad fields: what a careless (or hostile) clerk could write.
        let resealed = |f: &dyn Fn(&mut [u8; REQUEST_SIZE])| {
            let mut b = request().encode();
            f(&mut b);
            seal(&mut b);
            Request::parse(&b)
        };
        assert_eq!(resealed(&|b| b[4..8].fill(0)), Err(ParseError::Field("sequence number")));
        assert_eq!(resealed(&|b| b[10] = 0), Err(ParseError::Field("name length")));
        assert_eq!(resealed(&|b| b[10] = 81), Err(ParseError::Field("name length")));
        assert_eq!(resealed(&|b| b[11] = 1), Err(ParseError::Field("reserved bytes")));
        assert_eq!(resealed(&|b| b[NAME_AT + 20] = b'x'), Err(ParseError::Field("reserved bytes")));
        assert_eq!(resealed(&|b| b[NAME_AT] = 0xff), Err(ParseError::Field("name")));
    }

    #[test]
    fn a_not_found_answer_carries_no_entry_and_a_deleted_one_is_refused() {
        let mut b = Answer { seq: 1, host: 2, found: None }.encode();
        b[20] = 1;
        seal(&mut b);
        assert_eq!(Answer::parse(&b), Err(ParseError::Field("status")));
        let deleted = Entry { state: EntryState::Deleted, ..entry() };
        let b = Answer { seq: 1, host: 2, found: Some((0, deleted)) }.encode();
        assert_eq!(Answer::parse(&b), Err(ParseError::Field("entry")));
    }
}
