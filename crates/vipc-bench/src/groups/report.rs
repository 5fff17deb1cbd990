//! Section 7 of `report.md`: suite `groups` beside 004's Tables 2–4 and
//! Fig. 17, every figure as a ratio to its baseline from the same run.

use crate::record::{fmt_num, Record};
use std::fmt::Write as _;

/// 004 figures by number of receivers, where the thesis measured that
/// number (it measured 1, 2, 3 and 8; we measure 2, 4, 8 and 16).
struct Paper {
    receivers: usize,
    /// Table 2: 1-reliable ÷ the 1-reliable Send to one receiver (2.418 ms,
    /// the thesis's nearest to one unicast exchange in that table).
    k1_vs_unicast: f64,
    /// Table 2: ALL_REPLY ÷ the same.
    all_vs_unicast: f64,
    /// Table 2: ALL_REPLY ÷ 1-reliable.
    all_vs_k1: f64,
    /// Table 2: K_REPLY (K = all) ÷ ALL_REPLY.
    k_vs_all: f64,
    /// Table 3: ALL_DELIVER ÷ datagram (no measurement at 8: `None`).
    deliver_vs_datagram: Option<f64>,
    /// Table 4: reliable kernel ÷ Unisend (a series of unicasts).
    reliable_vs_series: f64,
    /// Table 4: unreliable multicast with user-level retries ÷ Unisend.
    retry_vs_series: f64,
    /// Table 4: reliable kernel ÷ unreliable multicast.
    reliable_vs_retry: f64,
}

const PAPER: &[Paper] = &[
    Paper {
        receivers: 2,
        k1_vs_unicast: 3.18 / 2.418,
        all_vs_unicast: 3.926 / 2.418,
        all_vs_k1: 3.926 / 3.18,
        k_vs_all: 3.954 / 3.926,
        deliver_vs_datagram: Some(2.1 / 0.65),
        reliable_vs_series: 3.5 / 4.5,
        retry_vs_series: 3.3 / 4.5,
        reliable_vs_retry: 3.5 / 3.3,
    },
    Paper {
        receivers: 8,
        k1_vs_unicast: 6.993 / 2.418,
        all_vs_unicast: 8.878 / 2.418,
        all_vs_k1: 8.878 / 6.993,
        k_vs_all: 8.991 / 8.878,
        deliver_vs_datagram: None,
        reliable_vs_series: 7.5 / 17.8,
        retry_vs_series: 7.2 / 17.8,
        reliable_vs_retry: 7.5 / 7.2,
    },
];

fn get<'a>(records: &'a [Record], name: &str) -> Option<&'a Record> {
    records.iter().find(|r| r.suite == "groups" && r.name == name)
}

fn ratio(records: &[Record], name: &str) -> String {
    get(records, name).map_or("–".into(), |r| format!("{:.2}", r.ratio))
}

fn value(records: &[Record], name: &str) -> String {
    get(records, name).map_or("–".into(), |r| fmt_num(r.value))
}

fn paper(n: usize, f: impl Fn(&Paper) -> Option<f64>) -> String {
    PAPER.iter().find(|p| p.receivers == n).and_then(f).map_or("–".into(), |v| format!("{v:.2}"))
}

/// The section, or `None` when the run has no `groups` records.
pub fn section(records: &[Record]) -> Option<String> {
    let sizes: Vec<usize> =
        [2, 4, 8, 16].into_iter().filter(|n| get(records, &format!("all_reply_{n}")).is_some()).collect();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\n## 7. Groups and reliable multicast (004 Tables 2–4, Fig. 17)\n\n\
         One member per host, each host a vipc node in a network namespace on one bridge; the client \
         sends from a host of its own. As in 004 Table 2, the group of R members is measured on R \
         hosts (and the client's), each with its own unicast exchange as the baseline. Times are medians in µs; every ratio divides by a baseline \
         measured in the same run. 004's ratios (Sun 3/50s, 10 Mbit/s Ethernet) are given where it \
         measured the same number of receivers; its \"unicast\" is its 1-reliable Send to one \
         receiver (2.418 ms), the nearest to one exchange in its Table 2 (so ALL_REPLY to 8 is 3.67 ×)."
    );
    let _ = writeln!(
        s,
        "\n### Table 2: reply modes\n\n\
         | members | unicast exchange | 1-reliable | ÷ unicast | 004 | K_REPLY (K = all) | ÷ ALL_REPLY | 004 | \
         ALL_REPLY | ÷ unicast | 004 | ÷ 1-reliable | 004 |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for &n in &sizes {
        let _ = writeln!(
            s,
            "| {n} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            value(records, &format!("unicast_exchange_{n}")),
            value(records, &format!("k_reply1_{n}")),
            ratio(records, &format!("k_reply1_{n}")),
            paper(n, |p| Some(p.k1_vs_unicast)),
            value(records, &format!("k_reply_{n}")),
            ratio(records, &format!("k_reply_vs_all_{n}")),
            paper(n, |p| Some(p.k_vs_all)),
            value(records, &format!("all_reply_{n}")),
            ratio(records, &format!("all_reply_{n}")),
            paper(n, |p| Some(p.all_vs_unicast)),
            ratio(records, &format!("all_reply_vs_k1_{n}")),
            paper(n, |p| Some(p.all_vs_k1)),
        );
    }
    if sizes.iter().any(|n| get(records, &format!("raw_mcast_all_{n}")).is_some()) {
        let _ = writeln!(
            s,
            "\n### The floor: plain UDP between the same namespaces\n\n\
             One 32-byte datagram multicast to an echo thread on each member host, timed to the first \
             and the last echo, and a unicast echo with host 1: what any implementation pays here before \
             its own work. On two cores every host's kernel and thread share the CPUs, so the floor \
             itself grows with the group.\n\n\
             | members | raw unicast | raw first | raw all | raw all ÷ vipc unicast (bar 2.5 at 8) | \
             raw all ÷ raw first (bar 1.10) | 1-reliable ÷ raw first | ALL_REPLY ÷ raw all |\n\
             |---|---|---|---|---|---|---|---|"
        );
        for &n in &sizes {
            let v = |name: String| get(records, &name).map(|r| r.value);
            let div = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) if b > 0.0 => format!("{:.2}", a / b),
                _ => "–".into(),
            };
            let raw_all = v(format!("raw_mcast_all_{n}"));
            let _ = writeln!(
                s,
                "| {n} | {} | {} | {} | {} | {} | {} | {} |",
                get(records, &format!("raw_mcast_all_{n}")).map_or("–".into(), |r| fmt_num(r.baseline_value)),
                value(records, &format!("raw_mcast_first_{n}")),
                value(records, &format!("raw_mcast_all_{n}")),
                div(raw_all, v(format!("unicast_exchange_{n}"))),
                ratio(records, &format!("raw_mcast_all_vs_first_{n}")),
                ratio(records, &format!("k_reply1_vs_raw_{n}")),
                ratio(records, &format!("all_reply_vs_raw_{n}")),
            );
        }
    }
    let ones: Vec<String> = sizes
        .iter()
        .filter_map(|n| get(records, &format!("group_send_one_{n}")).map(|r| format!("{n} members {:.2}", r.ratio)))
        .collect();
    if !ones.is_empty() {
        let _ = writeln!(
            s,
            "\nV's own group Send taking the first reply (reply mode One, 000 §6: about one unicast exchange) \
             ÷ unicast exchange: {}.",
            ones.join(", ")
        );
    }
    if let Some(r) = records.iter().find(|r| r.suite == "groups" && r.name.contains("_among_") && r.unit == "us") {
        let _ = writeln!(
            s,
            "\nHosts without members (004 §5.3, ACK 0): `{}` = {} µs, {:.2} × the same group on its own hosts \
             (004: no measurable difference).",
            r.name,
            fmt_num(r.value),
            r.ratio
        );
    }
    if let Some(r) = get(records, "further_reply_cost") {
        let _ = writeln!(
            s,
            "\nEach further reply (ALL_REPLY's slope from the smallest to the largest group): {} µs, \
             {:.2} × a unicast exchange (004: 0.882 ms per receiver, 0.36 × its 2.418 ms).",
            fmt_num(r.value),
            r.ratio
        );
    }
    let _ = writeln!(
        s,
        "\n### Table 3: datagram and DELIVER modes\n\n\
         The share received counts the messages the members took with Receive (004 lost about 50 % of \
         datagrams and 8 % under DELIVER, both by overwrites of its one-message slot).\n\n\
         | members | datagram | share received | ALL_DELIVER | ÷ datagram | 004 | share received | \
         K_DELIVER (K = all) | ÷ datagram | share received |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for &n in &sizes {
        let _ = writeln!(
            s,
            "| {n} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            value(records, &format!("datagram_{n}")),
            value(records, &format!("datagram_received_{n}")),
            value(records, &format!("all_deliver_{n}")),
            ratio(records, &format!("all_deliver_{n}")),
            paper(n, |p| p.deliver_vs_datagram),
            value(records, &format!("all_deliver_received_{n}")),
            value(records, &format!("k_deliver_{n}")),
            ratio(records, &format!("k_deliver_{n}")),
            value(records, &format!("k_deliver_received_{n}")),
        );
    }
    let _ = writeln!(
        s,
        "\n### Table 4: the application task (a reply from every member)\n\n\
         | members | series of unicasts | multicast + user retries | ÷ series | 004 | ALL_REPLY ÷ series | 004 | \
         ALL_REPLY ÷ retries | 004 |\n|---|---|---|---|---|---|---|---|---|"
    );
    for &n in &sizes {
        let series = get(records, &format!("all_reply_vs_series_{n}")).map(|r| r.baseline_value);
        let _ = writeln!(
            s,
            "| {n} | {} | {} | {} | {} | {} | {} | {} | {} |",
            series.map_or("–".into(), fmt_num),
            value(records, &format!("retry_multicast_{n}")),
            ratio(records, &format!("retry_multicast_{n}")),
            paper(n, |p| Some(p.retry_vs_series)),
            ratio(records, &format!("all_reply_vs_series_{n}")),
            paper(n, |p| Some(p.reliable_vs_series)),
            ratio(records, &format!("all_reply_vs_retry_{n}")),
            paper(n, |p| Some(p.reliable_vs_retry)),
        );
    }
    let _ = writeln!(
        s,
        "\n### Fig. 17: packets per message (measured ÷ best-case formula)\n\n\
         Read from the client node's counters (packets sent plus received, late ones included). \
         R receivers, H further alive hosts without receivers.\n\n\
         | members | ALL_REPLY (1+R+H) | 1-reliable (1+R+H) | ALL_DELIVER (1+R+H) | datagram (1) | \
         series (2R) | multicast + retries (1+R) |\n|---|---|---|---|---|---|---|"
    );
    for &n in &sizes {
        let cell = |k: &str| {
            get(records, &format!("packets_{k}_{n}")).map_or("–".into(), |r| {
                format!("{} / {} = {:.3}", fmt_num(r.value), fmt_num(r.baseline_value), r.ratio)
            })
        };
        let _ = writeln!(
            s,
            "| {n} | {} | {} | {} | {} | {} | {} |",
            cell("all_reply"),
            cell("k_reply1"),
            cell("all_deliver"),
            cell("datagram"),
            cell("series"),
            cell("retry")
        );
    }
    let detect = get(records, "down_detect_ms");
    let soak = get(records, "soak_false_downs");
    if detect.is_some() || soak.is_some() {
        let _ = writeln!(s, "\n### I-Am-Here\n");
        if let Some(r) = detect {
            let _ = writeln!(
                s,
                "- A SIGKILLed host was declared down after {} ms (the default settings promise {} ms; bar 500 ms; \
                 1988's I-Am-Here took about 3 s).",
                fmt_num(r.value),
                fmt_num(r.baseline_value)
            );
        }
        if let Some(r) = soak {
            let _ = writeln!(
                s,
                "- Soak at full load on every host: {} live hosts declared down over {} ALL_REPLY Sends (bar 0).",
                fmt_num(r.value),
                fmt_num(r.baseline_value)
            );
        }
    }
    if sizes.is_empty() && detect.is_none() && soak.is_none() {
        return None;
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_sets_our_ratios_beside_004s() {
        assert!(section(&[]).is_none());
        let rs = vec![
            Record::new("groups", "unicast_exchange_8", 20.0, "us", "unicast_exchange_8", 20.0),
            Record::new("groups", "k_reply1_8", 60.0, "us", "unicast_exchange", 20.0),
            Record::new("groups", "all_reply_8", 50.0, "us", "unicast_exchange", 20.0),
            Record::new("groups", "all_reply_vs_k1_8", 50.0, "us", "k_reply1_8", 60.0),
            Record::new("groups", "all_reply_vs_series_8", 50.0, "us", "unicast_series_8", 200.0),
            Record::new("groups", "packets_all_reply_8", 17.0, "packets", "formula_1+R+H_8", 17.0),
            Record::new("groups", "down_detect_ms", 312.0, "ms", "configured_bound_ms", 405.0),
            Record::new("groups", "raw_mcast_first_8", 30.0, "us", "raw_udp_unicast_8", 10.0),
            Record::new("groups", "raw_mcast_all_8", 40.0, "us", "raw_udp_unicast_8", 10.0),
            Record::new("groups", "raw_mcast_all_vs_first_8", 40.0, "us", "raw_mcast_first_8", 30.0),
            Record::new("groups", "k_reply1_vs_raw_8", 60.0, "us", "raw_mcast_first_8", 30.0),
            Record::new("groups", "all_reply_vs_raw_8", 50.0, "us", "raw_mcast_all_8", 40.0),
        ];
        let md = section(&rs).unwrap();
        for needle in [
            "### Table 2",
            "| 8 | 20.00 | 60.00 | 3.00 | 2.89 |",
            "| 2.50 | 3.67 | 0.83 | 1.27 |",
            "| 8 | 200.0 |",
            "| 0.25 | 0.42 |",
            "17.00 / 17.00 = 1.000",
            "declared down after 312.0 ms",
            "### The floor",
            "| 8 | 10.00 | 30.00 | 40.00 | 2.00 | 1.33 | 2.00 | 1.25 |",
        ] {
            assert!(md.contains(needle), "missing {needle:?} in\n{md}");
        }
        // Sizes the run did not measure get no row.
        assert!(!md.contains("| 4 |"));
    }
}
