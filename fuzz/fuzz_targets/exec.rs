//! vipc-exec: every parser of bytes another host wrote — the team server
//! reading an Exec's argument vector from the client's segment, and the
//! fields of the 32-byte requests and replies.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    vipc_exec::fuzz_parsers(data);
});
