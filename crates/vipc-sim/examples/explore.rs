//! Runs a range of seeds and prints one line per failure (and optionally each
//! run's fingerprint), for exploring seeds beyond the test suite.
//!
//! ```text
//! cargo run --release -p vipc-sim --example explore -- [SCENARIO|all] [FROM] [COUNT] [--fingerprints] [--trace] [--tweak=no-destroy,no-idempotent,no-bad-targets,no-leave]
//! ```
//!
//! SCENARIO may be a group scenario (`groups-calm`, `groups`, `reliable-crashes`, `exhaust`,
//! `group-partitions`, `exhaust-lossy`), or `group-suite` for every group scenario on each seed.

use vipc_sim::{run_with, Options, Scenario};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let pos: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let which = pos.first().map_or("all", |s| s.as_str());
    let from: u64 = pos.get(1).map_or(0, |s| s.parse().expect("FROM is a number"));
    let count: u64 = pos.get(2).map_or(600, |s| s.parse().expect("COUNT is a number"));
    let (mut ok, mut failed) = (0, 0);
    let runs: Vec<(u64, Scenario)> = (from..from + count)
        .flat_map(|seed| match which {
            "all" => vec![(seed, Scenario::for_seed(seed))],
            "group-suite" => Scenario::group_suite().into_iter().map(|s| (seed, s)).collect(),
            _ => vec![(seed, Scenario::by_name(which).unwrap_or_else(|| panic!("unknown scenario {which}")))],
        })
        .collect();
    for (seed, mut sc) in runs {
        if let Some(t) = args.iter().find_map(|a| a.strip_prefix("--tweak=")) {
            sc.tweak(t).unwrap_or_else(|e| panic!("{e}"));
        }
        let opts = Options { trace: flag("--trace"), ..Options::default() };
        match run_with(seed, &sc, &opts) {
            Ok(r) => {
                ok += 1;
                if flag("--fingerprints") {
                    println!("{seed} {} ok {:016x}", sc.name, r.fingerprint);
                }
            }
            Err(f) => {
                failed += 1;
                println!("{seed} {} FAIL {}\n    replay: {}", sc.name, f.violation, f.replay_command());
            }
        }
    }
    eprintln!("{ok} passed, {failed} failed");
}
