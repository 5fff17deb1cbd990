//! vipc-rmem-apps: every parser of bytes a peer wrote into this node's
//! segments (an Ising ghost-row slot, the circuit simulation's ring records).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    vipc_rmem_apps::fuzz_parsers(data);
});
