//! A check word over a packet's bytes.
//!
//! A remote write is applied one datagram at a time, and datagrams may be
//! lost, duplicated or overtaken, so a slot can hold a mix of two writes (a
//! late copy of an older block over part of a newer one, or a packet larger
//! than one datagram that arrived only in part). The layers accept a slot
//! only if its check word matches its bytes. Not cryptographic: it guards
//! against the network, not against a hostile peer (the protection group does that).

/// Four independent multiply-xor lanes over 8-byte words (fast: no lane
/// waits for another), folded with the length and `seed` into 32 bits.
pub(crate) fn check(seed: u64, parts: &[&[u8]]) -> u32 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut lanes = [seed ^ K, seed.rotate_left(17) ^ 0xc2b2_ae3d_27d4_eb4f, !seed, seed.wrapping_mul(K) | 1];
    let mut total = 0u64;
    for part in parts {
        total += part.len() as u64;
        let mut chunks = part.chunks_exact(32);
        for c in &mut chunks {
            for (i, lane) in lanes.iter_mut().enumerate() {
                let w = u64::from_le_bytes(c[i * 8..i * 8 + 8].try_into().unwrap_or_default());
                *lane = (*lane ^ w).wrapping_mul(K).rotate_left(29);
            }
        }
        for (i, b) in chunks.remainder().iter().enumerate() {
            let lane = &mut lanes[i % 4];
            *lane = (*lane ^ u64::from(*b) ^ ((i as u64) << 8)).wrapping_mul(K).rotate_left(29);
        }
        // Separate parts so that moving a byte across a boundary changes the word.
        lanes[0] = (lanes[0] ^ total).wrapping_mul(K);
    }
    let mut h = total.wrapping_mul(K);
    for lane in lanes {
        h = (h ^ lane).wrapping_mul(K).rotate_left(31);
    }
    (h ^ (h >> 32)) as u32
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
