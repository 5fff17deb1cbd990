//! `vipc bench`: vipc's benchmark suites and their baselines.
//!
//! Every figure is measured in the same run as its baseline, round-robin with
//! it (see [`probe`]), and reported as a [`Record`]: the figure, the baseline's
//! figure and their ratio. Baselines run as real programs in separate OS
//! processes ([`peer`]): raw UDP (blocking and busy-poll), TCP, ZeroMQ
//! REQ/REP and gRPC unary, plus a condvar hand-off between two threads.
//! Latency items place their threads on CPUs ([`cpus`]): blocking probes
//! with both ends on one CPU, busy-polling servers on the other, so that a
//! figure and its baseline wake their threads the same way.
//!
//! Suite `ipc` ([`ipc`]) covers the tables of the V papers (seeds 000 §3 and
//! 001 §3–6) and the bars of issue 3 ([`bars`]). [`report`] writes
//! `report.md` beside the 1983/1985 figures, with PNG plots ([`plots`]).

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod apps;
pub mod apps_procs;
pub mod bars;
pub mod condvar;
pub mod cpus;
pub mod error;
pub mod files;
pub mod filestyles;
pub mod groups;
pub mod grpc;
pub mod ipc;
pub mod keyed;
pub mod layers;
pub mod link;
pub mod names;
pub mod netns;
pub mod peer;
pub mod plots;
pub mod probe;
pub mod record;
pub mod report;
pub mod rmem;
pub mod stats;
pub mod tcp;
pub mod typed;
pub mod udp;
pub mod vserver;
pub mod zmq_rr;

/// The gRPC baseline's messages and service, generated from `proto/bench.proto`.
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod pb {
    tonic::include_proto!("vipcbench");
}

pub use error::{BenchError, Result};
pub use peer::{peer_main, PeerExe};
pub use record::Record;

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

/// The suites `vipc bench` knows.
pub const SUITES: &[&str] = &["ipc", "files", "groups", "rmem", "typed"];

/// What to run and how to report it.
#[derive(Clone, Debug)]
pub struct Options {
    /// Suites (`ipc`) or single items (`ipc/exchange`); empty means every suite.
    pub suites: Vec<String>,
    /// Few iterations: every item in well under a minute (CI smoke run).
    pub quick: bool,
    /// Print one JSON object per record on stdout instead of a table.
    pub json: bool,
    /// Write `report.md` and PNG plots into this directory.
    pub report: Option<PathBuf>,
    /// How to start the peer processes.
    pub exe: PeerExe,
}

/// Everything a run measured.
#[derive(Clone, Debug, Default)]
pub struct Results {
    /// The figures, in the order measured.
    pub records: Vec<Record>,
    /// Latency samples (µs, sorted) per primitive, for distribution plots.
    pub cdfs: Vec<(String, Vec<f64>)>,
    /// Remarks worth keeping with the figures (losses, memory per exchange).
    pub notes: Vec<String>,
    /// Items that failed, with their error.
    pub failures: Vec<String>,
    /// Whether this was a `--quick` run.
    pub quick: bool,
}

/// Collects results, printing each record as a JSON line at once in JSON mode.
#[derive(Debug, Default)]
pub struct Output {
    json: bool,
    /// What has been collected so far.
    pub results: Results,
}

/// Prints one line on stdout; a closed stdout is ignored.
fn out_line(s: &str) {
    let mut o = std::io::stdout();
    let _ = writeln!(o, "{s}");
    let _ = o.flush();
}

impl Output {
    /// An empty collector; `json` prints records as they come.
    pub fn new(json: bool) -> Output {
        Output { json, results: Results::default() }
    }

    /// Adds a record.
    pub fn record(&mut self, r: Record) {
        if self.json {
            out_line(&r.to_json_line());
        }
        self.results.records.push(r);
    }

    /// Keeps the latency distribution of a primitive.
    pub fn cdf(&mut self, name: &str, sorted: Vec<f64>) {
        self.results.cdfs.push((name.to_string(), sorted));
    }

    /// Adds a note.
    pub fn note(&mut self, s: String) {
        self.results.notes.push(s);
    }
}

/// Expands the suite arguments into `(suite, item)` pairs.
pub fn selection(args: &[String]) -> Result<Vec<(String, String)>> {
    let args: Vec<String> =
        if args.is_empty() { SUITES.iter().map(|s| s.to_string()).collect() } else { args.to_vec() };
    let mut out: Vec<(String, String)> = Vec::new();
    for a in &args {
        let (suite, item) = match a.split_once(['/', ':']) {
            Some((s, i)) => (s, Some(i)),
            None => (a.as_str(), None),
        };
        let all: &[&str] = match suite {
            "ipc" => ipc::ITEMS,
            "files" => files::ITEMS,
            "groups" => groups::ITEMS,
            "rmem" => rmem::ITEMS,
            "typed" => typed::ITEMS,
            _ => return Err(BenchError::Other(format!("unknown suite {suite:?} (suites: {})", SUITES.join(", ")))),
        };
        let items: Vec<&str> = match item {
            None => all.to_vec(),
            Some(i) if all.contains(&i) => vec![i],
            Some(i) => return Err(BenchError::Other(format!("unknown item {suite}/{i} (items: {})", all.join(", ")))),
        };
        for i in items {
            let pair = (suite.to_string(), i.to_string());
            if !out.contains(&pair) {
                out.push(pair);
            }
        }
    }
    Ok(out)
}

/// Runs the selected suites. An item that fails is recorded in
/// [`Results::failures`] and the run goes on; `Err` only for bad arguments or
/// a report that could not be written.
pub fn run(opts: &Options) -> Result<Results> {
    let items = selection(&opts.suites)?;
    if let Some(dir) = &opts.report {
        report::prepare(dir)?; // before the runs, not after them
    }
    let mut out = Output::new(opts.json);
    out.results.quick = opts.quick;
    let start = Instant::now();
    let mut files = files::Session::new(opts.exe.clone(), opts.quick);
    let mut groups = groups::Session::new(opts.exe.clone(), opts.quick);
    for (suite, item) in &items {
        eprintln!("bench: {suite}/{item} ...");
        let t = Instant::now();
        let before = out.results.records.len();
        let r = if suite == "files" {
            files.run_item(&mut out, item)
        } else if suite == "groups" {
            groups.run_item(&mut out, item)
        } else if suite == "typed" {
            let mut ctx = ipc::Ctx::new(opts.exe.clone(), opts.quick, &mut out);
            ctx.suite = typed::SUITE;
            typed::run_item(&mut ctx, item)
        } else if suite == "rmem" {
            let mut ctx = ipc::Ctx::new(opts.exe.clone(), opts.quick, &mut out);
            ctx.suite = rmem::SUITE;
            rmem::run_item(&mut ctx, item)
        } else {
            let mut ctx = ipc::Ctx::new(opts.exe.clone(), opts.quick, &mut out);
            ipc::run_item(&mut ctx, item)
        };
        match r {
            Ok(()) => {
                eprintln!("bench: {suite}/{item} done in {:.1} s", t.elapsed().as_secs_f64());
                if !opts.json {
                    out_line(&record::table(&out.results.records[before..]));
                }
            }
            Err(e) => {
                eprintln!("bench: {suite}/{item} FAILED: {e}");
                out.results.failures.push(format!("{suite}/{item}: {e}"));
            }
        }
    }
    drop(files); // unmounts and stops the servers of suite `files`
    drop(groups); // stops the peers and removes the namespaces of suite `groups`
    let results = out.results;
    let checks = bars::check(&results.records);
    let mut text = String::from("bars:\n");
    for c in &checks {
        text.push_str(&format!("  {}\n", c.line()));
    }
    for n in &results.notes {
        text.push_str(&format!("note: {n}\n"));
    }
    text.push_str(&format!(
        "bench: {} records, {} failed item(s), {:.1} s",
        results.records.len(),
        results.failures.len(),
        start.elapsed().as_secs_f64()
    ));
    // In JSON mode stdout carries only the records.
    if opts.json {
        eprintln!("{text}");
    } else {
        out_line(&text);
    }
    if let Some(dir) = &opts.report {
        report::write(dir, &results)?;
        eprintln!("bench: report written to {}", dir.join("report.md").display());
    }
    Ok(results)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_expands_suites_and_items() {
        let all = selection(&[]).unwrap();
        assert_eq!(
            all.len(),
            ipc::ITEMS.len() + files::ITEMS.len() + groups::ITEMS.len() + rmem::ITEMS.len() + typed::ITEMS.len()
        );
        assert_eq!(selection(&["groups/soak".into()]).unwrap(), vec![("groups".into(), "soak".into())]);
        assert_eq!(selection(&["files/tree".into()]).unwrap(), vec![("files".into(), "tree".into())]);
        let one = selection(&["ipc/exchange".into(), "ipc:pages".into(), "ipc/exchange".into()]).unwrap();
        assert_eq!(one, vec![("ipc".into(), "exchange".into()), ("ipc".into(), "pages".into())]);
        assert!(selection(&["disk".into()]).is_err());
        assert!(selection(&["ipc/nope".into()]).is_err());
    }
}
