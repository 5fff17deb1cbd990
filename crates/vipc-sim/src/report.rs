//! What a run reports: counters on success, the broken invariant on failure.

use crate::check::Violation;
use crate::net::NetStats;
use crate::Scenario;
use std::fmt;
use vipc_engine::Time;

/// Counters of a successful (or failed) run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// The scenario's name.
    pub scenario: String,
    /// Nodes simulated.
    pub nodes: usize,
    /// The loss probability drawn for this seed.
    pub loss: f64,
    /// Virtual time at the end.
    pub end: Time,
    /// Events processed.
    pub events: u64,
    /// Sends accepted by the engine.
    pub sends: u64,
    /// Sends completed with a reply.
    pub replies: u64,
    /// Sends that failed (at once or by completion).
    pub send_errors: u64,
    /// Requests received by servers.
    pub receipts: u64,
    /// Forwards made.
    pub forwards: u64,
    /// Lent read segments given to an engine that asked for them (a Send
    /// forwarded back to its sender's node).
    pub lent_given: u64,
    /// Moves completed successfully.
    pub moves: u64,
    /// Bytes moved by successful moves.
    pub moved_bytes: u64,
    /// Moves that failed (client gone, faults).
    pub move_errors: u64,
    /// Deliberate misuses refused as they must be.
    pub misuses: u64,
    /// GetPid calls completed.
    pub lookups: u64,
    /// Processes destroyed.
    pub destroyed: u64,
    /// Node crashes.
    pub crashes: u64,
    /// Partitions.
    pub partitions: u64,
    /// Logical-host complaints delivered (announcement–complaint at work).
    pub complaints: u64,
    /// Datagrams the engines rejected for a bad MAC (live engines at the end).
    pub mac_failures: u64,
    /// Datagrams delivered to an engine.
    pub delivered: u64,
    /// Datagrams that vanished with a crashed node.
    pub vanished: u64,
    /// The link model's counters.
    pub net: NetStats,
    /// A hash of every delivery and completion: equal for equal runs.
    pub fingerprint: u64,
    /// Counters of the group scenarios.
    pub group: crate::groups::GroupStats,
    /// Counters of the rmem scenarios.
    pub rmem: crate::rmem::RmemStats,
}

/// A failed run: the seed, its scenario and the broken invariant.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    /// The seed.
    pub seed: u64,
    /// The scenario's name.
    pub scenario: String,
    /// What broke.
    pub violation: Violation,
    /// Counters up to the failure.
    pub report: Box<Report>,
}

impl Failure {
    /// The shell command that replays this seed with a full trace.
    pub fn replay_command(&self) -> String {
        let scen = if Scenario::for_seed(self.seed).name == self.scenario {
            String::new()
        } else {
            format!("VIPC_SIM_SCENARIO={} ", self.scenario)
        };
        format!(
            "VIPC_SIM_SEED={} {scen}VIPC_SIM_TRACE=1 cargo test -p vipc-sim --test sim -- replay --ignored --nocapture",
            self.seed
        )
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed {} failed: {} [scenario {}]; replay with: {}",
            self.seed,
            self.violation,
            self.scenario,
            self.replay_command()
        )
    }
}

impl std::error::Error for Failure {}
