//! The parsers of bytes read from other clerks' tables — and of requests
//! and answers other clerks write — never panic, and any changed byte of an
//! entry, a request or an answer makes it fail rather than parse as another.

use proptest::prelude::*;
use vipc::Access;
use vipc_rmem_names::{
    Answer, Binding, Entry, EntryState, Header, Request, ANSWER_SIZE, ENTRY_SIZE, NAME_MAX, REQUEST_SIZE,
};

fn entry() -> impl Strategy<Value = Entry> {
    (
        any::<bool>(),
        1u32..,
        1u32..,
        "[a-zA-Z0-9/._-]{1,80}",
        any::<[u8; 16]>(),
        any::<u16>(),
        any::<u32>(),
        0u8..4,
        any::<u64>(),
    )
        .prop_map(|(live, incarnation, generation, name, segment, host, size, a, meta)| Entry {
            state: if live { EntryState::Live } else { EntryState::Deleted },
            incarnation,
            generation,
            name,
            binding: Binding { segment, host, size, access: Access { read: a & 1 != 0, write: a & 2 != 0 }, meta },
        })
}

fn request() -> impl Strategy<Value = Request> {
    (1u32.., any::<u16>(), "[a-zA-Z0-9/._-]{1,80}", any::<[u8; 16]>(), any::<u32>())
        .prop_map(|(seq, host, name, answer, answer_at)| Request { seq, host, name, answer, answer_at })
}

fn answer() -> impl Strategy<Value = Answer> {
    let live = entry().prop_map(|e| Entry { state: EntryState::Live, ..e });
    (any::<u32>(), any::<u16>(), proptest::option::of((any::<u32>(), live))).prop_map(|(seq, host, found)| Answer {
        seq,
        host,
        found,
    })
}

proptest! {
    #[test]
    fn any_bytes_parse_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), size in any::<u32>()) {
        let _ = Entry::parse(&bytes);
        let _ = Header::parse(&bytes, size);
        let _ = Request::parse(&bytes);
        let _ = Answer::parse(&bytes);
    }

    /// Garbage that passes the check word (what a careless or hostile clerk
    /// could write): only the fields can refuse it, and what they accept
    /// is exactly what a request encodes to.
    #[test]
    fn resealed_garbage_requests_parse_without_panic(
        head in proptest::collection::vec(any::<u8>(), 32),
        len in any::<u8>(),
        name in proptest::collection::vec(any::<u8>(), 0..=96),
    ) {
        let mut slot = [0u8; REQUEST_SIZE];
        slot[..32].copy_from_slice(&head);
        slot[10] = len;
        slot[11] = 0;
        slot[32..32 + name.len()].copy_from_slice(&name);
        let h = blake3::hash(&slot[4..]);
        slot[0..4].copy_from_slice(&h.as_bytes()[..4]);
        if let Ok(r) = Request::parse(&slot) {
            prop_assert!(r.seq != 0 && !r.name.is_empty() && r.name.len() <= NAME_MAX);
            prop_assert_eq!(r.encode(), slot);
        }
    }

    /// The same resealing with the fields in range (a non-zero seq, a valid
    /// name and its length, zero reserved bytes): always accepted, as written.
    #[test]
    fn resealed_requests_with_valid_fields_are_accepted(
        head in proptest::collection::vec(any::<u8>(), 32),
        name in "[a-zA-Z0-9_.:/-]{1,80}",
    ) {
        let mut slot = [0u8; REQUEST_SIZE];
        slot[..32].copy_from_slice(&head);
        if slot[4..8] == [0; 4] {
            slot[4] = 1;
        }
        slot[10] = name.len() as u8;
        slot[11] = 0;
        slot[32..32 + name.len()].copy_from_slice(name.as_bytes());
        let h = blake3::hash(&slot[4..]);
        slot[0..4].copy_from_slice(&h.as_bytes()[..4]);
        let r = Request::parse(&slot);
        prop_assert!(r.is_ok(), "{:?}", r);
        let r = r.unwrap();
        prop_assert_eq!(&r.name, &name);
        prop_assert_eq!(r.encode(), slot);
    }

    #[test]
    fn requests_and_answers_round_trip(r in request(), a in answer()) {
        prop_assert_eq!(Request::parse(&r.encode()), Ok(r));
        prop_assert_eq!(Answer::parse(&a.encode()), Ok(a));
    }

    #[test]
    fn a_changed_byte_never_parses_as_a_valid_request_or_answer(
        r in request(), a in answer(), at in 0..ANSWER_SIZE, flip in 1u8..
    ) {
        let mut b = r.encode();
        b[at % REQUEST_SIZE] ^= flip;
        prop_assert!(Request::parse(&b).is_err(), "byte {} changed and the request still parsed", at % REQUEST_SIZE);
        let mut b = a.encode();
        b[at] ^= flip;
        prop_assert!(Answer::parse(&b).is_err(), "byte {} changed and the answer still parsed", at);
    }

    #[test]
    fn entries_round_trip(e in entry()) {
        prop_assert!(e.name.len() <= NAME_MAX);
        prop_assert_eq!(Entry::parse(&e.encode()), Ok(Some(e)));
    }

    #[test]
    fn a_changed_byte_never_parses_as_a_valid_entry(e in entry(), at in 0..ENTRY_SIZE, flip in 1u8..) {
        let mut b = e.encode();
        b[at] ^= flip;
        prop_assert!(Entry::parse(&b).is_err(), "byte {} changed and the entry still parsed", at);
    }
}
