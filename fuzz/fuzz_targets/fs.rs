//! vipc-fs: every parser of bytes another host wrote — a client reading
//! replies (attributes, file-system figures, a directory listing, an OPEN's
//! file beginning) and the server reading requests (the message, its paths,
//! a SETATTR record).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    vipc_fs::fuzz_parsers(data);
});
