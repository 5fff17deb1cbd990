//! The parsers of bytes read from other clerks' tables never panic, and
//! any changed byte of an entry makes it fail rather than parse as another.

use proptest::prelude::*;
use vipc::Access;
use vipc_rmem_names::{Binding, Entry, EntryState, Header, ENTRY_SIZE, NAME_MAX};

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

proptest! {
    #[test]
    fn any_bytes_parse_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300), size in any::<u32>()) {
        let _ = Entry::parse(&bytes);
        let _ = Header::parse(&bytes, size);
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
