//! A check word over a packet's bytes.
//!
//! A remote write is applied one datagram at a time, and datagrams may be
//! lost, duplicated or overtaken, so a slot can hold a mix of two writes (a
//! late copy of an older block over part of a newer one, or a packet larger
//! than one datagram that arrived only in part). The layers accept a slot
//! only if its check word matches its bytes. Not cryptographic: it guards
//! against the network, not against a hostile peer (the protection group does that).

/// CRC-32 (crc32fast: table-free with CLMUL, several GB/s) of `seed` and
/// each part with its length, so that moving a byte across a part boundary
/// changes the word.
pub(crate) fn check(seed: u64, parts: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&seed.to_le_bytes());
    for part in parts {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.finalize()
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn any_changed_byte_or_boundary_changes_the_word() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let base = check(5, &[&data]);
        assert_eq!(base, check(5, &[&data]));
        assert_ne!(base, check(6, &[&data]));
        for i in [0, 1, 31, 32, 500, 999] {
            let mut d = data.clone();
            d[i] ^= 1;
            assert_ne!(base, check(5, &[&d]), "byte {i}");
        }
        assert_ne!(base, check(5, &[&data[..999]]));
        assert_ne!(check(5, &[&data[..10], &data[10..]]), check(5, &[&data[..11], &data[11..]]));
        assert_ne!(check(0, &[&[0u8; 64]]), check(0, &[&[0u8; 65]]));
    }
}
