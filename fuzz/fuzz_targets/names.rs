//! vipc-rmem-names: every parser of bytes other hosts wrote into the name
//! service's segments (table header and entries, lookup requests and
//! answers, a request slot).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    vipc_rmem_names::fuzz_parsers(data);
});
