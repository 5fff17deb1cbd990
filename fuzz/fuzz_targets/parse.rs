//! Fuzz target `parse`: `vipc_wire::parse` on arbitrary bytes, without and with
//! a key. Whatever parses must re-encode to exactly the same bytes and parse
//! again to the same packet; the input is also read as a header plus data,
//! encoded, and must parse back to itself. The remote-memory field layouts
//! (`vipc_wire::rmem`) read from any header must write back the same fields.
//! Split as a receive GRO may have coalesced (`vipc_wire::coalesced`), the
//! input's pieces must be the input, and several only in GRO's shape.

#![no_main]

use libfuzzer_sys::fuzz_target;
use vipc_wire::coalesced::{datagrams, stated_len};
use vipc_wire::rmem::{
    CasAnswer, CasFields, ImportFields, ImportReplyFields, NackFields, ReadFields, WriteFields, WritevFields,
};
use vipc_wire::{encoded_len, parse, to_vec, AuthKey, Flags, Header, PacketType, Pid, HEADER_LEN, MAX_DATA};

fuzz_target!(|data: &[u8]| {
    let key = AuthKey::from_bytes([0x5a; 32]);
    for k in [None, Some(&key)] {
        check_round_trip(data, k);
    }
    check_encode_parse(data, &key);
    check_coalesced(data);
    if let Ok(p) = parse(data, None) {
        check_rmem_fields(&p.header, p.data);
    }
});

/// The pieces are the buffer, in order; several only if each states its
/// own length, all but the last of one size and the last no longer.
fn check_coalesced(bytes: &[u8]) {
    let pieces: Vec<&[u8]> = datagrams(bytes).collect();
    assert_eq!(pieces.concat(), bytes, "the pieces are the buffer");
    if let [first, .., last] = pieces[..] {
        assert!(pieces.iter().all(|p| stated_len(p) == Some(p.len())));
        assert!(pieces[..pieces.len() - 1].iter().all(|p| p.len() == first.len()) && last.len() <= first.len());
    }
}

/// Each remote-memory layout: get, put into a fresh header, get again: the same fields.
fn check_rmem_fields(h: &Header, data: &[u8]) {
    macro_rules! same {
        ($t:ty) => {{
            let f = <$t>::get(h);
            let mut fresh = Header::new(h.ptype);
            f.put(&mut fresh);
            assert_eq!(<$t>::get(&fresh), f, "{} does not round-trip", stringify!($t));
        }};
    }
    same!(WriteFields);
    same!(ReadFields);
    same!(CasFields);
    same!(WritevFields);
    same!(NackFields);
    same!(ImportFields);
    same!(ImportReplyFields);
    if let Some(a) = CasAnswer::from_bytes(data) {
        assert_eq!(a.to_bytes(), data);
    }
}

/// Anything that parses re-encodes to the identical datagram.
fn check_round_trip(bytes: &[u8], key: Option<&AuthKey>) {
    let Ok(p) = parse(bytes, key) else { return };
    assert_eq!(p.header.flags.has(Flags::MAC), key.is_some());
    assert!(bytes.len() >= HEADER_LEN);
    assert_eq!(bytes.len(), encoded_len(p.data.len(), key.is_some()));
    if p.data.len() > MAX_DATA {
        // Larger than any UDP payload: encode refuses it by contract.
        return;
    }
    let again = to_vec(&p.header, p.data, key);
    assert_eq!(again, bytes, "re-encoding a parsed packet changed its bytes");
    let q = parse(&again, key).expect("a re-encoded packet parses");
    assert_eq!(q, p);
}

/// Reads the input as header fields + data, encodes, parses back.
fn check_encode_parse(bytes: &[u8], key: &AuthKey) {
    if bytes.len() < 40 {
        return;
    }
    let w = |i: usize| u32::from_be_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    let mut message = [0u8; 32];
    let tail = &bytes[40..];
    let n = tail.len().min(32);
    message[..n].copy_from_slice(&tail[..n]);
    let data = &tail[n..];
    if data.len() > MAX_DATA {
        return;
    }
    let keyed = bytes[2] & 1 == 1;
    let h = Header {
        ptype: PacketType::ALL[bytes[0] as usize % PacketType::ALL.len()],
        flags: Flags(u16::from_be_bytes([bytes[3], bytes[4]]) & !Flags::MAC),
        incarnation: u16::from_be_bytes([bytes[5], bytes[6]]),
        seq: w(8),
        src: Pid(w(12)),
        dst: Pid(w(16)),
        fwd: Pid(w(20)),
        total_len: w(24),
        local_addr: w(28),
        remote_addr: w(32),
        message,
    };
    let k = keyed.then_some(key);
    let buf = to_vec(&h, data, k);
    let p = parse(&buf, k).expect("an encoded packet parses");
    let mut expect = h;
    expect.flags = h.flags.with(Flags::MAC, keyed);
    assert_eq!(p.header, expect);
    assert_eq!(p.data, data);
    // The other key setting must reject it (missing or unexpected MAC).
    assert!(parse(&buf, if keyed { None } else { Some(key) }).is_err());
}
