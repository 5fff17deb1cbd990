//! Property tests: every header round-trips; no byte string makes the parser panic;
//! a single flipped bit in a keyed packet is always caught.

use proptest::prelude::*;
use vipc_wire::*;

fn any_header() -> impl Strategy<Value = Header> {
    (0usize..PacketType::ALL.len(), any::<u16>(), any::<u16>(), any::<[u32; 7]>(), any::<[u8; 32]>()).prop_map(
        |(t, flags, incarnation, w, message)| Header {
            ptype: PacketType::ALL[t],
            flags: Flags(flags & !Flags::MAC),
            incarnation,
            seq: w[0],
            src: Pid(w[1]),
            dst: Pid(w[2]),
            fwd: Pid(w[3]),
            total_len: w[4],
            local_addr: w[5],
            remote_addr: w[6],
            message,
        },
    )
}

proptest! {
    #[test]
    fn header_and_data_round_trip(h in any_header(), data in proptest::collection::vec(any::<u8>(), 0..2000), keyed in any::<bool>()) {
        let key = AuthKey::from_bytes([7; 32]);
        let key = keyed.then_some(&key);
        let buf = to_vec(&h, &data, key);
        prop_assert_eq!(buf.len(), encoded_len(data.len(), keyed));
        let p = parse(&buf, key).unwrap();
        prop_assert_eq!(p.header.flags.has(Flags::MAC), keyed);
        let mut expect = h;
        expect.flags = h.flags.with(Flags::MAC, keyed);
        prop_assert_eq!(p.header, expect);
        prop_assert_eq!(p.data, &data[..]);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        let key = AuthKey::from_bytes([1; 32]);
        let _ = parse(&bytes, None);
        let _ = parse(&bytes, Some(&key));
    }

    /// Valid packets with bytes changed at random get past the magic and
    /// the length check often, unlike random bytes: whatever the parser then
    /// accepts is exactly what encoding its result gives back.
    #[test]
    fn mutated_packets_parse_only_to_what_they_encode(
        h in any_header(),
        data in proptest::collection::vec(any::<u8>(), 0..300),
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
    ) {
        let mut buf = to_vec(&h, &data, None);
        for (at, b) in edits {
            let at = at % buf.len();
            buf[at] = b;
        }
        if let Ok(p) = parse(&buf, None) {
            prop_assert_eq!(to_vec(&p.header, p.data, None), buf);
        }
    }

    #[test]
    fn flipped_bit_fails_mac(h in any_header(), data in proptest::collection::vec(any::<u8>(), 0..200), bit in any::<usize>()) {
        let key = AuthKey::from_bytes([9; 32]);
        let mut buf = to_vec(&h, &data, Some(&key));
        let bit = bit % (buf.len() * 8);
        buf[bit / 8] ^= 1 << (bit % 8);
        prop_assert!(parse(&buf, Some(&key)).is_err());
    }
}

#[test]
fn each_rejection_is_typed() {
    let h = Header::new(PacketType::Send);
    let key = AuthKey::from_bytes([3; 32]);
    let plain = to_vec(&h, b"abc", None);
    assert_eq!(parse(&plain[..10], None), Err(ParseError::TooShort(10)));
    let mut bad = plain.clone();
    bad[0] = 0;
    assert!(matches!(parse(&bad, None), Err(ParseError::BadMagic(_))));
    let mut bad = plain.clone();
    bad[2] = 9;
    assert_eq!(parse(&bad, None), Err(ParseError::BadVersion(9)));
    let mut bad = plain.clone();
    bad[3] = 99;
    assert_eq!(parse(&bad, None), Err(ParseError::UnknownType(99)));
    assert!(matches!(parse(&plain[..plain.len() - 1], None), Err(ParseError::LengthMismatch { .. })));
    assert_eq!(parse(&plain, Some(&key)), Err(ParseError::MissingMac));
    let keyed = to_vec(&h, b"abc", Some(&key));
    assert_eq!(parse(&keyed, None), Err(ParseError::UnexpectedMac));
    let other = AuthKey::from_bytes([4; 32]);
    assert_eq!(parse(&keyed, Some(&other)), Err(ParseError::BadMac));
    assert!(parse(&keyed, Some(&key)).is_ok());
}

#[test]
fn key_hex_round_trip() {
    let k = AuthKey::from_bytes([0xab; 32]);
    assert_eq!(AuthKey::from_hex(&format!("{}\n", k.to_hex())).unwrap(), k);
    assert!(AuthKey::from_hex("abc").is_err());
    assert!(AuthKey::from_hex(&"g".repeat(64)).is_err());
}
