//! `vipc bench`: the benchmark suites (crate `vipc-bench`), and the hidden
//! `vipc bench-peer` that runs the bench's baseline servers and clients as
//! separate OS processes.

use crate::error::{CliError, CliResult};
use clap::Args;
use std::path::PathBuf;
use vipc_bench::{Options, PeerExe};

/// Flags of `vipc bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Suites or single items (default: every suite): `ipc` or `ipc/ITEM` with ITEM one of
    /// penalty, exchange, idle, moves, keyed, pages, units, saturation, memory, link (network namespaces,
    /// root); `files` (against sshfs and
    /// the local file system) or `files/ITEM` with ITEM one of pages, sequential, tree, clients, pipe;
    /// `groups` (network namespaces, root) or `groups/ITEM` with ITEM one of sizes, soak, detect;
    /// `rmem` (remote memory) or `rmem/ITEM` with ITEM one of latency, idle, write, block, block_transfer, rapid,
    /// names, file_styles, ising, chandy_misra; `typed` (typed ports) or `typed/ITEM` with ITEM one of calls,
    /// reads, bulk, multicast.
    pub suites: Vec<String>,
    /// Few iterations: every item once, in under a minute (CI smoke run).
    #[arg(long)]
    pub quick: bool,
    /// One JSON object per line: {"suite","name","value","unit","baseline","baseline_value","ratio"}.
    #[arg(long)]
    pub json: bool,
    /// Write DIR/report.md (figures beside the 1983/1985 ones) and PNG plots.
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
}

/// Runs the suites; fails if an item could not be measured (a missed bar is not a failure).
pub fn run(a: &BenchArgs) -> CliResult<()> {
    let exe = PeerExe::current(&["bench-peer"]).map_err(|e| CliError(format!("bench: {e}")))?;
    let opts = Options { suites: a.suites.clone(), quick: a.quick, json: a.json, report: a.report.clone(), exe };
    let results = vipc_bench::run(&opts).map_err(|e| CliError(format!("bench: {e}")))?;
    if !results.failures.is_empty() {
        return Err(CliError(format!(
            "bench: {} item(s) failed: {}",
            results.failures.len(),
            results.failures.join("; ")
        )));
    }
    Ok(())
}

/// Runs one of the bench's peer processes (`vipc bench-peer KIND ARGS…`).
pub fn peer(args: &[String]) -> CliResult<()> {
    vipc_bench::peer_main(args).map_err(|e| CliError(format!("bench-peer: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[derive(clap::Parser)]
    struct Wrapper {
        #[command(flatten)]
        bench: BenchArgs,
    }

    #[test]
    fn help_names_every_suite_and_item() {
        let help = Wrapper::command().render_long_help().to_string();
        let words: Vec<&str> = help.split(|c: char| !(c.is_alphanumeric() || c == '_')).collect();
        for (suite, item) in vipc_bench::selection(&[]).unwrap() {
            for w in [&suite, &item] {
                assert!(words.contains(&w.as_str()), "`vipc bench --help` does not name {w}");
            }
        }
    }
}
