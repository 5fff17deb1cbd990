//! vipc's kernel server and its clients: every parser of bytes another host
//! wrote (a LOCATE query, the counters' text, an OP_HOSTS answer's rows).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    vipc::services::fuzz_parsers(data);
});
