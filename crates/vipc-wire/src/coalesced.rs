//! Datagrams coalesced by UDP GRO: one receive may return several datagrams
//! of one sender back to back, every one but the last of the same size and
//! the last no longer. Each vipc header states its datagram's size, so the
//! pieces are found without the kernel's control message (which only
//! `recvmsg` returns, at a cost to every receive).

use crate::packet::{be16_at, be32_at, Flags, HEADER_LEN, MAGIC};
use crate::MAC_LEN;

/// The size of the datagram that starts `buf`, as its header states it:
/// header, data and MAC. `None` if `buf` does not start with a vipc header.
pub fn stated_len(buf: &[u8]) -> Option<usize> {
    if buf.len() < HEADER_LEN || be16_at(buf, 0) != MAGIC {
        return None;
    }
    let mac = if Flags(be16_at(buf, 4)).has(Flags::MAC) { MAC_LEN } else { 0 };
    Some(HEADER_LEN + mac + be32_at(buf, 24) as usize)
}

/// The datagrams in one received buffer. It is split only when it has the
/// shape GRO makes — the first datagram's stated size `s` is shorter than
/// the buffer, every piece at a multiple of `s` states its own length, the
/// last one `s` or less — and is one datagram otherwise (which parsing then
/// accepts or drops, as if GRO were off).
pub fn datagrams(buf: &[u8]) -> Datagrams<'_> {
    let size = match stated_len(buf) {
        Some(s) if s < buf.len() && continues(&buf[s..], s) => s,
        _ => buf.len(),
    };
    Datagrams { rest: buf, size, started: false }
}

/// True if `rest` is datagrams of `size` bytes each, the last `size` or
/// less, each stating its own length: what follows a first datagram of
/// `size` bytes in a buffer GRO coalesced.
pub fn continues(rest: &[u8], size: usize) -> bool {
    size > 0 && !rest.is_empty() && rest.chunks(size).all(|piece| stated_len(piece) == Some(piece.len()))
}

/// Iterator of [`datagrams`]: the pieces in order, which together are the
/// buffer (an empty buffer is one empty datagram).
#[derive(Clone, Debug)]
pub struct Datagrams<'a> {
    rest: &'a [u8],
    size: usize,
    started: bool,
}

impl<'a> Datagrams<'a> {
    /// The size of every piece but the last (the buffer's length if it is one datagram).
    pub fn piece_size(&self) -> usize {
        self.size
    }
}

impl<'a> Iterator for Datagrams<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.rest.is_empty() && std::mem::replace(&mut self.started, true) {
            return None;
        }
        self.started = true;
        let (piece, rest) = self.rest.split_at(self.size.min(self.rest.len()));
        self.rest = rest;
        Some(piece)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{encode, AuthKey, Header, PacketType};

    fn packet(data_len: usize, key: Option<&AuthKey>) -> Vec<u8> {
        let mut out = Vec::new();
        encode(&Header::new(PacketType::MoveToData), &vec![7u8; data_len], key, &mut out);
        out
    }

    fn pieces(buf: &[u8]) -> Vec<usize> {
        datagrams(buf).map(<[u8]>::len).collect()
    }

    #[test]
    fn one_datagram_is_one_piece() {
        let p = packet(100, None);
        assert_eq!(stated_len(&p), Some(p.len()));
        assert_eq!(pieces(&p), vec![p.len()]);
        assert_eq!(pieces(&[]), vec![0], "an empty datagram is one (a wake-up)");
        assert_eq!(pieces(b"not vipc at all"), vec![15]);
    }

    #[test]
    fn a_gro_buffer_splits_into_its_datagrams_the_last_shorter() {
        for key in [None, Some(AuthKey::from_bytes([3; 32]))] {
            let key = key.as_ref();
            let mut buf = Vec::new();
            for _ in 0..5 {
                buf.extend(packet(1400, key));
            }
            buf.extend(packet(200, key));
            let full = HEADER_LEN + 1400 + if key.is_some() { MAC_LEN } else { 0 };
            assert_eq!(pieces(&buf), vec![full, full, full, full, full, full - 1200]);
            for piece in datagrams(&buf) {
                assert!(crate::parse(piece, key).is_ok());
            }
        }
    }

    #[test]
    fn a_buffer_without_the_gro_shape_is_one_datagram() {
        let (a, b) = (packet(100, None), packet(300, None));
        // Second piece longer than the first: GRO never makes it.
        let longer = [a.clone(), b.clone()].concat();
        assert_eq!(pieces(&longer), vec![longer.len()]);
        // A tail that is no datagram, or a header stating more than there is.
        let junk = [a.clone(), vec![0u8; 10]].concat();
        assert_eq!(pieces(&junk), vec![junk.len()]);
        let cut = [a.clone(), a[..a.len() - 1].to_vec()].concat();
        assert_eq!(pieces(&cut), vec![cut.len()]);
        assert!(continues(&[a.clone(), a.clone(), packet(10, None)].concat(), a.len()));
        assert!(!continues(&cut[a.len()..], a.len()));
        assert!(!continues(&[], a.len()));
        // A header stating less than the one datagram there is.
        let mut short = packet(100, None);
        short[24..28].copy_from_slice(&50u32.to_be_bytes());
        assert_eq!(pieces(&short), vec![short.len()]);
    }
}
