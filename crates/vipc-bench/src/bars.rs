//! The bars of issues 3 to 7 as explicit checks on the records of a run.

use crate::record::Record;

/// How a bar compares.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cmp {
    /// At most the limit.
    AtMost,
    /// At least the limit.
    AtLeast,
    /// Equal to the limit within ±0.01 (packet counts averaged over many operations).
    Exactly,
}

/// Which figure of a record a bar checks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Field {
    /// `value / baseline_value`.
    Ratio,
    /// `value` itself (absolute).
    Value,
}

/// One bar.
#[derive(Clone, Copy, Debug)]
pub struct Bar {
    /// What it says, e.g. `remote SRR / UDP ping-pong`.
    pub what: &'static str,
    /// The record it reads.
    pub record: &'static str,
    /// The record's baseline, where a suite records one figure against
    /// several (`None`: the first record of that name).
    pub baseline: Option<&'static str>,
    /// Ratio or value.
    pub field: Field,
    /// The comparison.
    pub cmp: Cmp,
    /// The limit.
    pub limit: f64,
}

/// The bars of issue 3.
pub const BARS: &[Bar] = &[
    Bar {
        what: "remote SRR / UDP ping-pong",
        record: "srr_remote_32B",
        baseline: Some("udp_pingpong_32B"),
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 1.15,
    },
    Bar {
        what: "remote SRR (poll_spin) / busy-poll UDP ping-pong",
        record: "srr_remote_32B_spin",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 1.2,
    },
    Bar {
        what: "local SRR / condvar hand-off",
        record: "srr_local_32B",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 1.5,
    },
    Bar {
        what: "local SRR (poll_spin), us",
        record: "srr_local_32B_spin",
        baseline: None,
        field: Field::Value,
        cmp: Cmp::AtMost,
        limit: 2.0,
    },
    Bar {
        what: "remote SRR / gRPC unary",
        record: "srr_remote_32B_vs_grpc",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 0.2,
    },
    Bar {
        what: "remote SRR / ZeroMQ REQ/REP",
        record: "srr_remote_32B_vs_zmq",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 0.4,
    },
    Bar {
        what: "MoveTo 1 MiB / TCP bulk",
        record: "moveto_remote_1MiB",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtLeast,
        limit: 0.8,
    },
    Bar {
        what: "MoveTo 16 MiB / TCP bulk",
        record: "moveto_remote_16MiB",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtLeast,
        limit: 0.8,
    },
    Bar {
        what: "MoveFrom 1 MiB / TCP bulk",
        record: "movefrom_remote_1MiB",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtLeast,
        limit: 0.8,
    },
    Bar {
        what: "MoveFrom 16 MiB / TCP bulk",
        record: "movefrom_remote_16MiB",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtLeast,
        limit: 0.8,
    },
    Bar {
        what: "64 KB read: 1 KB units / 64 KB units",
        record: "read64k_unit_1KB_vs_64KB",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtLeast,
        limit: 3.0,
    },
    Bar {
        what: "packets per remote exchange",
        record: "packets_per_exchange_remote",
        baseline: None,
        field: Field::Value,
        cmp: Cmp::Exactly,
        limit: 2.0,
    },
    Bar {
        what: "packets per page read 512 B",
        record: "page_read_512B_packets",
        baseline: None,
        field: Field::Value,
        cmp: Cmp::Exactly,
        limit: 2.0,
    },
    Bar {
        what: "packets per page read 4 KB",
        record: "page_read_4KB_packets",
        baseline: None,
        field: Field::Value,
        cmp: Cmp::Exactly,
        limit: 2.0,
    },
    Bar {
        what: "packets per page write 512 B",
        record: "page_write_512B_packets",
        baseline: None,
        field: Field::Value,
        cmp: Cmp::Exactly,
        limit: 2.0,
    },
    Bar {
        what: "packets per page write 4 KB",
        record: "page_write_4KB_packets",
        baseline: None,
        field: Field::Value,
        cmp: Cmp::Exactly,
        limit: 2.0,
    },
    Bar {
        what: "server RSS holding 1,000 remote exchanges, MB",
        record: "server_rss_1000_held",
        baseline: None,
        field: Field::Value,
        cmp: Cmp::AtMost,
        limit: 50.0,
    },
    // Issue 4 (suite `files`): vipc's file service against sshfs on the same machine.
    Bar {
        what: "files: 4 KB page read via library / (remote SRR + local pread)",
        record: "files_page_read_4KB_lib_vs_srr_pread",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 1.3,
    },
    Bar {
        what: "files: random 4 KB reads/s, mount / sshfs (no caching), 1 reader",
        record: "files_randread_4KB_1r_mount_vs_sshfs",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtLeast,
        limit: 3.0,
    },
    Bar {
        what: "files: random 4 KB reads/s, mount / sshfs (no caching), 4 readers",
        record: "files_randread_4KB_4r_mount_vs_sshfs",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtLeast,
        limit: 3.0,
    },
    Bar {
        what: "files: random 4 KB reads/s, mount / sshfs (no caching), 16 readers",
        record: "files_randread_4KB_16r_mount_vs_sshfs",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtLeast,
        limit: 3.0,
    },
    Bar {
        what: "files: sequential read, mount / sshfs (no caching)",
        record: "files_seqread_mount_vs_sshfs",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtLeast,
        limit: 3.0,
    },
    Bar {
        what: "files: vipc cp / MoveFrom bulk rate",
        record: "files_cp_vs_movefrom",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtLeast,
        limit: 0.8,
    },
    Bar {
        what: "files: find time, mount / sshfs (default caching)",
        record: "files_find_mount_vs_sshfs",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 0.5,
    },
    Bar {
        what: "files: du -s time, mount / sshfs (default caching)",
        record: "files_du_mount_vs_sshfs",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 0.5,
    },
    Bar {
        what: "files: tar c time, mount / sshfs (default caching)",
        record: "files_tar_c_mount_vs_sshfs",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 0.5,
    },
    Bar {
        what: "files: untar time, mount / sshfs (default caching)",
        record: "files_untar_mount_vs_sshfs",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 0.5,
    },
    Bar {
        what: "groups: ALL_REPLY to 8 members / unicast exchange",
        record: "all_reply_8",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 2.5,
    },
    Bar {
        what: "groups: ALL_REPLY / 1-reliable, 2 members",
        record: "all_reply_vs_k1_2",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 1.10,
    },
    Bar {
        what: "groups: ALL_REPLY / 1-reliable, 4 members",
        record: "all_reply_vs_k1_4",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 1.10,
    },
    Bar {
        what: "groups: ALL_REPLY / 1-reliable, 8 members",
        record: "all_reply_vs_k1_8",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 1.10,
    },
    Bar {
        what: "groups: ALL_REPLY / 1-reliable, 16 members",
        record: "all_reply_vs_k1_16",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 1.10,
    },
    Bar {
        what: "groups: ALL_REPLY / series of unicasts, 2 members",
        record: "all_reply_vs_series_2",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 1.0,
    },
    Bar {
        what: "groups: ALL_REPLY / series of unicasts, 4 members",
        record: "all_reply_vs_series_4",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 1.0,
    },
    Bar {
        what: "groups: ALL_REPLY / series of unicasts, 8 members",
        record: "all_reply_vs_series_8",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 1.0,
    },
    Bar {
        what: "groups: ALL_REPLY / series of unicasts, 16 members",
        record: "all_reply_vs_series_16",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 1.0,
    },
    Bar {
        what: "groups: packets per ALL_REPLY / formula, 2 members",
        record: "packets_all_reply_2",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::Exactly,
        limit: 1.0,
    },
    Bar {
        what: "groups: packets per ALL_DELIVER / formula, 2 members",
        record: "packets_all_deliver_2",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::Exactly,
        limit: 1.0,
    },
    Bar {
        what: "groups: packets per ALL_REPLY / formula, 4 members",
        record: "packets_all_reply_4",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::Exactly,
        limit: 1.0,
    },
    Bar {
        what: "groups: packets per ALL_DELIVER / formula, 4 members",
        record: "packets_all_deliver_4",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::Exactly,
        limit: 1.0,
    },
    Bar {
        what: "groups: packets per ALL_REPLY / formula, 8 members",
        record: "packets_all_reply_8",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::Exactly,
        limit: 1.0,
    },
    Bar {
        what: "groups: packets per ALL_DELIVER / formula, 8 members",
        record: "packets_all_deliver_8",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::Exactly,
        limit: 1.0,
    },
    Bar {
        what: "groups: packets per ALL_REPLY / formula, 16 members",
        record: "packets_all_reply_16",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::Exactly,
        limit: 1.0,
    },
    Bar {
        what: "groups: packets per ALL_DELIVER / formula, 16 members",
        record: "packets_all_deliver_16",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::Exactly,
        limit: 1.0,
    },
    Bar {
        what: "groups: packets per datagram / formula, 2 members",
        record: "packets_datagram_2",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::Exactly,
        limit: 1.0,
    },
    Bar {
        what: "groups: packets per series of unicasts / formula, 2 members",
        record: "packets_series_2",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::Exactly,
        limit: 1.0,
    },
    Bar {
        what: "groups: packets per datagram / formula, 4 members",
        record: "packets_datagram_4",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::Exactly,
        limit: 1.0,
    },
    Bar {
        what: "groups: packets per series of unicasts / formula, 4 members",
        record: "packets_series_4",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::Exactly,
        limit: 1.0,
    },
    Bar {
        what: "groups: packets per datagram / formula, 8 members",
        record: "packets_datagram_8",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::Exactly,
        limit: 1.0,
    },
    Bar {
        what: "groups: packets per series of unicasts / formula, 8 members",
        record: "packets_series_8",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::Exactly,
        limit: 1.0,
    },
    Bar {
        what: "groups: packets per datagram / formula, 16 members",
        record: "packets_datagram_16",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::Exactly,
        limit: 1.0,
    },
    Bar {
        what: "groups: packets per series of unicasts / formula, 16 members",
        record: "packets_series_16",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::Exactly,
        limit: 1.0,
    },
    Bar {
        what: "groups: SIGKILLed host declared down, ms",
        record: "down_detect_ms",
        baseline: None,
        field: Field::Value,
        cmp: Cmp::AtMost,
        limit: 500.0,
    },
    Bar {
        what: "groups: live hosts declared down in the soak",
        record: "soak_false_downs",
        baseline: None,
        field: Field::Value,
        cmp: Cmp::AtMost,
        limit: 0.0,
    },
    Bar {
        what: "rmem: remote read 8 B / UDP exchange with the same answer",
        record: "rmem_read_8B",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 1.1,
    },
    Bar {
        what: "rmem: remote read 64 B / UDP exchange with the same answer",
        record: "rmem_read_64B",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 1.1,
    },
    Bar {
        what: "rmem: remote read 1 KB / UDP exchange with the same answer",
        record: "rmem_read_1KB",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 1.1,
    },
    Bar {
        what: "rmem: remote read 8 KB / UDP exchange with the same answer",
        record: "rmem_read_8KB",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 1.1,
    },
    Bar {
        what: "rmem: remote read 32 KB / UDP exchange with the same answer",
        record: "rmem_read_32KB",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 1.1,
    },
    Bar {
        what: "rmem: remote read 64 KB / UDP exchange with the same answer",
        record: "rmem_read_64KB",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 1.1,
    },
    Bar {
        what: "rmem: CAS-II / UDP ping-pong 32 B",
        record: "rmem_cas",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 1.1,
    },
    Bar {
        what: "rmem: issuing a remote write of 8B, µs",
        record: "rmem_write_issue_8B",
        baseline: None,
        field: Field::Value,
        cmp: Cmp::AtMost,
        limit: 2.0,
    },
    Bar {
        what: "rmem: issuing a remote write of 1KB, µs",
        record: "rmem_write_issue_1KB",
        baseline: None,
        field: Field::Value,
        cmp: Cmp::AtMost,
        limit: 2.0,
    },
    Bar {
        what: "rmem: issuing a remote write of 8KB, µs",
        record: "rmem_write_issue_8KB",
        baseline: None,
        field: Field::Value,
        cmp: Cmp::AtMost,
        limit: 2.0,
    },
    Bar {
        what: "rmem: block read 1 MiB / TCP bulk",
        record: "rmem_block_read_1MiB",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtLeast,
        limit: 0.8,
    },
    Bar {
        what: "rmem: block write 1 MiB / TCP bulk",
        record: "rmem_block_write_1MiB",
        baseline: None,
        field: Field::Ratio,
        cmp: Cmp::AtLeast,
        limit: 0.8,
    },
    Bar {
        what: "typed: typed call with small arguments / Send-Receive-Reply",
        record: "typed_call_remote",
        baseline: Some("srr_remote_32B"),
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 1.1,
    },
    Bar {
        what: "typed: remote variable read / remote read 8 B",
        record: "var_read_word",
        baseline: Some("rmem_read_8B"),
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 1.1,
    },
    Bar {
        // 003's nodes were machines: the bar reads the workers in processes
        // (`ising_80_p4` keeps the figure of the workers as threads of one process).
        what: "rmem: Ising 80x80 sweep on 4 nodes in processes / on 1 (003 Table 6.3: speedup 3.6)",
        record: "ising_80_p4_procs",
        baseline: Some("ising_80_p1"),
        field: Field::Ratio,
        cmp: Cmp::AtMost,
        limit: 1.0,
    },
];

/// The outcome of one bar.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    /// What the bar says.
    pub what: String,
    /// The measured figure, if the run measured it.
    pub measured: Option<f64>,
    /// The comparison and limit as text, e.g. `≤ 1.15`.
    pub bar: String,
    /// Pass, fail, or not measured (`None`).
    pub pass: Option<bool>,
}

impl Check {
    /// `remote SRR / UDP ping-pong = 1.08 (bar ≤ 1.15) PASS`.
    pub fn line(&self) -> String {
        match (self.measured, self.pass) {
            (Some(v), Some(p)) => {
                format!("{} = {v:.3} (bar {}) {}", self.what, self.bar, if p { "PASS" } else { "FAIL" })
            }
            _ => format!("{} (bar {}) not measured", self.what, self.bar),
        }
    }
}

/// Checks every bar against `records`.
pub fn check(records: &[Record]) -> Vec<Check> {
    BARS.iter()
        .map(|b| {
            let measured = records
                .iter()
                .find(|r| r.name == b.record && b.baseline.is_none_or(|base| r.baseline == base))
                .map(|r| match b.field {
                    Field::Ratio => r.ratio,
                    Field::Value => r.value,
                });
            let (sym, pass) = match b.cmp {
                Cmp::AtMost => ("≤", measured.map(|v| v <= b.limit)),
                Cmp::AtLeast => ("≥", measured.map(|v| v >= b.limit)),
                Cmp::Exactly => ("=", measured.map(|v| (v - b.limit).abs() <= 0.01)),
            };
            Check { what: b.what.to_string(), measured, bar: format!("{sym} {}", b.limit), pass }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_pass_fail_and_missing() {
        let rs = vec![
            Record::new("ipc", "srr_remote_32B", 21.6, "us", "udp_pingpong_32B", 20.0),
            Record::new("ipc", "moveto_remote_1MiB", 500.0, "MB/s", "tcp_bulk_1MiB", 1000.0),
            Record::new("ipc", "packets_per_exchange_remote", 2.0, "packets", "udp_pingpong_packets", 2.0),
            Record::new("ipc", "page_read_4KB_packets", 4.0, "packets", "udp_page_packets", 2.0),
            Record::new("typed", "typed_call_remote", 30.0, "us", "port_call_on_return", 50.0),
            Record::new("typed", "typed_call_remote", 30.0, "us", "srr_remote_32B", 25.0),
        ];
        let c = check(&rs);
        let get = |what: &str| c.iter().find(|c| c.what == what).unwrap().clone();
        let srr = get("remote SRR / UDP ping-pong");
        assert_eq!(srr.pass, Some(true));
        assert_eq!(srr.line(), "remote SRR / UDP ping-pong = 1.080 (bar ≤ 1.15) PASS");
        assert_eq!(get("MoveTo 1 MiB / TCP bulk").pass, Some(false));
        assert!(get("MoveTo 1 MiB / TCP bulk").line().ends_with("FAIL"));
        assert_eq!(get("packets per remote exchange").pass, Some(true));
        assert_eq!(get("packets per page read 4 KB").pass, Some(false));
        // A bar naming its baseline reads that record, not the first of the name.
        let typed = get("typed: typed call with small arguments / Send-Receive-Reply");
        assert_eq!((typed.measured, typed.pass), (Some(1.2), Some(false)));
        let missing = get("local SRR / condvar hand-off");
        assert_eq!(missing.pass, None);
        assert!(missing.line().ends_with("not measured"));
        // Every bar names a record the suite emits (checked against the suite's names).
        for b in BARS {
            assert!(!b.record.is_empty());
        }
    }
}
