//! Byte patterns that make moved data checkable: every byte of a segment is a
//! function of (request id, writer, offset), so a lost, shifted, stale or
//! foreign byte is recognised wherever it lands.

/// Who wrote a byte: the client filling its segment, or the server writing
/// into it (MoveTo or a reply segment).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Writer {
    /// The client's initial contents.
    Client,
    /// What the server writes.
    Server,
}

/// The byte at `offset` of request `rid`'s segment as written by `who`.
pub fn byte(rid: u64, who: Writer, offset: u64) -> u8 {
    let salt: u64 = match who {
        Writer::Client => 0x243F_6A88_85A3_08D3,
        Writer::Server => 0x1319_8A2E_0370_7344,
    };
    let x = offset.wrapping_add(rid.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ salt).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    (x >> 56) as u8
}

/// `len` bytes of the pattern starting at `offset`.
pub fn fill(rid: u64, who: Writer, offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| byte(rid, who, offset + i)).collect()
}

#[cfg(test)]
/// The first index `i` where `bytes[i]` differs from the pattern at `offset + i`.
pub fn first_mismatch(rid: u64, who: Writer, offset: u64, bytes: &[u8]) -> Option<usize> {
    bytes.iter().enumerate().find(|&(i, &b)| b != byte(rid, who, offset + i as u64)).map(|(i, _)| i)
}

/// What a segment byte may hold, given the ranges a server may have written.
///
/// Bytes outside every range must be the client's pattern. Inside a range
/// that was certainly written they must be the server's; inside a range that
/// may or may not have been written (a failed or repeated operation) either.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expect {
    /// Ranges `(offset, len)` that were certainly written by the server.
    pub written: Vec<(u64, u64)>,
    /// Ranges `(offset, len)` that may have been written by the server.
    pub maybe: Vec<(u64, u64)>,
}

impl Expect {
    /// Checks `bytes` (starting at segment offset `offset`) of request `rid`.
    /// Returns a description of the first bad byte.
    pub fn check(&self, rid: u64, offset: u64, bytes: &[u8]) -> Result<(), String> {
        let inside = |ranges: &[(u64, u64)], at: u64| ranges.iter().any(|&(o, l)| at >= o && at < o + l);
        for (i, &b) in bytes.iter().enumerate() {
            let at = offset + i as u64;
            let client = byte(rid, Writer::Client, at);
            let server = byte(rid, Writer::Server, at);
            let ok = if inside(&self.written, at) {
                b == server
            } else if inside(&self.maybe, at) {
                b == server || b == client
            } else {
                b == client
            };
            if !ok {
                return Err(format!(
                    "byte {at} of request {rid}'s segment is {b:#04x}; client pattern {client:#04x}, server pattern {server:#04x}"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_differ_by_request_writer_and_offset() {
        let a = fill(1, Writer::Client, 0, 4096);
        assert_ne!(a, fill(2, Writer::Client, 0, 4096));
        assert_ne!(a, fill(1, Writer::Server, 0, 4096));
        assert_ne!(a, fill(1, Writer::Client, 1, 4096));
        assert_eq!(first_mismatch(1, Writer::Client, 0, &a), None);
        assert_eq!(first_mismatch(1, Writer::Client, 100, &a[100..]), None);
        let mut b = a.clone();
        b[77] ^= 1;
        assert_eq!(first_mismatch(1, Writer::Client, 0, &b), Some(77));
    }

    #[test]
    fn expect_distinguishes_written_maybe_and_untouched() {
        let mut seg = fill(9, Writer::Client, 0, 100);
        seg[10..20].copy_from_slice(&fill(9, Writer::Server, 10, 10));
        let e = Expect { written: vec![(10, 10)], maybe: vec![] };
        assert!(e.check(9, 0, &seg).is_ok());
        // The written range must really hold the server's bytes.
        let none = Expect::default();
        assert!(none.check(9, 0, &seg).is_err());
        // "Maybe" accepts both.
        let maybe = Expect { written: vec![], maybe: vec![(0, 100)] };
        assert!(maybe.check(9, 0, &seg).is_ok());
        // A byte from another request is caught.
        let (c, s) = (byte(9, Writer::Client, 50), byte(9, Writer::Server, 50));
        seg[50] = (0..=255u8).find(|v| *v != c && *v != s).unwrap();
        assert!(maybe.check(9, 0, &seg).unwrap_err().contains("byte 50"));
    }
}
