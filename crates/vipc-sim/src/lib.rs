//! Deterministic simulation of many vipc engines on virtual time and a
//! virtual network with seeded faults.
//!
//! A run builds 3–6 nodes, each a [`vipc_engine::Engine`] with a virtual
//! address `127.0.0.1:(7000+i)` (no sockets), and plays the application the
//! engines serve: servers that receive, move data from and to their clients'
//! segments, forward and reply; clients that send requests (idempotent or not,
//! with read/write segments — a read-only one to another node lent, as the
//! runtime lends it, and given whole some time after a Forward back to its
//! node asks for it — sometimes to dead or nonexistent processes); name
//! lookups; and random process destruction. The network loses, duplicates,
//! delays and reorders datagrams, partitions nodes and crashes them, all drawn
//! from the seed, so a run is a pure function of `(seed, scenario)` and a
//! failing seed replays exactly.
//!
//! Every step is checked against the invariants of [`Invariant`]: exactly one
//! completion per blocking call, completion within T_t, at-most-once
//! execution of non-idempotent requests, no duplicate deliveries, intact
//! data, matching replies, no leftover protocol state once traffic stops, and
//! no failure without a cause.
//!
//! Scenarios ([`Scenario::all`]): `calm` (reliable network), `lossy` (10%
//! loss, duplication, reordering), `heavy-loss` (30%), `partitions` (two-way
//! and one-way cuts, some longer than T_t), `crashes` (nodes die and restart
//! with the same host id), `allocate` (host ids by announcement–complaint with
//! a forced collision), `crowded` (3 aliens, tiny buffers, many clients),
//! `bulk` (1 MiB segments under 20% loss) and `keyed` (a cluster key: every
//! packet authenticated; 10% loss and 1% of datagrams damaged, which the MAC
//! must reject).
//!
//! Group scenarios ([`Scenario::group_suite`], run by `crate::groups`, not
//! part of the round-robin seed mapping): every node runs members of one
//! well-known group and senders that send to it in reply modes None, One and
//! Many (then GetReply) and in the reliable modes K_REPLY, ALL_REPLY,
//! K_DELIVER and ALL_DELIVER, with the alive-host table on (100 ms);
//! some members reply only after 1.2–2.5 s (beyond T_t):
//! - `groups-calm`: no faults, members joining mid-send: every ALL mode, every
//!   K mode with K ≤ the members, every One/Many send must be met;
//! - `groups`: 10% loss, duplication, reordering, members joining and leaving
//!   mid-send (the must-be-met checks hold for sends no member left during);
//! - `reliable-crashes`: 90% reliable sends, 5% loss, member hosts crash and
//!   restart mid-send (members join again on the new incarnation);
//! - `exhaust`: some nodes hold 1 alien, members often slow: NACKs, so ALL
//!   modes fail while K modes still succeed;
//! - `group-partitions`: 5% loss, two-way and one-way cuts of up to 3.5 s
//!   (longer than a copy's 2·T_t), members working up to 4.5 s;
//! - `exhaust-lossy`: `exhaust` with 1–2 aliens under 10–20% loss.
//!
//! Nodes announce I-Am-Here every 50–400 ms (each its own period) in
//! `groups`, `reliable-crashes`, `group-partitions` and `exhaust-lossy`,
//! 100 ms in the others.
//!
//! Group invariants (`gcheck`): every group send and GetReply completes
//! exactly once and in time (T_t after its last packet); a member receives a
//! given group message at most once, and no two lives of one node receive
//! the same one (a restarted node does not execute it again); every reply handed to the sender (first
//! reply or GetReply) answers that very send, comes from a member that
//! received it and replied, and is handed out once; GetReply after mode One
//! returns nothing; reliable outcomes: `hosts` = the sender's alive-host
//! snapshot, replies counted ≤ members that replied, deliveries ≤ processes
//! that were members during the send, K met ⇒ count ≥ K, ALL met ⇒ every
//! snapshot host acknowledged and (ALL_REPLY) every member that stayed a
//! member on a snapshot host that stayed up replied, (ALL_DELIVER) count ≥
//! those members; where the network promises it (no crash, no exhaustion,
//! no node down and no partition from 2 s before the send to its end) ALL
//! modes and K ≤ members must be met, slow members on the sender's own node
//! and members leaving mid-send included; a K mode not met has counted every
//! member that replied (K_REPLY) or received it (K_DELIVER) 300 ms before it
//! ended on the sender's node or a snapshot host that stayed up and connected
//! (a NACKing host resends its replies, a departed member's copy counts), and
//! no such member was still working on it (the breath of life, remote or
//! local, keeps it alive); every member a met ALL_DELIVER counted receives it
//! (or a later send of that sender); a plain send is received twice only
//! after a cut of 2·T_t between the two nodes; a blocked group send gets a
//! packet or has a local member owing its reply at least every T_t + margin;
//! a host is declared down only after `alive_down_after` of its announced
//! periods (clamped to 1–10 of the declaring node's) of silence, or when it
//! restarted; no node holds more group copies than one per sender and
//! member; no exchange, alien or group copy left at the end.
//!
//! Remote-memory scenarios ([`Scenario::rmem_suite`], run by `crate::rmem`)
//! export and import segments and check every delivered request against a
//! reference model of the owner's table (`crate::rmodel`).
//!
//! Structure: every simulation runs in one simulated world (`crate::world`:
//! the nodes' engines, the link model of `crate::net`, the virtual clock and
//! event queue, timers, crashes and restarts, trace and fingerprint) and plugs
//! its workload and checks into it through `world::App`: `crate::sim`
//! (request/reply), `crate::groups` and `crate::rmem`. The two process
//! workloads share their process bookkeeping (`crate::procs`).
//!
//! Running:
//! - `cargo test -p vipc-sim --test sim`: the suite, `VIPC_SIM_SEEDS` seeds
//!   (default 1000) spread round-robin over the scenarios, plus determinism
//!   tests. A failure prints the command that replays it (the `replay`
//!   test, ignored unless asked for with `--ignored`).
//! - `VIPC_SIM_SEED=N VIPC_SIM_TRACE=1 cargo test -p vipc-sim --test sim -- replay --ignored --nocapture`:
//!   one seed with every datagram, delivery, call and completion traced.
//! - `cargo run --release -p vipc-sim --example explore -- all 0 100000`:
//!   many seeds, one line per failure (`explore groups 0 1000` for a group scenario).
//! - `cargo test -p vipc-sim --test sim -- groups groups_calm reliable_crashes exhaust group_partitions exhaust_lossy`:
//!   the group scenarios, `VIPC_SIM_GROUP_SEEDS` seeds each (default 250).
//!
//! ```no_run
//! use vipc_sim::{run, Scenario};
//! match run(7, &Scenario::lossy()) {
//!     Ok(report) => println!("{} replies, {} bytes moved", report.replies, report.moved_bytes),
//!     Err(failure) => panic!("{failure}"),
//! }
//! ```

#![forbid(unsafe_code)]

mod check;
mod gcheck;
mod groups;
mod history;
mod net;
mod pattern;
mod procs;
mod proto;
mod report;
mod rmem;
mod rmodel;
mod scenario;
mod sim;
mod workload;
mod world;

pub use check::{fmt_time, Invariant, Violation};
pub use groups::GroupStats;
pub use net::{LinkParams, NetStats};
pub use report::{Failure, Report};
pub use rmem::RmemStats;
pub use scenario::{GroupLoad, HostIds, Scenario};
pub use world::{describe, engine_config, node_addr, MARGIN, RETRANSMIT, TIMEOUT};

use std::panic::{catch_unwind, AssertUnwindSafe};
use world::Driver;

/// How to run a seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Print every datagram, delivery, API call and completion to stderr.
    pub trace: bool,
    /// Give up (as a livelock) after this many events.
    pub max_events: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options { trace: false, max_events: 20_000_000 }
    }
}

/// Runs one seed of `scenario` and checks every invariant.
pub fn run(seed: u64, scenario: &Scenario) -> Result<Report, Failure> {
    run_with(seed, scenario, &Options::default())
}

/// [`run`] with options (tracing, event budget). A panic inside an engine is
/// reported as a [`Failure`] of [`Invariant::Panic`].
pub fn run_with(seed: u64, scenario: &Scenario, opts: &Options) -> Result<Report, Failure> {
    if scenario.group.is_some() {
        return drive(seed, scenario, groups::GroupSim::new(seed, scenario, opts));
    }
    if scenario.rmem {
        return drive(seed, scenario, rmem::RmemSim::new(seed, scenario, opts));
    }
    drive(seed, scenario, sim::Sim::new(seed, scenario, opts))
}

/// Runs a simulation to its end; a panic inside an engine becomes a
/// [`Failure`] of [`Invariant::Panic`].
fn drive(seed: u64, scenario: &Scenario, mut app: impl Driver) -> Result<Report, Failure> {
    let outcome = catch_unwind(AssertUnwindSafe(|| app.run()));
    let w = app.world();
    let violation = match outcome {
        Ok(Ok(())) => return Ok(std::mem::take(&mut w.report)),
        Ok(Err(v)) => v,
        Err(panic) => {
            w.report.end = w.now;
            Violation { invariant: Invariant::Panic, at: w.now, detail: panic_text(panic) }
        }
    };
    Err(Failure {
        seed,
        scenario: scenario.name.to_string(),
        violation,
        report: Box::new(std::mem::take(&mut w.report)),
    })
}

fn panic_text(panic: Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "non-string panic".to_string())
}
