//! The 32-byte messages of this crate (PROTOCOL.md, "Typed calls and ports").
//!
//! A request: `kind` u8, `flags` u8, `method` u16 LE, `fingerprint` u64 LE,
//! `len` u32 LE (bytes of the encoded arguments), then 16 bytes: the
//! arguments themselves when `len` ≤ 16, else zero (they are in the
//! segment the caller grants). An answer: `status` u8, 3 zero bytes, `len`
//! u32 LE, then 24 bytes: the result when `status` is OK and `len` ≤ 24
//! (else it was written at offset 0 of the caller's segment), or the
//! server's fingerprint (u64 LE) when `status` is MISMATCH.

use vipc::Message;

/// Bytes of arguments carried in the request itself.
pub const REQUEST_INLINE: usize = 16;
/// Bytes of a result carried in the answer itself.
pub const ANSWER_INLINE: usize = 24;

/// Request kinds.
pub mod kind {
    /// An interface call.
    pub const CALL: u8 = 0xC1;
    /// Fetch the result the server kept for us (after MORE).
    pub const FETCH: u8 = 0xC2;
    /// A message to a port.
    pub const PORT_SEND: u8 = 0xC3;
    /// A local receiver takes the earliest message of its ports.
    pub const PORT_TAKE: u8 = 0xC4;
    /// A receiver's handler finished: the result for the sender.
    pub const PORT_DONE: u8 = 0xC5;
    /// Start a process of a registered kind (remote activation).
    pub const ACTIVATE: u8 = 0xC6;
    /// Wait for an activated process's result.
    pub const ACTIVATION_RESULT: u8 = 0xC7;
    /// A call to a network port (a group Send).
    pub const NET_CALL: u8 = 0xC8;
    /// A port of this node was closed: its held messages and takers go (local only).
    pub const PORT_CLOSE: u8 = 0xC9;
    /// Stop serving: the server answers OK and its process ends (local only).
    pub const STOP: u8 = 0xCA;
}

/// Flags of a CALL request.
pub mod flags {
    /// The method's last argument, a byte vector, is the granted segment
    /// itself (`len` is its length); the 16 inline bytes hold the other
    /// arguments' encoding, zero-padded.
    pub const BULK: u8 = 0x01;
}

/// Answer statuses.
pub mod status {
    /// Done; the result follows.
    pub const OK: u8 = 0;
    /// The fingerprints differ; the server's follows.
    pub const MISMATCH: u8 = 1;
    /// No such method (or port, or kind).
    pub const NO_SUCH: u8 = 2;
    /// The arguments did not decode.
    pub const BAD_ARGUMENTS: u8 = 3;
    /// The handler panicked.
    pub const PANICKED: u8 = 4;
    /// The result is larger than the caller's segment: `len` bytes are kept for one FETCH.
    pub const MORE: u8 = 5;
    /// Nothing kept to fetch (expired or never there).
    pub const GONE: u8 = 6;
    /// Not a request this server understands.
    pub const NOT_A_REQUEST: u8 = 7;
    /// The port keeper holds as many messages as it may; try again later.
    pub const FULL: u8 = 8;
    /// The answer's MoveTo into the caller's segment failed (a transfer cut
    /// off, or slower than the stream cap): nothing was delivered.
    pub const UNDELIVERED: u8 = 9;
}

/// A decoded request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// One of [`kind`].
    pub kind: u8,
    /// Kind-specific (a port send's checkpoint).
    pub flags: u8,
    /// The method (or port) index.
    pub method: u16,
    /// The interface (or port type) fingerprint.
    pub fingerprint: u64,
    /// Bytes of the encoded arguments.
    pub len: u32,
}

impl Request {
    /// The request message for `args` (inline if they fit).
    pub fn encode(&self, args: &[u8]) -> Message {
        let mut m = [0u8; 32];
        m[0] = self.kind;
        m[1] = self.flags;
        m[2..4].copy_from_slice(&self.method.to_le_bytes());
        m[4..12].copy_from_slice(&self.fingerprint.to_le_bytes());
        m[12..16].copy_from_slice(&self.len.to_le_bytes());
        if args.len() <= REQUEST_INLINE {
            m[16..16 + args.len()].copy_from_slice(args);
        }
        m
    }

    /// The header of `m`; `None` if its kind is not one of ours.
    pub fn decode(m: &Message) -> Option<Request> {
        let r = Request {
            kind: m[0],
            flags: m[1],
            method: u16::from_le_bytes([m[2], m[3]]),
            fingerprint: u64::from_le_bytes(m[4..12].try_into().expect("8 bytes")),
            len: u32::from_le_bytes(m[12..16].try_into().expect("4 bytes")),
        };
        (kind::CALL..=kind::STOP).contains(&r.kind).then_some(r)
    }

    /// The inline arguments of `m`, if they were carried inline.
    pub fn inline(&self, m: &Message) -> Option<Vec<u8>> {
        let n = self.len as usize;
        (n <= REQUEST_INLINE).then(|| m[16..16 + n].to_vec())
    }
}

/// An answer message: `status`, `len`, and the inline bytes (at most 24).
pub fn answer(status: u8, len: u32, inline: &[u8]) -> Message {
    let mut m = [0u8; 32];
    m[0] = status;
    m[4..8].copy_from_slice(&len.to_le_bytes());
    let n = inline.len().min(ANSWER_INLINE);
    m[8..8 + n].copy_from_slice(&inline[..n]);
    m
}

/// `(status, len, the 24 trailing bytes)` of an answer.
pub fn read_answer(m: &Message) -> (u8, u32, &[u8]) {
    (m[0], u32::from_le_bytes(m[4..8].try_into().expect("4 bytes")), &m[8..32])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_foreign_messages_are_refused() {
        let r = Request { kind: kind::CALL, flags: 3, method: 513, fingerprint: 0x0102_0304_0506_0708, len: 5 };
        let m = r.encode(b"hello");
        assert_eq!(Request::decode(&m), Some(r));
        assert_eq!(r.inline(&m).unwrap(), b"hello");
        let big = Request { len: 17, ..r };
        assert_eq!(big.inline(&big.encode(&[0; 17])), None);
        assert_eq!(Request::decode(&[0u8; 32]), None);
        assert_eq!(Request::decode(&[0xff; 32]), None);
        let a = answer(status::MORE, 99, &[7; 30]);
        assert_eq!(read_answer(&a), (status::MORE, 99, &[7u8; 24][..]));
    }
}
