//! `report.md`: every figure of a run beside the corresponding 1983 (seed 001)
//! and 1985 (seed 000) figure, both as ratios, with the PNG plots.

use crate::bars;
use crate::error::{BenchError, Result};
use crate::plots::{self, Series};
use crate::record::{fmt_num, table, Record};
use crate::Results;
use std::fmt::Write as _;
use std::path::Path;

/// 1983 paper (001 Table 4-1, 3 Mb, 10 MHz) and 1985 thesis (000 Tables 3-1…3-4,
/// 10 Mb, 10 MHz) network penalty in ms, by bytes (0 = not given).
const PENALTY_PAPER: &[(usize, f64, f64)] = &[
    (64, 0.65, 0.55),
    (128, 0.96, 0.80),
    (256, 1.62, 1.29),
    (512, 3.00, 2.29),
    (1024, 5.83, 4.26),
    (2048, 9.96, 6.04),
    (4096, 18.95, 11.11),
];

/// 64 KB read by unit, 000 Tables 3-11/3-12 (10 MHz): unit KB, local, 3 Mb remote, 10 Mb remote (ms).
const UNITS_PAPER: &[(usize, f64, f64, f64)] =
    &[(1, 71.7, 518.3, 376.1), (4, 62.5, 368.4, 241.1), (16, 60.2, 344.6, 206.7), (64, 59.7, 335.4, 198.0)];

struct View<'a> {
    records: &'a [Record],
}

impl View<'_> {
    fn get(&self, name: &str) -> Option<&Record> {
        self.records.iter().find(|r| r.name == name)
    }
    fn value(&self, name: &str) -> Option<f64> {
        self.get(name).map(|r| r.value)
    }
    fn ratio(&self, name: &str) -> Option<f64> {
        self.get(name).map(|r| r.ratio)
    }
    fn base(&self, name: &str) -> Option<f64> {
        self.get(name).map(|r| r.baseline_value)
    }
}

fn f(v: Option<f64>) -> String {
    v.map_or("–".to_string(), fmt_num)
}

fn r2(v: Option<f64>) -> String {
    v.map_or("–".to_string(), |v| format!("{v:.2}"))
}

fn div(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b != 0.0 => Some(a / b),
        _ => None,
    }
}

/// Creates `dir` if needed and checks that a file can be written there, so
/// that a bad `--report` fails at once, not after the whole run.
pub fn prepare(dir: &Path) -> Result<()> {
    let fail = |e: std::io::Error| BenchError::Other(format!("report directory {}: {e}", dir.display()));
    std::fs::create_dir_all(dir).map_err(fail)?;
    let probe = dir.join(".vipc-bench-probe");
    std::fs::write(&probe, b"").map_err(fail)?;
    std::fs::remove_file(&probe).map_err(fail)
}

/// Writes `report.md` and the plots into `dir` (created if needed).
pub fn write(dir: &Path, results: &Results) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    let plots = draw_plots(dir, results);
    let md = markdown(results, &plots);
    std::fs::write(dir.join("report.md"), md)?;
    Ok(())
}

/// Draws what the results allow; returns (file, title) of each plot drawn, or the error as text.
fn draw_plots(dir: &Path, results: &Results) -> Vec<std::result::Result<(String, String), String>> {
    let v = View { records: &results.records };
    let mut out = Vec::new();
    if !results.cdfs.is_empty() {
        let r = plots::latency_cdf(&dir.join("latency_cdf.png"), &results.cdfs);
        out.push(
            r.map(|()| ("latency_cdf.png".into(), "Round-trip latency per primitive (CDF)".into()))
                .map_err(|e| e.to_string()),
        );
    }
    let sizes = [(1024usize, "1KB"), (64 << 10, "64KB"), (1 << 20, "1MiB"), (16 << 20, "16MiB")];
    let series = |f: &dyn Fn(&str) -> Option<f64>| -> Vec<(f64, f64)> {
        sizes.iter().filter_map(|(b, l)| f(l).map(|y| (*b as f64, y))).collect()
    };
    let tp: Vec<Series> = vec![
        ("vipc MoveTo (remote)".into(), series(&|l| v.value(&format!("moveto_remote_{l}")))),
        ("vipc MoveFrom (remote)".into(), series(&|l| v.value(&format!("movefrom_remote_{l}")))),
        ("TCP bulk".into(), series(&|l| v.base(&format!("moveto_remote_{l}")))),
    ];
    if tp.iter().any(|(_, p)| !p.is_empty()) {
        let r = plots::throughput(&dir.join("throughput.png"), &tp);
        out.push(
            r.map(|()| ("throughput.png".into(), "Throughput against transfer size".into())).map_err(|e| e.to_string()),
        );
    }
    let clients = [1usize, 2, 4, 8];
    let sat = |f: &dyn Fn(usize) -> Option<f64>| -> Vec<(f64, f64)> {
        clients.iter().filter_map(|c| f(*c).map(|y| (*c as f64, y))).collect()
    };
    let st: Vec<Series> = vec![
        ("vipc server".into(), sat(&|c| v.value(&format!("saturation_{c}_clients")))),
        ("UDP echo server".into(), sat(&|c| v.base(&format!("saturation_{c}_clients")))),
    ];
    if st.iter().any(|(_, p)| !p.is_empty()) {
        let r = plots::saturation(&dir.join("saturation.png"), &st);
        out.push(
            r.map(|()| ("saturation.png".into(), "Server throughput against clients".into()))
                .map_err(|e| e.to_string()),
        );
    }
    out
}

/// "Suite `ipc`", or "Suites `ipc`, `rmem`": those the records come from, in order.
fn suites_measured(results: &Results) -> String {
    let mut names: Vec<&str> = Vec::new();
    for r in &results.records {
        if !names.contains(&r.suite.as_str()) {
            names.push(&r.suite);
        }
    }
    let list = names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
    match names.len() {
        0 => "No suite".to_string(),
        1 => format!("Suite {list}"),
        _ => format!("Suites {list}"),
    }
}

/// The report's text.
pub fn markdown(results: &Results, plots: &[std::result::Result<(String, String), String>]) -> String {
    let v = View { records: &results.records };
    let mut s = String::new();
    let _ = writeln!(s, "# vipc bench report\n");
    let _ = writeln!(
        s,
        "{}{}. Every figure was measured in the same run as its baseline, round-robin with it; \
         figures are medians of rounds (p99 where named). Times in µs unless stated; the papers' in ms. \
         1983 = Cheriton & Zwaenepoel (seed 001: 3 Mb Ethernet, 10 MHz 68000); \
         1985 = Zwaenepoel's thesis (seed 000: 10 Mb Ethernet, 10 MHz unless stated). \
         Ratios make the eras comparable: the machines differ by four orders of magnitude, the shapes need not.\n",
        suites_measured(results),
        if results.quick { " (**--quick**: few iterations, figures are rough)" } else { "" }
    );

    // Bars.
    let _ = writeln!(s, "## Bars (issues 3, 4, 5 and 6)\n\n| bar | measured | limit | result |\n|---|---|---|---|");
    for c in bars::check(&results.records) {
        let res = match c.pass {
            Some(true) => "PASS",
            Some(false) => "**FAIL**",
            None => "not measured",
        };
        let _ = writeln!(s, "| {} | {} | {} | {res} |", c.what, r2(c.measured), c.bar);
    }

    // 1. Network penalty.
    let _ = writeln!(
        s,
        "\n## 1. Network penalty (000 Tables 3-1…3-4, 001 Table 4-1)\n\n\
         Raw UDP between two processes on loopback, round trip / 2; 2 KB and more streamed in \
         {}-byte datagrams. \"÷ 64 B\" is the table's shape.\n\n\
         | bytes | vipc host µs | ÷ 64 B | 1983 ms | ÷ 64 B | 1985 ms | ÷ 64 B |\n|---|---|---|---|---|---|---|",
        crate::ipc::PENALTY_PACKET
    );
    for size in [64usize, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536] {
        let name = format!("penalty_{}", crate::ipc::label(size));
        let paper = PENALTY_PAPER.iter().find(|p| p.0 == size);
        let (a, b) = (paper.map(|p| p.1), paper.map(|p| p.2));
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} |",
            crate::ipc::label(size),
            f(v.value(&name)),
            r2(v.ratio(&name)),
            r2(a),
            r2(div(a, Some(0.65))),
            r2(b),
            r2(div(b, Some(0.55)))
        );
    }

    // 2. Send-Receive-Reply.
    let local = v.value("srr_local_32B");
    let remote = v.value("srr_remote_32B");
    let udp = v.base("srr_remote_32B");
    let over = match (remote, udp) {
        (Some(r), Some(u)) => Some(r - u),
        _ => None,
    };
    let _ = writeln!(
        s,
        "\n## 2. Send–Receive–Reply, 32-byte message (000 Tables 3-5…3-8, 001 Table 5-1)\n\n\
         The network penalty of an exchange is two small packets: the raw UDP ping-pong round trip \
         (the papers: 2 × the 64-byte penalty).\n\n\
         | figure | vipc | 1983 | 1985 |\n|---|---|---|---|"
    );
    let rows: Vec<(&str, String, &str, &str)> = vec![
        ("local exchange", format!("{} µs", f(local)), "0.77 ms", "0.94 ms"),
        ("remote exchange", format!("{} µs", f(remote)), "2.54 ms", "2.23 ms"),
        ("remote / local", r2(v.ratio("srr_remote_over_local")), "3.30", "2.37"),
        ("network penalty (2 packets)", format!("{} µs", f(udp)), "1.30 ms", "1.10 ms"),
        ("remote / penalty", r2(v.ratio("srr_remote_32B")), "1.95", "2.03"),
        ("overhead above the penalty", format!("{} µs", f(over)), "1.24 ms", "1.13 ms"),
        ("overhead / penalty", r2(div(over, udp)), "0.95", "1.03"),
        ("packets per exchange", f(v.value("packets_per_exchange_remote")), "2", "2"),
        ("remote p99 / UDP p99", r2(v.ratio("srr_remote_32B_p99")), "–", "–"),
        ("local / condvar hand-off", r2(v.ratio("srr_local_32B")), "–", "–"),
        ("remote, poll_spin", format!("{} µs", f(v.value("srr_remote_32B_spin"))), "–", "–"),
        ("remote poll_spin / busy-poll UDP", r2(v.ratio("srr_remote_32B_spin")), "–", "–"),
        ("local, poll_spin", format!("{} µs", f(v.value("srr_local_32B_spin"))), "–", "–"),
        ("remote / ZeroMQ REQ/REP", r2(v.ratio("srr_remote_32B_vs_zmq")), "–", "–"),
        ("remote / gRPC unary", r2(v.ratio("srr_remote_32B_vs_grpc")), "–", "–"),
        ("remote poll_spin / gRPC unary", r2(v.ratio("srr_remote_32B_spin_vs_grpc")), "–", "–"),
        ("remote / TCP ping-pong", r2(v.ratio("srr_remote_32B_vs_tcp")), "–", "–"),
    ];
    for (a, b, c, d) in rows {
        let _ = writeln!(s, "| {a} | {b} | {c} | {d} |");
    }
    let _ = writeln!(
        s,
        "\nThe papers' remote exchange cost about 1 ms above the two-packet bound, roughly the \
         bound itself again (overhead / penalty ≈ 1); vipc's overhead / penalty is the same \
         figure for this machine's network."
    );

    // Baselines.
    let _ = writeln!(
        s,
        "\n### Baselines (item 7), 32-byte round trips\n\n| baseline | µs | ÷ UDP ping-pong |\n|---|---|---|"
    );
    let _ = writeln!(s, "| UDP ping-pong, blocking | {} | 1.00 |", f(udp));
    for (name, what) in [
        ("udp_busypoll_32B", "UDP ping-pong, busy-poll"),
        ("tcp_pingpong_32B", "TCP ping-pong, TCP_NODELAY"),
        ("condvar_roundtrip", "condvar hand-off, two threads"),
        ("zmq_reqrep_32B", "ZeroMQ REQ/REP over TCP"),
        ("grpc_unary_32B", "gRPC unary (tonic)"),
    ] {
        let _ = writeln!(s, "| {what} | {} | {} |", f(v.value(name)), r2(v.ratio(name)));
    }

    // 3. Moves.
    let _ = writeln!(
        s,
        "\n## 3. MoveTo and MoveFrom, remote (000 Tables 3-5…3-8 at 1 KB)\n\n\
         Throughput of the move itself (timed by the mover) against a TCP bulk transfer of the same size \
         (timed to the receiver's acknowledgement).\n\n\
         | size | MoveTo MB/s | MoveFrom MB/s | TCP bulk MB/s | MoveTo / TCP | MoveFrom / TCP |\n|---|---|---|---|---|---|"
    );
    for l in ["1KB", "64KB", "1MiB", "16MiB"] {
        let (to, from) = (format!("moveto_remote_{l}"), format!("movefrom_remote_{l}"));
        let _ = writeln!(
            s,
            "| {l} | {} | {} | {} | {} | {} |",
            f(v.value(&to)),
            f(v.value(&from)),
            f(v.base(&to)),
            r2(v.ratio(&to)),
            r2(v.ratio(&from))
        );
    }
    let pen1k = match (v.value("penalty_1KB"), v.value("penalty_64B")) {
        (Some(a), Some(b)) => Some(a + b),
        _ => None,
    };
    let _ = writeln!(
        s,
        "\n| 1 KB move | vipc | 1983 | 1985 |\n|---|---|---|---|\n\
         | MoveTo remote | {} µs | 8.00 ms | 5.86 ms |\n\
         | MoveFrom remote | {} µs | 8.00 ms | 5.83 ms |\n\
         | MoveTo remote / local | {} | 8.42 | 4.92 |\n\
         | MoveFrom remote / local | {} | 8.42 | 4.90 |\n\
         | MoveFrom remote / penalty (1 KB + 64 B) | {} | 1.18 | 1.13 |",
        f(v.value("moveto_remote_1KB_time")),
        f(v.value("movefrom_remote_1KB_time")),
        r2(v.ratio("moveto_remote_1KB_time")),
        r2(v.ratio("movefrom_remote_1KB_time")),
        r2(div(v.value("movefrom_remote_1KB_time"), pen1k)),
    );

    // 4. Pages.
    let _ = writeln!(
        s,
        "\n## 4. Page read and write (000 Tables 3-9, 3-10; 001 Table 6-1)\n\n\
         Appended segment (Send + ReplyWithSegment, or Send carrying the page + Reply: 2 packets) against \
         Thoth style (Send–Receive–MoveTo/MoveFrom–Reply). The penalty is a raw UDP round trip carrying the \
         page one way. vipc always appends the first part of a read-granted segment, so the Thoth-style \
         write also carries the page in its Send.\n\n\
         | operation | remote µs | remote / local | remote / penalty | Thoth / appended | packets | Thoth packets |\n\
         |---|---|---|---|---|---|---|"
    );
    for l in ["512B", "4KB"] {
        for op in ["read", "write"] {
            let n = format!("page_{op}_{l}");
            let _ = writeln!(
                s,
                "| {op} {l} | {} | {} | {} | {} | {} | {} |",
                f(v.value(&n)),
                r2(v.ratio(&format!("{n}_remote_over_local"))),
                r2(v.ratio(&n)),
                r2(v.ratio(&format!("{n}_thoth"))),
                f(v.value(&format!("{n}_packets"))),
                f(v.value(&format!("{n}_thoth_packets")))
            );
        }
    }
    let _ = writeln!(
        s,
        "| 1983 read / write 512 B (3 Mb) | 5.56 / 5.60 ms | 4.24 / 4.27 | 1.43 / 1.44 | – / 1.45 | 2 | 4 |\n\
         | 1985 read / write 512 B (10 Mb) | 4.54 / 4.54 ms | 2.69 / 2.70 | 1.44 / 1.44 | – / 1.54 | 2 | 4 |"
    );

    // 5. Units.
    let _ = writeln!(
        s,
        "\n## 5. 64 KB read by transfer unit (000 Tables 3-11, 3-12; 001 Table 6-3)\n\n\
         One exchange whose server moves 64 KB into the client's segment by a loop of MoveTo of `unit` bytes. \
         \"÷ 64 KB unit\" is the table's shape. The penalty streams {}-byte datagrams; where the runtime \
         sends larger ones (loopback), remote / penalty falls below 1.\n\n\
         | unit | vipc remote ms | ÷ 64 KB unit | remote / local | remote / penalty | 1985 3 Mb ÷ 64 KB | 1985 10 Mb ÷ 64 KB | 1985 10 Mb remote / local |\n\
         |---|---|---|---|---|---|---|---|",
        crate::ipc::PENALTY_PACKET
    );
    let u64k = v.value("read64k_unit_64KB");
    for (unit, local, r3, r10) in UNITS_PAPER {
        let n = format!("read64k_unit_{unit}KB");
        let _ = writeln!(
            s,
            "| {unit} KB | {} | {} | {} | {} | {:.2} | {:.2} | {:.2} |",
            f(v.value(&n)),
            r2(div(v.value(&n), u64k)),
            r2(v.ratio(&format!("{n}_remote_over_local"))),
            r2(v.ratio(&n)),
            r3 / 335.4,
            r10 / 198.0,
            r10 / local
        );
    }

    // 6. Saturation.
    let _ = writeln!(
        s,
        "\n## 6. Server saturation (000 p. 26, 001 §5.4)\n\n\
         Exchanges per second one server process sustains, client processes each a node of its own. \
         The papers' server capped a host at 575 (1985) / 558 (1983) exchanges/s, 1.28 / 1.42 × one \
         client's rate (1 / remote exchange time).\n\n\
         | clients | vipc exchanges/s | UDP echo exchanges/s | vipc / UDP | vipc ÷ 1 client |\n|---|---|---|---|---|"
    );
    let one = v.value("saturation_1_clients");
    for c in [1, 2, 4, 8] {
        let n = format!("saturation_{c}_clients");
        let _ = writeln!(
            s,
            "| {c} | {} | {} | {} | {} |",
            f(v.value(&n)),
            f(v.base(&n)),
            r2(v.ratio(&n)),
            r2(div(v.value(&n), one))
        );
    }

    // Memory.
    if let Some(r) = results.records.iter().find(|r| r.name.starts_with("server_rss_")) {
        let _ = writeln!(
            s,
            "\n## Memory\n\n`{}`: {} MB resident (idle {} MB, ratio {:.2}); bar: under 50 MB with 1,000.",
            r.name,
            f(Some(r.value)),
            f(Some(r.baseline_value)),
            r.ratio
        );
    }

    // Groups (issue 5).
    if let Some(g) = crate::groups::report::section(&results.records) {
        s.push_str(&g);
    }

    // Remote memory (issue 6).
    if let Some(r) = crate::rmem::report_section(&results.records) {
        s.push_str(&r);
    }

    // Language-level primitives (issue 7).
    if let Some(r) = crate::typed::report_section(&results.records) {
        s.push_str(&r);
    }

    // Plots.
    let _ = writeln!(s, "\n## Plots\n");
    for p in plots {
        match p {
            Ok((file, title)) => {
                let _ = writeln!(s, "### {title}\n\n![{title}]({file})\n");
            }
            Err(e) => {
                let _ = writeln!(s, "- plot not drawn: {e}");
            }
        }
    }
    if !results.notes.is_empty() || !results.failures.is_empty() {
        let _ = writeln!(s, "\n## Notes\n");
        for n in &results.notes {
            let _ = writeln!(s, "- {n}");
        }
        for n in &results.failures {
            let _ = writeln!(s, "- FAILED: {n}");
        }
    }
    let _ = writeln!(s, "\n## Every record\n\n```\n{}```", table(&results.records));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synthetic() -> Results {
        let mut rs = Vec::new();
        let mut add = |n: &str, v: f64, u: &str, b: &str, bv: f64| rs.push(Record::new("ipc", n, v, u, b, bv));
        add("penalty_64B", 8.0, "us", "penalty_64B", 8.0);
        add("penalty_1KB", 9.0, "us", "penalty_64B", 8.0);
        add("srr_local_32B", 10.0, "us", "condvar_roundtrip", 12.0);
        add("srr_remote_32B", 20.0, "us", "udp_pingpong_32B", 17.0);
        add("srr_remote_over_local", 20.0, "us", "srr_local_32B", 10.0);
        add("packets_per_exchange_remote", 2.0, "packets", "udp_pingpong_packets", 2.0);
        add("grpc_unary_32B", 130.0, "us", "udp_pingpong_32B", 17.0);
        for (l, b) in [("1KB", 1024.0), ("64KB", 65536.0), ("1MiB", 1048576.0), ("16MiB", 16777216.0)] {
            add(&format!("moveto_remote_{l}"), b / 1000.0, "MB/s", &format!("tcp_bulk_{l}"), b / 500.0);
            add(&format!("movefrom_remote_{l}"), b / 900.0, "MB/s", &format!("tcp_bulk_{l}"), b / 500.0);
        }
        add("page_read_512B", 30.0, "us", "udp_read_512B", 18.0);
        add("page_read_512B_packets", 2.0, "packets", "udp_page_packets", 2.0);
        add("read64k_unit_1KB", 3.0, "ms", "udp_64KB_one_way", 0.5);
        add("read64k_unit_64KB", 0.8, "ms", "udp_64KB_one_way", 0.5);
        add("read64k_unit_1KB_vs_64KB", 3.0, "ms", "read64k_unit_64KB", 0.8);
        for c in [1, 2, 4, 8] {
            add(&format!("saturation_{c}_clients"), 40000.0 + c as f64, "exchanges/s", "udp", 60000.0);
        }
        add("server_rss_1000_held", 12.0, "MB", "server_rss_idle", 8.0);
        let cdfs = vec![
            ("udp_pingpong_32B".to_string(), (1..=200).map(|i| 15.0 + f64::from(i) * 0.1).collect()),
            ("srr_remote_32B".to_string(), (1..=200).map(|i| 18.0 + f64::from(i) * 0.2).collect()),
        ];
        Results { records: rs, cdfs, notes: vec!["a note".into()], failures: vec![], quick: true }
    }

    #[test]
    fn the_report_names_the_suites_it_measured() {
        let mut r = synthetic();
        assert_eq!(suites_measured(&r), "Suite `ipc`");
        r.records.push(Record::new("rmem", "rmem_cas", 12.0, "us", "udp_pingpong_32B", 11.0));
        r.records.push(Record::new("ipc", "srr_local_32B", 10.0, "us", "condvar_roundtrip", 12.0));
        assert_eq!(suites_measured(&r), "Suites `ipc`, `rmem`");
        assert!(markdown(&r, &[]).contains("Suites `ipc`, `rmem` (**--quick**"));
    }

    #[test]
    fn markdown_has_every_section_and_the_papers_figures() {
        let md = markdown(&synthetic(), &[Ok(("x.png".into(), "X".into())), Err("no font".into())]);
        for needle in [
            "Suite `ipc` (**--quick**",
            "## Bars",
            "| remote SRR / UDP ping-pong | 1.18 | ≤ 1.15 | **FAIL** |",
            "## 1. Network penalty",
            "| 1KB | 9.000 | 1.12 | 5.83 | 8.97 | 4.26 | 7.75 |",
            "| remote / local | 2.00 | 3.30 | 2.37 |",
            "| overhead above the penalty | 3.000 µs | 1.24 ms | 1.13 ms |",
            "## 3. MoveTo and MoveFrom",
            "| 1MiB | 1049 | 1165 | 2097 | 0.50 | 0.56 |",
            "## 4. Page read",
            "## 5. 64 KB read by transfer unit",
            "| 1 KB | 3.000 | 3.75 |",
            "## 6. Server saturation",
            "![X](x.png)",
            "plot not drawn: no font",
            "- a note",
            "## Every record",
        ] {
            assert!(md.contains(needle), "missing {needle:?} in\n{md}");
        }
    }

    #[test]
    fn report_writes_markdown_and_plots() {
        let dir = std::env::temp_dir().join(format!("vipc-bench-report-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        write(&dir, &synthetic()).unwrap();
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(md.starts_with("# vipc bench report"));
        if plots::load_font().is_ok() {
            for png in ["latency_cdf.png", "throughput.png", "saturation.png"] {
                let bytes = std::fs::read(dir.join(png)).unwrap();
                assert!(bytes.starts_with(b"\x89PNG"), "{png}");
                assert!(md.contains(png));
            }
        } else {
            assert!(md.contains("plot not drawn"));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
