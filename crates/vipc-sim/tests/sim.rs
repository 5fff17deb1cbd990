//! The deterministic simulation suite: `VIPC_SIM_SEEDS` seeds (default 1000)
//! spread round-robin over the scenarios, plus seed replay.
//!
//! - `VIPC_SIM_SEEDS=N`: how many seeds in all (seed `s` runs scenario `s % 9`, see `Scenario::all`).
//! - `VIPC_SIM_SEED_BASE=B`: start at seed `B` instead of 0 (to explore new seeds).
//! - `VIPC_SIM_SEED=N [VIPC_SIM_SCENARIO=name] [VIPC_SIM_TRACE=1]`: the `replay`
//!   test runs just that seed, optionally tracing every datagram and event
//!   (`VIPC_SIM_TWEAK=no-destroy,no-idempotent,no-bad-targets,no-segments,no-probes`
//!   switches parts of the workload off, as the `explore` example's `--tweak` does).
//!
//! # Engine bugs this suite found (all fixed)
//!
//! - B1: a stale MoveFrom/MoveTo (from a re-executed idempotent request, or
//!   after the client timed out) was checked on the client's node against the
//!   client's *next* exchange: wrong data read, segments overwritten.
//! - B2: `destroy_process` iterated `HashMap`s with random order: runs were not
//!   reproducible.
//! - B3: a sender's sequence number was forgotten once its alien was freed
//!   (nAck of its next Send, Cancel, destroyed forward target): a late
//!   retransmission of a non-idempotent request was executed again.
//!   (B1-B3 fixed in 2bfd7f6.)
//! - B4: a MoveFrom stream read in place from the client's segment was
//!   removed by `send_chunk` once the exchange ended, and its callers then
//!   panicked ("present", `bulk.rs`). Fixed in fc2178c.
//!
//! # Group scenarios (`groups-calm`, `groups`, `reliable-crashes`, `exhaust`)
//!
//! Run by [`group_suite`]: `VIPC_SIM_GROUP_SEEDS` seeds per scenario
//! (default 250, seeds 0..N with `VIPC_SIM_SEED_BASE`); replay one with
//! `VIPC_SIM_SEED=N VIPC_SIM_SCENARIO=groups VIPC_SIM_TRACE=1 cargo test -p vipc-sim --test sim -- replay --ignored --nocapture`
//! (the failure message prints it). Engine bugs these scenarios found, fixed:
//!
//! - B5: ALL_REPLY was decided on the aggregate `count >= receivers`, so
//!   surplus replies from one host (a member that joined and got a
//!   retransmission, members that left after replying and then an ACK 0, or
//!   replies from hosts outside the snapshot) could mask a missing reply from
//!   another. Now replies are counted per host, only from the sender's own
//!   host and snapshot hosts, and ALL_REPLY needs every host's replies to
//!   reach its acknowledged count (the larger of repeated counts).
//!   Seeds: `groups` 15, 28 (`no-leave`), `reliable-crashes` 0 (`no-leave`).
//! - B7: a node short of room NACKs, but a member's reply then carried a plain
//!   GROUP_ACK with the partial count, which could arrive first and satisfy
//!   ALL. Now that acknowledgement carries NACK too. Seed: `exhaust` 145.
//!
//! B6, once judged not a bug, was one (fixed in e32cb05 with four other
//! group bugs a reviewer found): a member on the sender's own node that owed
//! a reply kept nothing alive, so a slow local member timed the Send out.
//! The checks excused it, and excused members that left mid-send; they no
//! longer do. Since e32cb05 a local member holding its copy is a sign of
//! life, which the watchdog now counts (the group scenarios failed Liveness
//! on most seeds until it did).
//!
//! Each of e32cb05's fixes, reverted alone, is caught within seeds 0..300
//! (`explore group-suite 0 300`): the announced-period clamp of §4.12
//! (`AliveHosts`, most seeds of `groups`, `reliable-crashes`,
//! `group-partitions`, `exhaust-lossy`); the local member's sign of life
//! (`Success`, half the seeds); a reliable copy kept queued until taken
//! (`Success`: a met ALL_DELIVER's member never got it); departed members'
//! copies (`Success`, `groups` 6 and others); giving up silent snapshot
//! hosts (`NoDuplicate`, `group-partitions` 24 and others); a NACKing host
//! resending replies (`Success`, rarely: `exhaust` 55, `exhaust-lossy` 49).
//!
//! # Remote-memory scenarios (`rmem-calm`, `rmem`)
//!
//! Run by [`rmem_suite`]: `VIPC_SIM_RMEM_SEEDS` seeds per scenario (default
//! 200, from `VIPC_SIM_SEED_BASE`); replay one with
//! `VIPC_SIM_SEED=N VIPC_SIM_SCENARIO=rmem VIPC_SIM_TRACE=1 cargo test -p vipc-sim --test sim -- replay --ignored --nocapture`.
//! The invariants are listed in `vipc_sim`'s `rmem` module. No engine bug
//! found so far (seeds 0..200 of both scenarios pass). Each invariant was
//! shown to fail by breaking the engine by hand (then reverted), within the
//! first 30 seeds (seed 0 each time):
//!
//! - generation check skipped in `Table::get_mut` (a stale handle writes the
//!   slot's next segment): `MemCounters` (an `unknown_segment` refusal
//!   missing, a write applied), `rmem` and `rmem-calm` seed 0. It needs slot
//!   reuse, hence `rmem_max_segments = 7` in these runs — with free slots to
//!   spare the mutation went unnoticed;
//! - writes to a host outside the protection group applied: `MemCounters`;
//! - the pieces of long writes applied one byte off: `MemModel`;
//! - one bit of reads over 1000 bytes flipped by the owner: `MemRead`;
//! - a writev's control record with the data length instead of its span: `MemChannels`;
//! - a CAS-II that times out never finished: `Liveness` (and `NoLeak` at the end);
//! - `MemExactlyOnce` caught the simulation's own first caller rule, which took
//!   `{value: new, nonce: mine}` for success only after a timeout: a
//!   duplicated request answered first by its duplicate is a success too
//!   (`rmem` seeds 2, 19; `rmem-calm` seed 17).
//!
//! If a scenario goes red because of a new engine bug, mark its test
//! `#[ignore = "engine bug: ..."]` and narrow it down with `VIPC_SIM_TWEAK`.

use std::time::Instant;
use vipc_engine::Refusal;
use vipc_sim::{run, run_with, Failure, HostIds, Invariant, Options, Report, Scenario};

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

/// Runs every seed of the suite that belongs to scenario `name`, with `tweaks`.
fn suite(name: &str, tweaks: &str) {
    let all = Scenario::all();
    let k = all.iter().position(|s| s.name == name).expect("scenario of the suite") as u64;
    let mut sc = all[k as usize].clone();
    sc.tweak(tweaks).expect("valid tweaks");
    let sc = &sc;
    let n = all.len() as u64;
    let (base, count) = (env_u64("VIPC_SIM_SEED_BASE", 0), env_u64("VIPC_SIM_SEEDS", 1000));
    let started = Instant::now();
    let mut total = Report::default();
    let mut failures: Vec<Failure> = Vec::new();
    let mut ran = 0;
    for seed in (base..base + count).filter(|s| s % n == k) {
        ran += 1;
        match run(seed, sc) {
            Ok(r) => {
                total.sends += r.sends;
                total.replies += r.replies;
                total.send_errors += r.send_errors;
                total.moved_bytes += r.moved_bytes;
                total.forwards += r.forwards;
                total.lent_given += r.lent_given;
                total.events += r.events;
                total.misuses += r.misuses;
                total.lookups += r.lookups;
                total.complaints += r.complaints;
                total.mac_failures += r.mac_failures;
            }
            Err(f) => {
                if tweaks.is_empty() {
                    eprintln!("{f}");
                } else {
                    eprintln!("{f} -- these tweaks were in force: prefix the command with VIPC_SIM_TWEAK={tweaks}");
                }
                failures.push(f);
                if failures.len() >= 5 {
                    eprintln!("stopping {name} after 5 failures");
                    break;
                }
            }
        }
    }
    eprintln!(
        "{name}: {ran} seeds in {:.1?}: {} sends, {} replies, {} errors, {} forwards ({} back to a lent segment's node), {} lookups, {} misuses refused, {} MiB moved, {} events",
        started.elapsed(),
        total.sends,
        total.replies,
        total.send_errors,
        total.forwards,
        total.lent_given,
        total.lookups,
        total.misuses,
        total.moved_bytes >> 20,
        total.events
    );
    assert!(failures.is_empty(), "{} of {ran} {name} seeds failed; first: {}", failures.len(), failures[0]);
    assert!(ran == 0 || total.replies > 0, "{name}: no request ever succeeded");
    if sc.keyed && sc.corrupt > 0.0 {
        // Damaged datagrams must have been caught by the MAC (and the runs passed).
        assert!(total.mac_failures > 0, "{name}: no MAC failure counted");
    }
    if sc.host_ids == HostIds::Allocate {
        // Node 0 squats on node 1's first choice: every run has a complaint.
        assert!(total.complaints >= ran, "{name}: {} complaints in {ran} runs", total.complaints);
    }
}

#[test]
fn calm() {
    suite("calm", "");
}

#[test]
fn lossy() {
    suite("lossy", "");
}

#[test]
fn heavy_loss() {
    suite("heavy-loss", "");
}

#[test]
fn partitions() {
    suite("partitions", "");
}

#[test]
fn crashes() {
    suite("crashes", "");
}

#[test]
fn allocate() {
    suite("allocate", "");
}

#[test]
fn crowded() {
    suite("crowded", "");
}

/// A checker bug, not an engine one: the note that excuses a Send whose
/// appended data a crowded node dropped was forgotten when a late copy of
/// the same sender's *older* Send arrived, which the engine rightly ignores.
/// Found exploring seeds beyond the suite's (seed 3966 of `crowded`).
#[test]
fn crowded_seed_3966_a_late_older_send_keeps_a_dropped_append_excused() {
    let sc = Scenario::by_name("crowded").expect("scenario");
    if let Err(f) = run(3966, &sc) {
        panic!("{f}");
    }
}

#[test]
fn bulk() {
    suite("bulk", "");
}

#[test]
fn keyed() {
    suite("keyed", "");
}

/// The checks are not blind: a link that damages payload bytes (which the
/// engine cannot notice without a MAC) must make runs fail with damaged
/// data or mismatched messages.
#[test]
fn checks_catch_damaged_datagrams() {
    let sc = Scenario { corrupt: 0.02, ..Scenario::calm() };
    let caught: Vec<Invariant> =
        (0..10).filter_map(|seed| run(seed, &sc).err()).map(|f| f.violation.invariant).collect();
    assert!(caught.len() >= 8, "only {} of 10 runs with damaged datagrams failed: {caught:?}", caught.len());
    // Damaged headers are the engine's to survive: it must never panic on them.
    assert!(!caught.contains(&Invariant::Panic), "{caught:?}");
    assert!(caught.iter().any(|i| matches!(i, Invariant::DataIntact | Invariant::ReplyMatches)), "{caught:?}");
}

/// Runs `VIPC_SIM_GROUP_SEEDS` seeds (default 250) of group scenario `name`.
fn group_suite(name: &str) {
    let sc = Scenario::by_name(name).expect("a group scenario");
    let (base, count) = (env_u64("VIPC_SIM_SEED_BASE", 0), env_u64("VIPC_SIM_GROUP_SEEDS", 250));
    let started = Instant::now();
    let mut total = vipc_sim::GroupStats::default();
    let mut failures: Vec<Failure> = vec![];
    let mut replies = 0;
    for seed in base..base + count {
        match run(seed, &sc) {
            Ok(r) => {
                let g = r.group;
                replies += r.replies;
                total.sends += g.sends;
                total.met += g.met;
                total.not_met += g.not_met;
                total.all_failed_acked += g.all_failed_acked;
                total.k_met_tight += g.k_met_tight;
                total.get_replies += g.get_replies;
                total.receipts += g.receipts;
                total.long_sends += g.long_sends;
                total.plain_failed += g.plain_failed;
                total.segment_sends += g.segment_sends;
                total.segment_reads += g.segment_reads;
            }
            Err(f) => {
                eprintln!("{f}");
                failures.push(f);
                if failures.len() >= 5 {
                    break;
                }
            }
        }
    }
    eprintln!("{name}: {count} seeds in {:.1?}: {total:?}, {replies} replies", started.elapsed());
    assert!(failures.is_empty(), "{} {name} seeds failed; first: {}", failures.len(), failures[0]);
    let passed = count as usize;
    assert!(passed == 0 || total.met > 0 && total.receipts > 0, "{name}: nothing was ever met: {total:?}");
    if passed > 20 {
        // Group segments (000 §6.8) are exercised: members read them while the send is pending.
        assert!(total.segment_sends > 0 && total.segment_reads > 0, "{name}: no group segment was read: {total:?}");
    }
    if sc.group.as_ref().is_some_and(|g| g.tight_aliens.is_some()) && passed > 20 {
        // Exhaustion must really happen: ALL modes fail by NACK while K modes still succeed.
        assert!(total.all_failed_acked > 0 && total.k_met_tight > 0, "{name}: no NACK or no K success: {total:?}");
    }
    if sc.group.as_ref().is_some_and(|g| g.slow > 0.0) && passed > 20 {
        // Slow repliers: some sends outlived T_t, kept alive by the breath of life.
        assert!(total.long_sends > 0, "{name}: no send outlived T_t: {total:?}");
    }
}

#[test]
fn groups_calm() {
    group_suite("groups-calm");
}

#[test]
fn groups() {
    group_suite("groups");
}

#[test]
fn reliable_crashes() {
    group_suite("reliable-crashes");
}

#[test]
fn exhaust() {
    group_suite("exhaust");
}

#[test]
fn group_partitions() {
    group_suite("group-partitions");
}

#[test]
fn exhaust_lossy() {
    group_suite("exhaust-lossy");
}

/// Runs `VIPC_SIM_RMEM_SEEDS` seeds (default 200) of rmem scenario `name`.
fn rmem_suite(name: &str) {
    let sc = Scenario::by_name(name).expect("an rmem scenario");
    let (base, count) = (env_u64("VIPC_SIM_SEED_BASE", 0), env_u64("VIPC_SIM_RMEM_SEEDS", 200));
    let started = Instant::now();
    let mut total = vipc_sim::RmemStats::default();
    let mut failures: Vec<Failure> = vec![];
    for seed in base..base + count {
        match run(seed, &sc) {
            Ok(r) => {
                let m = r.rmem;
                total.writes += m.writes;
                total.reads += m.reads;
                total.increments += m.increments;
                total.ambiguous += m.ambiguous;
                total.imports += m.imports;
                total.timeouts += m.timeouts;
                for (t, x) in total.refusals.iter_mut().zip(m.refusals) {
                    *t += x;
                }
                total.control_records += m.control_records;
                total.data_records += m.data_records;
                total.unexports += m.unexports;
                total.cells_checked += m.cells_checked;
            }
            Err(f) => {
                eprintln!("{f}");
                failures.push(f);
                if failures.len() >= 5 {
                    break;
                }
            }
        }
    }
    eprintln!("{name}: {count} seeds in {:.1?}: {total:?}", started.elapsed());
    assert!(failures.is_empty(), "{} {name} seeds failed; first: {}", failures.len(), failures[0]);
    if count >= 20 {
        // Every kind of operation and refusal happened, and the checks had something to check.
        assert!(total.writes > 0 && total.reads > 0 && total.increments > 0 && total.imports > 0, "{total:?}");
        assert!(total.control_records > 0 && total.data_records > 0 && total.unexports > 0, "{total:?}");
        assert!(total.cells_checked > 0, "{total:?}");
        let kinds = [
            Refusal::UnknownSegment,
            Refusal::OutOfRange,
            Refusal::NoAccess,
            Refusal::NotInGroup,
            Refusal::Unvalidated,
        ];
        for r in kinds {
            assert!(total.refusals[r.index()] > 0, "{name}: no {r:?} refusal: {total:?}");
        }
        assert!(total.refusals[Refusal::WriteInhibited.index()] > 0, "{name}: no inhibited CAS-II: {total:?}");
    }
}

#[test]
fn rmem_calm() {
    rmem_suite("rmem-calm");
}

#[test]
fn rmem() {
    rmem_suite("rmem");
}

/// The same seed gives the same run, datagram for datagram.
fn deterministic(tweaks: &str) {
    for seed in [1u64, 2, 4, 7, 8] {
        let mut sc = Scenario::for_seed(seed);
        sc.tweak(tweaks).expect("valid tweaks");
        let a = run(seed, &sc).map_err(|f| f.to_string());
        let b = run(seed, &sc).map_err(|f| f.to_string());
        assert_eq!(a, b, "seed {seed} ran differently twice");
        let r = a.unwrap_or_else(|f| panic!("seed {seed} failed: {f}"));
        assert!(r.delivered > 0 && r.fingerprint != 0);
        let other = run(seed + 6, &sc).unwrap_or_else(|f| panic!("seed {} failed: {f}", seed + 6));
        assert_ne!(other.fingerprint, r.fingerprint, "different seeds, same run");
    }
}

#[test]
fn runs_are_deterministic() {
    deterministic("");
}

/// Group and rmem runs too are a pure function of the seed.
#[test]
fn group_runs_are_deterministic() {
    for sc in Scenario::group_suite().into_iter().chain(Scenario::rmem_suite()) {
        for seed in [3u64, 4] {
            let a = run(seed, &sc).map_err(|f| f.to_string());
            let b = run(seed, &sc).map_err(|f| f.to_string());
            assert_eq!(a, b, "{} seed {seed} ran differently twice", sc.name);
        }
    }
}

/// Replays `VIPC_SIM_SEED` (scenario from the seed or `VIPC_SIM_SCENARIO`),
/// tracing with `VIPC_SIM_TRACE=1`.
#[test]
#[ignore = "replays one seed: VIPC_SIM_SEED=N cargo test -p vipc-sim --test sim -- replay --ignored --nocapture"]
fn replay() {
    let seed = std::env::var("VIPC_SIM_SEED")
        .expect("replay: set VIPC_SIM_SEED=N (and optionally VIPC_SIM_SCENARIO, VIPC_SIM_TRACE=1)");
    let seed: u64 = seed.trim().parse().expect("VIPC_SIM_SEED is a number");
    let sc = match std::env::var("VIPC_SIM_SCENARIO") {
        Ok(name) => Scenario::by_name(&name).unwrap_or_else(|| {
            let names: Vec<_> = Scenario::all()
                .iter()
                .chain(&Scenario::group_suite())
                .chain(&Scenario::rmem_suite())
                .map(|s| s.name)
                .collect();
            panic!("unknown scenario {name:?}; one of {names:?}")
        }),
        Err(_) => Scenario::for_seed(seed),
    };
    let mut sc = sc;
    if let Ok(t) = std::env::var("VIPC_SIM_TWEAK") {
        sc.tweak(&t).unwrap_or_else(|e| panic!("VIPC_SIM_TWEAK: {e}"));
    }
    let opts = Options { trace: std::env::var("VIPC_SIM_TRACE").is_ok_and(|v| v == "1"), ..Options::default() };
    match run_with(seed, &sc, &opts) {
        Ok(r) => eprintln!("seed {seed} ({}) passed: {r:#?}", sc.name),
        Err(f) => panic!("{f}\n{:#?}", f.report),
    }
}
