//! vipc-ports: every parser of bytes that come from other hosts (request and
//! answer messages, encoded arguments, port lists, variable directories).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    vipc_ports::vars::fuzz_parsers(data);
});
