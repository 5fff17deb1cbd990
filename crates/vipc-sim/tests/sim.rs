//! The deterministic simulation suite: `VIPC_SIM_SEEDS` seeds (default 1000)
//! spread round-robin over the scenarios, plus seed replay.
//!
//! - `VIPC_SIM_SEEDS=N`: how many seeds in all (seed `s` runs scenario `s % 6`).
//! - `VIPC_SIM_SEED_BASE=B`: start at seed `B` instead of 0 (to explore new seeds).
//! - `VIPC_SIM_SEED=N [VIPC_SIM_SCENARIO=name] [VIPC_SIM_TRACE=1]`: the `replay`
//!   test runs just that seed, optionally tracing every datagram and event
//!   (`VIPC_SIM_TWEAK=no-destroy,no-idempotent,no-bad-targets,no-segments`
//!   switches parts of the workload off, as the `explore` example's `--tweak` does).
//!
//! # Known engine bugs
//!
//! The full-workload tests of the scenarios these bugs break are `#[ignore]`d,
//! naming the bug; re-enable them once it is fixed. Meanwhile the
//! `*_avoiding_known_bugs` tests run the same scenarios with the workload
//! that triggers the bugs switched off, so the rest stays covered.
//!
//! - **B1: stale moves hit the client's next exchange.** On the client's node
//!   a MoveFromRequest / MoveToData is authorised against whatever exchange the
//!   client has *now*, checking only that its destination is on the mover's
//!   host (`check_client_segment` in `engine/bulk.rs`); neither the exchange
//!   (its sequence number) nor the mover's pid is checked. A server still
//!   working on an old request (an idempotent request re-executed because a
//!   retransmission crossed the reply; or any request whose client timed out
//!   in a partition or crash) then reads the segment of the client's next
//!   request (wrong data: invariant 4), writes into it (corruption), or fails
//!   with `NoAccess`/`OutOfSegment` computed from the wrong segment.
//!   Even the calm scenario hits it (e.g. `VIPC_SIM_TWEAK=no-destroy`, seed 174).
//! - **B2: runs are not reproducible.** `destroy_process` wakes local waiters and
//!   nAcks remote ones in `HashMap` iteration order (random per map), so a
//!   seed whose run destroys a process with several waiters differs from run
//!   to run (`runs_are_deterministic_with_destruction`).
//! - **B3: duplicate detection forgets a sender once its alien is freed.**
//!   `on_send` drops the sender's alien (cached reply included) as soon as a
//!   newer Send arrives, before checking the destination exists; if it does
//!   not (nAck), nothing remembers the old sequence number, and a late
//!   retransmission of the previous non-idempotent request is executed again
//!   (invariants 2/3). The same happens after a Cancel (sender destroyed) or
//!   when a forward target on that node is destroyed: a retransmission still
//!   in flight is then delivered as a new request.
use std::time::Instant;
use vipc_sim::{run, run_with, Failure, HostIds, Options, Report, Scenario};

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v.trim().parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

/// The workload that triggers the known engine bugs B1 and B3 (B2 needs destruction).
const AVOID: &str = "no-destroy,no-idempotent,no-bad-targets";
/// In partitions and crashes B1 also follows from timeouts: no segments either.
const AVOID_MOVES: &str = "no-destroy,no-idempotent,no-bad-targets,no-segments";

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
                total.events += r.events;
                total.misuses += r.misuses;
                total.lookups += r.lookups;
                total.complaints += r.complaints;
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
        "{name}: {ran} seeds in {:.1?}: {} sends, {} replies, {} errors, {} forwards, {} lookups, {} misuses refused, {} MiB moved, {} events",
        started.elapsed(),
        total.sends,
        total.replies,
        total.send_errors,
        total.forwards,
        total.lookups,
        total.misuses,
        total.moved_bytes >> 20,
        total.events
    );
    assert!(failures.is_empty(), "{} of {ran} {name} seeds failed; first: {}", failures.len(), failures[0]);
    assert!(ran == 0 || total.replies > 0, "{name}: no request ever succeeded");
    if sc.host_ids == HostIds::Allocate {
        // Node 0 squats on node 1's first choice: every run has a complaint.
        assert!(total.complaints >= ran, "{name}: {} complaints in {ran} runs", total.complaints);
    }
}

#[test]
#[ignore = "engine bug B1 (see the top of this file)"]
fn calm() {
    suite("calm", "");
}

#[test]
#[ignore = "engine bugs B1 and B3 (see the top of this file)"]
fn lossy() {
    suite("lossy", "");
}

#[test]
#[ignore = "engine bugs B1 and B3 (see the top of this file)"]
fn heavy_loss() {
    suite("heavy-loss", "");
}

#[test]
#[ignore = "engine bugs B1 and B3 (see the top of this file)"]
fn partitions() {
    suite("partitions", "");
}

#[test]
#[ignore = "engine bugs B1 and B3 (see the top of this file)"]
fn crashes() {
    suite("crashes", "");
}

#[test]
#[ignore = "engine bugs B1 and B3 (see the top of this file)"]
fn allocate() {
    suite("allocate", "");
}

// While B1-B3 are open: the same scenarios without the workload that triggers them.

#[test]
fn calm_avoiding_known_bugs() {
    suite("calm", AVOID);
}

#[test]
fn lossy_avoiding_known_bugs() {
    suite("lossy", AVOID);
}

#[test]
fn heavy_loss_avoiding_known_bugs() {
    suite("heavy-loss", AVOID);
}

#[test]
fn partitions_avoiding_known_bugs() {
    suite("partitions", AVOID_MOVES);
}

#[test]
fn crashes_avoiding_known_bugs() {
    suite("crashes", AVOID_MOVES);
}

#[test]
fn allocate_avoiding_known_bugs() {
    suite("allocate", AVOID);
}

/// The same seed gives the same run, datagram for datagram.
fn deterministic(tweaks: &str) {
    for seed in [1u64, 2, 4] {
        let mut sc = Scenario::for_seed(seed);
        sc.tweak(tweaks).expect("valid tweaks");
        let a = run(seed, &sc).map_err(|f| f.to_string());
        let b = run(seed, &sc).map_err(|f| f.to_string());
        assert_eq!(a, b, "seed {seed} ran differently twice");
        if let Ok(r) = a {
            assert!(r.delivered > 0 && r.fingerprint != 0);
            let other = run(seed + 6, &sc).map(|r| r.fingerprint);
            assert_ne!(other.ok(), Some(r.fingerprint), "different seeds, same run");
        }
    }
}

#[test]
fn runs_are_deterministic() {
    deterministic("no-destroy");
}

#[test]
#[ignore = "engine bug B2 (see the top of this file)"]
fn runs_are_deterministic_with_destruction() {
    deterministic("");
}

/// Replays `VIPC_SIM_SEED` (scenario from the seed or `VIPC_SIM_SCENARIO`),
/// tracing with `VIPC_SIM_TRACE=1`.
#[test]
fn replay() {
    let Ok(seed) = std::env::var("VIPC_SIM_SEED") else {
        eprintln!("replay: set VIPC_SIM_SEED=N (and optionally VIPC_SIM_SCENARIO, VIPC_SIM_TRACE=1)");
        return;
    };
    let seed: u64 = seed.trim().parse().expect("VIPC_SIM_SEED is a number");
    let sc = match std::env::var("VIPC_SIM_SCENARIO") {
        Ok(name) => Scenario::by_name(&name).unwrap_or_else(|| {
            let names: Vec<_> = Scenario::all().iter().map(|s| s.name).collect();
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
