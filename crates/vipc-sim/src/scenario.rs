//! Scenarios: which faults the network injects and how hard the workload pushes.

use std::time::Duration;

/// How the nodes get their logical host ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostIds {
    /// Node `i` is configured with `HostIdConfig::Fixed(i + 1)`.
    Fixed,
    /// Announcement–complaint. Node 0 is configured with the id node 1 would
    /// pick first (found by a dry run of node 1's engine), so at least one
    /// complaint is certain; the ids must be distinct at the end.
    Allocate,
}

/// One kind of simulated world. Every field is an upper bound or a probability;
/// each seed draws its concrete values from them.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    /// Short name, used by `VIPC_SIM_SCENARIO` and in failure messages.
    pub name: &'static str,
    /// Fewest nodes.
    pub min_nodes: usize,
    /// Most nodes.
    pub max_nodes: usize,
    /// How host ids are assigned.
    pub host_ids: HostIds,
    /// Per-datagram loss probability (each seed uses a value in `[loss/2, loss]`).
    pub loss: f64,
    /// Probability that a datagram is delivered twice.
    pub duplicate: f64,
    /// Probability that a datagram is held back by up to `reorder_delay`.
    pub reorder: f64,
    /// The extra delay of a reordered datagram, at most.
    pub reorder_delay: Duration,
    /// Probability that a delivered datagram is damaged (one byte of message
    /// or data flipped). Without a key the engine cannot notice (the tests use
    /// it to show the checks catch damaged data); with a key the MAC must.
    pub corrupt: f64,
    /// Cut links between groups of nodes for random intervals.
    pub partitions: bool,
    /// Crash nodes (their engines are dropped with all their state).
    pub crashes: bool,
    /// Restart crashed nodes (same fixed host id, fresh engine) after a while.
    pub restarts: bool,
    /// Destroy random processes (and create replacements).
    pub destroy: bool,
    /// At most this many destructions per run.
    pub destroys: usize,
    /// Fraction of requests that lend the server a segment.
    pub segments: f64,
    /// Fraction of requests sent idempotent (at-least-once).
    pub idempotent: f64,
    /// Fraction of requests sent to a pid that does not exist (a local id
    /// never handed out, or a host no node has).
    pub bad_targets: f64,
    /// Servers sometimes misuse the API on purpose (a reply after forwarding,
    /// a move from a client awaiting another server) and expect typed errors.
    pub probes: bool,
    /// Probability that a move to a remote client lends the server's buffer
    /// (`move_to_lent`, `move_from_lent`) instead of copying.
    pub lent: f64,
    /// Every packet carries a MAC under a cluster key.
    pub keyed: bool,
    /// Engine `loopback_packet`: bulk chunks to (virtual) loopback peers may be
    /// this large instead of `max_packet`.
    pub loopback_packet: Option<usize>,
    /// Probability that a segment is 1 MiB (otherwise up to 64 KiB).
    pub big_segment: f64,
    /// Most clients per node (at least one).
    pub max_clients: usize,
    /// Engine `max_aliens`: remote senders' exchanges held at once.
    pub max_aliens: usize,
    /// Engine `buffer_limit`: appended data kept for receivers not yet waiting.
    pub buffer_limit: usize,
    /// How long the application issues new calls.
    pub workload: Duration,
    /// How long the run continues at least after the workload stops (and
    /// faults heal) before the final checks; longer while calls are
    /// outstanding (up to 40 s), and at least 3 s after the last completion.
    pub drain: Duration,
    /// A group workload (`groups`, `reliable`, ...) instead of the
    /// request/reply one: see [`GroupLoad`] and `crate::groups`.
    pub group: Option<GroupLoad>,
    /// A remote-memory workload (`rmem-calm`, `rmem`) instead of the
    /// request/reply one: see `crate::rmem`.
    pub rmem: bool,
    /// Owners unexport data segments and export them again (same name, new
    /// generation) during an rmem run.
    pub rmem_unexport: bool,
}

/// The group workload of a scenario: senders sending to one group in every
/// reply and reliable mode, members on every node, and the group faults.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupLoad {
    /// Fraction of sends in a reliable mode (K_REPLY, ALL_REPLY, K_DELIVER,
    /// ALL_DELIVER); the others use reply mode None, One or Many.
    pub reliable: f64,
    /// Probability that a member replies only after 1.2–2.5 s (longer than
    /// T_t: the breath of life must keep the send alive).
    pub slow: f64,
    /// New members join while sends are under way.
    pub churn: bool,
    /// Some members leave the group (while possibly holding an unreceived
    /// copy) while sends are under way.
    pub leaves: bool,
    /// Most members per node (node 0 always has at least one).
    pub max_members: usize,
    /// Some nodes (at least one, never all) get this `max_aliens`, so that
    /// copies for their members run out: NACKs.
    pub tight_aliens: Option<usize>,
    /// Every ALL mode must be met and every K mode with K no larger than the
    /// members that stayed put must be met (a network with at most this
    /// scenario's loss, no crashes and no exhaustion promises that).
    pub must_meet: bool,
    /// Each node's I-Am-Here period is drawn from this range (milliseconds,
    /// inclusive): nodes announcing different periods must not declare each
    /// other down while they are heard (PROTOCOL §4.12).
    pub alive_ms: (u64, u64),
    /// A slow member replies after this many milliseconds (drawn uniformly).
    pub slow_ms: (u64, u64),
}

impl Scenario {
    /// Reliable network: no loss, duplication, reordering, partitions or crashes.
    /// Every failure must be explained by a destroyed process or a bad pid.
    pub fn calm() -> Scenario {
        Scenario {
            name: "calm",
            min_nodes: 3,
            max_nodes: 6,
            host_ids: HostIds::Fixed,
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::ZERO,
            corrupt: 0.0,
            partitions: false,
            crashes: false,
            restarts: false,
            destroy: true,
            destroys: 4,
            segments: 0.6,
            idempotent: 0.3,
            probes: true,
            lent: 0.5,
            keyed: false,
            loopback_packet: None,
            bad_targets: 0.12,
            big_segment: 0.01,
            max_clients: 3,
            max_aliens: 4096,
            buffer_limit: 4 << 20,
            workload: Duration::from_millis(1500),
            drain: Duration::from_secs(1),
            group: None,
            rmem: false,
            rmem_unexport: false,
        }
    }

    /// 10% loss with duplication and reordering.
    pub fn lossy() -> Scenario {
        Scenario {
            name: "lossy",
            loss: 0.10,
            duplicate: 0.05,
            reorder: 0.10,
            reorder_delay: Duration::from_millis(5),
            ..Scenario::calm()
        }
    }

    /// 30% loss with duplication and reordering.
    pub fn heavy_loss() -> Scenario {
        Scenario {
            name: "heavy-loss",
            loss: 0.30,
            duplicate: 0.10,
            reorder: 0.20,
            reorder_delay: Duration::from_millis(10),
            ..Scenario::calm()
        }
    }

    /// Light loss plus network partitions, some longer than T_t.
    pub fn partitions() -> Scenario {
        Scenario {
            name: "partitions",
            loss: 0.05,
            duplicate: 0.02,
            reorder: 0.05,
            reorder_delay: Duration::from_millis(5),
            partitions: true,
            ..Scenario::calm()
        }
    }

    /// Light loss plus node crashes, most followed by a restart.
    pub fn crashes() -> Scenario {
        Scenario {
            name: "crashes",
            loss: 0.05,
            duplicate: 0.02,
            reorder: 0.05,
            reorder_delay: Duration::from_millis(5),
            crashes: true,
            restarts: true,
            ..Scenario::calm()
        }
    }

    /// Host ids by announcement–complaint (with a forced collision), then the
    /// usual workload on a network with duplication and reordering but no loss.
    pub fn allocate() -> Scenario {
        Scenario {
            name: "allocate",
            host_ids: HostIds::Allocate,
            duplicate: 0.05,
            reorder: 0.10,
            reorder_delay: Duration::from_millis(5),
            ..Scenario::calm()
        }
    }

    /// Many clients on 5–6 nodes against engines with room for only 3 aliens
    /// and 2 KiB of appended data: senders wait in replyPending, appended
    /// data is dropped; light loss; many processes destroyed.
    pub fn crowded() -> Scenario {
        Scenario {
            name: "crowded",
            min_nodes: 5,
            max_nodes: 6,
            loss: 0.05,
            duplicate: 0.02,
            reorder: 0.05,
            reorder_delay: Duration::from_millis(5),
            max_clients: 5,
            destroys: 12,
            max_aliens: 3,
            buffer_limit: 2 << 10,
            ..Scenario::calm()
        }
    }

    /// Bulk transfers: most requests lend a segment, 6% of them 1 MiB, on
    /// 3–4 nodes with 20% loss, duplication and reordering, in 64 KiB chunks
    /// (`loopback_packet`).
    pub fn bulk() -> Scenario {
        Scenario {
            name: "bulk",
            min_nodes: 3,
            max_nodes: 4,
            loss: 0.20,
            duplicate: 0.05,
            reorder: 0.10,
            reorder_delay: Duration::from_millis(5),
            segments: 0.9,
            big_segment: 0.06,
            loopback_packet: Some(65_507),
            workload: Duration::from_millis(1000),
            ..Scenario::calm()
        }
    }

    /// A cluster key: every packet is MACed; 10% loss, duplication,
    /// reordering, and 1% of datagrams damaged, which the MAC must reject.
    pub fn keyed() -> Scenario {
        Scenario {
            name: "keyed",
            keyed: true,
            loss: 0.10,
            duplicate: 0.05,
            reorder: 0.10,
            reorder_delay: Duration::from_millis(5),
            corrupt: 0.01,
            ..Scenario::calm()
        }
    }

    fn group_base(name: &'static str, load: GroupLoad) -> Scenario {
        Scenario {
            name,
            min_nodes: 3,
            max_nodes: 6,
            destroy: false,
            probes: false,
            bad_targets: 0.0,
            segments: 0.0,
            workload: Duration::from_millis(2500),
            group: Some(load),
            ..Scenario::calm()
        }
    }

    /// Groups on a perfect network, members joining mid-send but none
    /// leaving: every ALL mode, every K mode with K no larger than the
    /// members, and every One/Many send must be met (slow repliers included:
    /// the breath of life keeps their sends alive past T_t).
    pub fn groups_calm() -> Scenario {
        let load = GroupLoad {
            reliable: 0.5,
            slow: 0.03,
            churn: true,
            leaves: false,
            max_members: 3,
            tight_aliens: None,
            must_meet: true,
            alive_ms: (100, 100),
            slow_ms: (1200, 2500),
        };
        Scenario::group_base("groups-calm", load)
    }

    /// Group sends in every mode under 10% loss, duplication and reordering,
    /// slow repliers, members joining and leaving mid-send; no crashes, so
    /// every ALL mode must still be met.
    pub fn groups() -> Scenario {
        Scenario {
            loss: 0.10,
            duplicate: 0.05,
            reorder: 0.10,
            reorder_delay: Duration::from_millis(5),
            ..Scenario::group_base(
                "groups",
                GroupLoad {
                    reliable: 0.5,
                    slow: 0.03,
                    churn: true,
                    leaves: true,
                    max_members: 3,
                    tight_aliens: None,
                    must_meet: true,
                    alive_ms: (50, 400),
                    slow_ms: (1200, 2500),
                },
            )
        }
    }

    /// Group sends in every mode while the network is partitioned (two-way
    /// and one-way cuts of 50 ms to 3.5 s, longer than 2·T_t) under 5% loss,
    /// with members that work up to 4.5 s (so that sends outlive a cut of
    /// their copies' lifetime), members joining and leaving, and nodes
    /// announcing I-Am-Here every 50–400 ms. A member gets a reliable Send
    /// once whatever the cuts; a plain one twice only after a cut of 2·T_t.
    pub fn group_partitions() -> Scenario {
        Scenario {
            loss: 0.05,
            duplicate: 0.03,
            reorder: 0.05,
            reorder_delay: Duration::from_millis(5),
            partitions: true,
            ..Scenario::group_base(
                "group-partitions",
                GroupLoad {
                    reliable: 0.6,
                    slow: 0.08,
                    churn: true,
                    leaves: true,
                    max_members: 3,
                    tight_aliens: None,
                    must_meet: true,
                    alive_ms: (50, 400),
                    slow_ms: (1200, 4500),
                },
            )
        }
    }

    /// Copy exhaustion (1–2 aliens on some nodes) under 10–20% loss: NACKing hosts must still resend the
    /// replies their members made (K modes count them) and keep slow
    /// members' sends alive; periods 50–400 ms.
    pub fn exhaust_lossy() -> Scenario {
        Scenario {
            name: "exhaust-lossy",
            loss: 0.20,
            duplicate: 0.05,
            reorder: 0.10,
            reorder_delay: Duration::from_millis(5),
            group: Some(GroupLoad {
                alive_ms: (50, 400),
                tight_aliens: Some(2),
                slow: 0.08,
                ..Scenario::exhaust().group.expect("a group load")
            }),
            ..Scenario::exhaust()
        }
    }

    /// Reliable sends only, under 5% loss, while member hosts crash and
    /// restart (members join again on the new incarnation) mid-send.
    pub fn reliable_crashes() -> Scenario {
        Scenario {
            loss: 0.05,
            duplicate: 0.03,
            reorder: 0.05,
            reorder_delay: Duration::from_millis(5),
            crashes: true,
            restarts: true,
            ..Scenario::group_base(
                "reliable-crashes",
                GroupLoad {
                    reliable: 0.9,
                    slow: 0.03,
                    churn: true,
                    leaves: true,
                    max_members: 3,
                    tight_aliens: None,
                    must_meet: false,
                    alive_ms: (50, 400),
                    slow_ms: (1200, 2500),
                },
            )
        }
    }

    /// Copy exhaustion: some nodes hold at most 1–2 aliens, members are often
    /// slow, so their node NACKs: ALL modes fail, K modes can still succeed.
    /// Light duplication and reordering, no loss.
    pub fn exhaust() -> Scenario {
        Scenario {
            duplicate: 0.03,
            reorder: 0.05,
            reorder_delay: Duration::from_millis(5),
            min_nodes: 3,
            max_nodes: 5,
            ..Scenario::group_base(
                "exhaust",
                GroupLoad {
                    reliable: 0.9,
                    slow: 0.15,
                    churn: false,
                    leaves: false,
                    max_members: 3,
                    tight_aliens: Some(1),
                    must_meet: false,
                    alive_ms: (100, 100),
                    slow_ms: (1200, 2500),
                },
            )
        }
    }

    fn rmem_base(name: &'static str) -> Scenario {
        Scenario {
            name,
            min_nodes: 3,
            max_nodes: 5,
            destroy: false,
            probes: false,
            bad_targets: 0.0,
            segments: 0.0,
            workload: Duration::from_millis(1500),
            drain: Duration::from_millis(500),
            rmem: true,
            rmem_unexport: true,
            ..Scenario::calm()
        }
    }

    /// Remote memory on a network with 1% loss and duplication and a little
    /// reordering: every operation kind, refusal, notify policy, inhibited
    /// range, unexport and re-export (see `crate::rmem`).
    pub fn rmem_calm() -> Scenario {
        Scenario {
            loss: 0.01,
            duplicate: 0.01,
            reorder: 0.05,
            reorder_delay: Duration::from_millis(2),
            ..Scenario::rmem_base("rmem-calm")
        }
    }

    /// Remote memory under 10% loss, duplication, reordering, partitions
    /// (some longer than `rmem_timeout`) and owner crashes and restarts.
    pub fn rmem() -> Scenario {
        Scenario {
            loss: 0.10,
            duplicate: 0.05,
            reorder: 0.10,
            reorder_delay: Duration::from_millis(5),
            partitions: true,
            crashes: true,
            restarts: true,
            ..Scenario::rmem_base("rmem")
        }
    }

    /// The remote-memory scenarios, run by their own tests.
    pub fn rmem_suite() -> Vec<Scenario> {
        vec![Scenario::rmem_calm(), Scenario::rmem()]
    }

    /// The group scenarios, run by their own tests (their seeds do not
    /// shift the round-robin mapping of [`Scenario::all`]).
    pub fn group_suite() -> Vec<Scenario> {
        vec![
            Scenario::groups_calm(),
            Scenario::groups(),
            Scenario::reliable_crashes(),
            Scenario::exhaust(),
            Scenario::group_partitions(),
            Scenario::exhaust_lossy(),
        ]
    }

    /// Every scenario of the standard suite, in seed order: seed `s` belongs to
    /// `all()[s % all().len()]`.
    pub fn all() -> Vec<Scenario> {
        vec![
            Scenario::calm(),
            Scenario::lossy(),
            Scenario::heavy_loss(),
            Scenario::partitions(),
            Scenario::crashes(),
            Scenario::allocate(),
            Scenario::crowded(),
            Scenario::bulk(),
            Scenario::keyed(),
        ]
    }

    /// The scenario of the standard suite that seed `seed` runs.
    pub fn for_seed(seed: u64) -> Scenario {
        let all = Scenario::all();
        let n = all.len() as u64;
        all.into_iter().nth((seed % n) as usize).expect("non-empty suite")
    }

    /// A scenario of the standard suite by name.
    pub fn by_name(name: &str) -> Option<Scenario> {
        Scenario::all()
            .into_iter()
            .chain(Scenario::group_suite())
            .chain(Scenario::rmem_suite())
            .find(|s| s.name == name)
    }

    /// Applies comma-separated tweaks that switch parts of the workload off,
    /// to narrow down a failure: `no-destroy`, `no-idempotent`,
    /// `no-bad-targets`, `no-segments`, `no-probes`.
    pub fn tweak(&mut self, tweaks: &str) -> Result<(), String> {
        for t in tweaks.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            match t {
                "no-destroy" => self.destroy = false,
                "no-idempotent" => self.idempotent = 0.0,
                "no-bad-targets" => self.bad_targets = 0.0,
                "no-segments" => self.segments = 0.0,
                "no-probes" => self.probes = false,
                "no-leave" => {
                    if let Some(g) = self.group.as_mut() {
                        g.leaves = false
                    }
                }
                other => {
                    return Err(format!(
                        "unknown tweak {other:?} (no-destroy, no-idempotent, no-bad-targets, no-segments, no-probes, no-leave)"
                    ))
                }
            }
        }
        Ok(())
    }

    /// True if the network never loses a datagram for good: no loss,
    /// partitions or crashes. Then every remote GetPid of a live name must
    /// succeed, and no timeout is ever acceptable.
    pub fn reliable(&self) -> bool {
        self.loss == 0.0 && !self.partitions && !self.crashes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suite_names_are_unique_and_seeds_map_round_robin() {
        let all = Scenario::all();
        for (i, s) in all.iter().enumerate() {
            assert_eq!(Scenario::by_name(s.name).as_ref(), Some(s));
            assert_eq!(Scenario::for_seed(i as u64).name, s.name);
            assert_eq!(Scenario::for_seed((i + all.len()) as u64).name, s.name);
        }
        assert!(Scenario::calm().reliable());
        assert!(!Scenario::lossy().reliable());
        assert!(Scenario::by_name("nope").is_none());
        let mut s = Scenario::calm();
        s.tweak("no-destroy, no-idempotent,no-bad-targets,no-segments").unwrap();
        assert!(!s.destroy && s.idempotent == 0.0 && s.bad_targets == 0.0 && s.segments == 0.0);
        assert!(s.tweak("no-such").is_err());
    }
}
