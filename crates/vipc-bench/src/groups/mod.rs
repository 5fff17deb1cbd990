//! Suite `groups`: process groups and reliable multicast (004) between
//! member hosts in network namespaces that the bench creates and removes.
//!
//! Every host is a vipc node in its own namespace on one bridge, with IP
//! multicast between them; host `i` (1-based) has one member in the group of
//! every size `s ≥ i`, so the group of size `s` has one member on each of
//! hosts 1..=s and the other hosts answer its reliable Sends with ACK 0. A
//! measuring client runs in a namespace of its own. Figures (medians of round
//! medians, each round measuring the baseline beside the figure):
//! - 004 Table 2: 1-reliable (K_REPLY 1), K_REPLY (K = all) and ALL_REPLY
//!   against one unicast exchange, and ALL_REPLY against 1-reliable, by size;
//! - 004 Table 3: the datagram (reply mode None), ALL_DELIVER and K_DELIVER
//!   to a twin group whose members never reply, and the share of the
//!   messages the members took (counted by the members);
//! - 004 Table 4: the application task — a series of unicasts, an unreliable
//!   Send with user-level retries, the reliable Send;
//! - 000 §6: the cost of each further reply;
//! - 004 Fig. 17: packets per Send against the formula;
//! - I-Am-Here: time until a SIGKILLed host is declared down, and false
//!   downs during a soak with the client and every host sending ALL_REPLY
//!   back to back.
//!
//! Needs root and iproute2; elsewhere the suite says why and records nothing.
//! A reaper process in its own process group removes the namespaces when
//! the bench exits in any way (error, Ctrl-C, SIGKILL).

pub mod peers;
mod raw;
pub mod report;
mod topology;

use crate::error::Result;
use crate::peer::PeerExe;
use crate::record::Record;
use crate::stats::median;
use crate::Output;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use topology::{Setup, Topology};

/// The suite's items, in the order they run (`detect` kills a host).
pub const ITEMS: &[&str] = &["sizes", "soak", "detect"];

const SUITE: &str = "groups";

/// The suite's state across items: the namespaces, made on first use.
pub struct Session {
    exe: PeerExe,
    quick: bool,
    topo: Option<Topology>,
    skipped: Option<String>,
}

/// What one command of the client answered.
type Fields = BTreeMap<String, String>;

impl Session {
    /// A session; nothing is created until an item runs.
    pub fn new(exe: PeerExe, quick: bool) -> Session {
        Session { exe, quick, topo: None, skipped: None }
    }

    fn sizes(&self) -> Vec<usize> {
        if self.quick {
            vec![2, 4]
        } else {
            vec![2, 4, 8, 16]
        }
    }

    /// The topology of `hosts` member hosts (each size of group up to
    /// `hosts`), made anew when the current one has another number of hosts;
    /// `None` when the machine cannot make namespaces (noted once).
    fn topology(&mut self, out: &mut Output, hosts: usize) -> Result<Option<&mut Topology>> {
        if self.skipped.is_some() {
            return Ok(None);
        }
        if self.topo.as_ref().is_some_and(|t| t.hosts() != hosts) {
            self.topo = None; // removes its namespaces before the next are made
        }
        if self.topo.is_none() {
            let sizes: Vec<usize> = self.sizes().into_iter().filter(|&s| s <= hosts).collect();
            match Topology::create(&self.exe, hosts, &sizes) {
                Ok(t) => self.topo = Some(t),
                Err(Setup::Unavailable(why)) => {
                    eprintln!("bench: groups skipped: {why}");
                    out.note(format!("groups: skipped ({why})"));
                    self.skipped = Some(why);
                    return Ok(None);
                }
                Err(Setup::Failed(e)) => return Err(format!("setting up the namespaces: {e}").into()),
            }
        }
        Ok(self.topo.as_mut())
    }

    /// Runs one item; a machine without network namespaces skips it with a note.
    pub fn run_item(&mut self, out: &mut Output, item: &str) -> Result<()> {
        let all = self.sizes();
        let most = *all.last().unwrap_or(&2);
        let quick = self.quick;
        match item {
            "sizes" => {
                // As in 004 Table 2, a group of R members on R hosts (and the
                // client's); then the largest topology with the smallest
                // group: what the hosts without members cost (ACK 0).
                let mut runs = Runs::default();
                for &s in &all {
                    let Some(topo) = self.topology(out, s)? else { return Ok(()) };
                    let idle = if s == most && most > all[0] { Some(all[0]) } else { None };
                    measure_size(topo, &mut runs, s, idle, quick)?;
                }
                for r in records(&runs, &all) {
                    out.record(r);
                }
                out.note(floor_note(&runs, &all));
                Ok(())
            }
            "soak" => match self.topology(out, most)? {
                Some(topo) => soak(topo, out, if quick { 3.0 } else { 600.0 }),
                None => Ok(()),
            },
            "detect" => {
                let r = match self.topology(out, most)? {
                    Some(topo) => detect(topo, out),
                    None => Ok(()),
                };
                self.topo = None; // one host fewer: not reused
                r
            }
            other => Err(format!("unknown item groups/{other}").into()),
        }
    }
}

fn num(f: &Fields, key: &str) -> Result<f64> {
    f.get(key).and_then(|v| v.parse().ok()).ok_or_else(|| format!("no {key}= in the client's answer").into())
}

/// 004 Fig. 17, best case, packets per message of a series of unicasts
/// ("Unisend") to `r` receivers: a Send and a Reply each (2NR over N
/// messages; the 2R of registering receivers is set-up, not per message).
pub fn formula_unisend(r: usize) -> f64 {
    (2 * r) as f64
}

/// 004 Fig. 17, best case, packets per message of the unreliable multicast
/// collecting `r` replies: one Send and the replies, N(1+R) over N messages.
pub fn formula_unreliable(r: usize) -> f64 {
    (1 + r) as f64
}

/// 004 Fig. 17, best case, packets per message of the reliable kernel to
/// `r` receivers, one per host, with `h` further alive hosts without
/// receivers: the Send, the `r` replies (or acknowledgements of delivery)
/// carrying their hosts' acknowledgements, and one ACK 0 from each of the
/// `h` hosts, N(1+R+H) over N messages. The same count holds for the
/// DELIVER modes, where every host acknowledges once.
pub fn formula_reliable(r: usize, h: usize) -> f64 {
    (1 + r + h) as f64
}

/// 004's V datagram (reply mode none): the Send alone.
pub fn formula_datagram() -> f64 {
    1.0
}

/// The medians of one kind of figure over the rounds, by name.
#[derive(Default)]
struct Runs {
    time: BTreeMap<String, Vec<f64>>,
    packets: BTreeMap<String, Vec<f64>>,
    received: BTreeMap<String, Vec<f64>>,
}

impl Runs {
    fn keep(&mut self, name: &str, f: &Fields) -> Result<()> {
        self.time.entry(name.into()).or_default().push(num(f, "median")?);
        self.packets.entry(name.into()).or_default().push(num(f, "packets")?);
        Ok(())
    }
    /// A raw UDP round's figures: the last answer's time under `name`, the
    /// first's under `name_first`.
    fn keep_raw(&mut self, name: &str, f: &Fields) -> Result<()> {
        self.time.entry(name.into()).or_default().push(num(f, "median")?);
        self.time.entry(format!("{name}_first")).or_default().push(num(f, "first")?);
        Ok(())
    }
    fn time(&self, k: &str) -> f64 {
        self.time.get(k).map(|v| median(v)).unwrap_or(0.0)
    }
    fn packets(&self, k: &str) -> f64 {
        self.packets.get(k).map(|v| median(v)).unwrap_or(0.0)
    }
    fn received(&self, k: &str) -> f64 {
        self.received.get(k).map(|v| median(v)).unwrap_or(0.0)
    }
}

/// The share of the `size` silent members' copies that `sends` Sends got
/// taken by the members, from the hosts' counters before and after.
pub fn share_received(before: &topology::HostStats, after: &topology::HostStats, size: usize, sends: usize) -> f64 {
    let got = |h: &topology::HostStats| h.received.get(&size).copied().unwrap_or(0);
    if sends == 0 || size == 0 {
        return 0.0;
    }
    got(after).saturating_sub(got(before)) as f64 / (sends * size) as f64
}

/// Runs a command to the silent group of `size` and records the share of
/// its copies the members took.
fn with_received(topo: &mut Topology, runs: &mut Runs, name: &str, cmd: &str, size: usize, n: usize) -> Result<()> {
    let before = topo.host_stats()?;
    let f = topo.ask(cmd)?;
    let after = topo.host_stats()?;
    runs.received.entry(name.into()).or_default().push(share_received(&before, &after, size, n));
    runs.keep(name, &f)
}

/// Rounds of every figure of the group of `s` members on the `s` hosts of
/// `topo`, each round measuring the unicast exchange beside them; with
/// `idle`, also ALL_REPLY to the group of that size among all the hosts.
fn measure_size(topo: &mut Topology, runs: &mut Runs, s: usize, idle: Option<usize>, quick: bool) -> Result<()> {
    let (rounds, n) = if quick { (1, 40) } else { (5, 300) };
    for _ in 0..rounds {
        runs.keep(&format!("unicast_{s}"), &topo.ask(&format!("UNICAST host=1 n={n}"))?)?;
        runs.keep_raw(&format!("raw_unicast_{s}"), &topo.ask(&format!("RAWUNICAST host=1 n={n}"))?)?;
        runs.keep_raw(&format!("raw_mcast_{s}"), &topo.ask(&format!("RAWMCAST size={s} n={n}"))?)?;
        runs.keep(&format!("k1_{s}"), &topo.ask(&format!("RELIABLE mode=k-reply=1 size={s} n={n}"))?)?;
        runs.keep(&format!("kall_{s}"), &topo.ask(&format!("RELIABLE mode=k-reply={s} size={s} n={n}"))?)?;
        runs.keep(&format!("all_{s}"), &topo.ask(&format!("RELIABLE mode=all-reply size={s} n={n}"))?)?;
        runs.keep(&format!("one_{s}"), &topo.ask(&format!("ONE size={s} n={n}"))?)?;
        let cmd = format!("DATAGRAM size={s} n={n}");
        with_received(topo, runs, &format!("datagram_{s}"), &cmd, s, n)?;
        let cmd = format!("RELIABLE mode=k-deliver={s} size={s} n={n}");
        with_received(topo, runs, &format!("kdeliver_{s}"), &cmd, s, n)?;
        let cmd = format!("RELIABLE mode=all-deliver size={s} n={n}");
        with_received(topo, runs, &format!("deliver_{s}"), &cmd, s, n)?;
        runs.keep(&format!("series_{s}"), &topo.ask(&format!("SERIES hosts={s} n={}", n / 4))?)?;
        runs.keep(&format!("retry_{s}"), &topo.ask(&format!("RETRY size={s} n={n}"))?)?;
        if let Some(g) = idle {
            let cmd = format!("RELIABLE mode=all-reply size={g} n={n}");
            runs.keep(&format!("idle_all_{g}_{s}"), &topo.ask(&cmd)?)?;
        }
    }
    Ok(())
}

/// What plain UDP allows on this machine, beside the bars that compare
/// ALL_REPLY with the unicast exchange and with 1-reliable: the same bars
/// computed on the raw echoes (one datagram out, S answers back).
fn floor_note(runs: &Runs, sizes: &[usize]) -> String {
    let m = |k: String| runs.time(&k);
    let per_size: Vec<String> = sizes
        .iter()
        .map(|&s| {
            let (first, all) = (m(format!("raw_mcast_{s}_first")), m(format!("raw_mcast_{s}")));
            let unicast = m(format!("unicast_{s}"));
            format!(
                "{s} members: raw all / vipc unicast {:.2}, raw all / raw first {:.2}, ALL_REPLY / raw all {:.2}",
                all / unicast,
                all / first,
                m(format!("all_{s}")) / all
            )
        })
        .collect();
    format!(
        "groups: the raw UDP floor (bars: ALL_REPLY to 8 / unicast ≤ 2.5, ALL_REPLY / 1-reliable ≤ 1.10): {}",
        per_size.join("; ")
    )
}

/// The suite's records of item `sizes` from the medians of its rounds (the
/// group of `s` members measured on `s` hosts).
fn records(runs: &Runs, sizes: &[usize]) -> Vec<Record> {
    let mut v = Vec::new();
    let mut rec = |name: String, value: f64, unit: &str, base: String, bv: f64| {
        v.push(Record::new(SUITE, &name, value, unit, &base, bv));
    };
    let m = |k: String| runs.time(&k);
    for &s in sizes {
        let unicast = m(format!("unicast_{s}"));
        let uc = || format!("unicast_exchange_{s}");
        rec(format!("unicast_exchange_{s}"), unicast, "us", uc(), unicast);
        rec(format!("unicast_packets_{s}"), runs.packets(&format!("unicast_{s}")), "packets", "formula_2".into(), 2.0);
        let (k1, all) = (m(format!("k1_{s}")), m(format!("all_{s}")));
        // 004 Table 2.
        rec(format!("k_reply1_{s}"), k1, "us", uc(), unicast);
        rec(format!("k_reply_{s}"), m(format!("kall_{s}")), "us", uc(), unicast);
        rec(format!("k_reply_vs_all_{s}"), m(format!("kall_{s}")), "us", format!("all_reply_{s}"), all);
        rec(format!("all_reply_{s}"), all, "us", uc(), unicast);
        rec(format!("all_reply_vs_k1_{s}"), all, "us", format!("k_reply1_{s}"), k1);
        // The floor: the same exchanges in plain UDP between the same
        // namespaces (one datagram out, the S echoes back).
        let raw = m(format!("raw_unicast_{s}"));
        let (raw_first, raw_all) = (m(format!("raw_mcast_{s}_first")), m(format!("raw_mcast_{s}")));
        let ru = || format!("raw_udp_unicast_{s}");
        rec(format!("unicast_exchange_vs_raw_{s}"), unicast, "us", ru(), raw);
        rec(format!("raw_mcast_first_{s}"), raw_first, "us", ru(), raw);
        rec(format!("raw_mcast_all_{s}"), raw_all, "us", ru(), raw);
        rec(format!("raw_mcast_all_vs_first_{s}"), raw_all, "us", format!("raw_mcast_first_{s}"), raw_first);
        rec(format!("k_reply1_vs_raw_{s}"), k1, "us", format!("raw_mcast_first_{s}"), raw_first);
        rec(format!("all_reply_vs_raw_{s}"), all, "us", format!("raw_mcast_all_{s}"), raw_all);
        // V's own group Send taking the first reply (000 §6: ≈ a unicast exchange).
        rec(format!("group_send_one_{s}"), m(format!("one_{s}")), "us", uc(), unicast);
        // 004 Table 3.
        let dgram = m(format!("datagram_{s}"));
        rec(format!("datagram_{s}"), dgram, "us", uc(), unicast);
        rec(format!("all_deliver_{s}"), m(format!("deliver_{s}")), "us", format!("datagram_{s}"), dgram);
        rec(format!("k_deliver_{s}"), m(format!("kdeliver_{s}")), "us", format!("datagram_{s}"), dgram);
        let got = |k: &str| runs.received(&format!("{k}_{s}"));
        rec(format!("datagram_received_{s}"), got("datagram"), "share", "all_members".into(), 1.0);
        rec(
            format!("all_deliver_received_{s}"),
            got("deliver"),
            "share",
            format!("datagram_received_{s}"),
            got("datagram"),
        );
        rec(
            format!("k_deliver_received_{s}"),
            got("kdeliver"),
            "share",
            format!("datagram_received_{s}"),
            got("datagram"),
        );
        // 004 Table 4.
        let (series, retry) = (m(format!("series_{s}")), m(format!("retry_{s}")));
        rec(format!("retry_multicast_{s}"), retry, "us", format!("unicast_series_{s}"), series);
        rec(format!("all_reply_vs_series_{s}"), all, "us", format!("unicast_series_{s}"), series);
        rec(format!("all_reply_vs_retry_{s}"), all, "us", format!("retry_multicast_{s}"), retry);
        // 004 Fig. 17.
        let p = |k: &str| runs.packets(&format!("{k}_{s}"));
        let h = 0; // the topology of s hosts has no host without a member
        rec(
            format!("packets_all_reply_{s}"),
            p("all"),
            "packets",
            format!("formula_1+R+H_{s}"),
            formula_reliable(s, h),
        );
        rec(format!("packets_k_reply1_{s}"), p("k1"), "packets", format!("formula_1+R+H_{s}"), formula_reliable(s, h));
        rec(
            format!("packets_all_deliver_{s}"),
            p("deliver"),
            "packets",
            format!("formula_1+R+H_{s}"),
            formula_reliable(s, h),
        );
        rec(format!("packets_datagram_{s}"), p("datagram"), "packets", "formula_1".into(), formula_datagram());
        rec(format!("packets_series_{s}"), p("series"), "packets", format!("formula_2R_{s}"), formula_unisend(s));
        rec(format!("packets_retry_{s}"), p("retry"), "packets", format!("formula_1+R_{s}"), formula_unreliable(s));
    }
    // 000 §6: 1-reply against a unicast exchange (above) and each further reply.
    if let (Some(&small), Some(&big)) = (sizes.first(), sizes.last()) {
        if big > small {
            let further = (m(format!("all_{big}")) - m(format!("all_{small}"))) / (big - small) as f64;
            let unicast = m(format!("unicast_{big}"));
            rec("further_reply_cost".into(), further, "us", format!("unicast_exchange_{big}"), unicast);
            // 004 §5.3: hosts without members (ACK 0) should cost little.
            let idle = m(format!("idle_all_{small}_{big}"));
            let name = format!("all_reply_{small}_among_{big}_hosts");
            rec(name, idle, "us", format!("all_reply_{small}"), m(format!("all_{small}")));
            let p = runs.packets(&format!("idle_all_{small}_{big}"));
            let f = formula_reliable(small, big - small);
            rec(
                format!("packets_all_reply_{small}_among_{big}_hosts"),
                p,
                "packets",
                format!("formula_1+R+H_{small}"),
                f,
            );
        }
    }
    v
}

/// ALL_REPLY Sends back to back to the largest group for `secs` from the
/// client and from every host at once; every host (and the client) reports
/// how many hosts it declared down meanwhile — all of them were alive.
fn soak(topo: &mut Topology, out: &mut Output, secs: f64) -> Result<()> {
    let size = topo.hosts();
    let before = topo.hosts_down()?;
    topo.load_all(size)?;
    let f = topo.ask_within(&format!("SOAK size={size} secs={secs}"), Duration::from_secs_f64(secs + 60.0));
    let host_sends = topo.unload_all()?;
    let f = f?;
    let after = topo.hosts_down()?;
    let false_downs = num(&f, "hosts_down")? + after.saturating_sub(before) as f64;
    let sends = num(&f, "sends")? + host_sends as f64;
    out.record(Record::new(SUITE, "soak_false_downs", false_downs, "hosts", "soak_sends", sends));
    out.note(format!(
        "groups: soak of {secs:.0} s at full load: {sends} ALL_REPLY sends to {size} hosts from the client and \
         every host, {} of the client's not met, {false_downs} false downs",
        num(&f, "missed")?
    ));
    Ok(())
}

/// SIGKILL the last host and time until the client declares it down; the
/// baseline is the bound the default settings promise.
fn detect(topo: &mut Topology, out: &mut Output) -> Result<()> {
    let victim = topo.hosts();
    topo.send(&format!("WATCH host={victim}"))?;
    topo.expect_line("WATCHING")?;
    let killed = Instant::now();
    topo.kill_host(victim);
    let f = topo.answer(Duration::from_secs(15))?;
    let detected = killed.elapsed().as_secs_f64() * 1e3;
    num(&f, "down_after_ms")?; // the client saw it go
    out.record(Record::new(SUITE, "down_detect_ms", detected, "ms", "configured_bound_ms", detection_bound_ms()));
    Ok(())
}

/// `(alive_down_after + 1.05) × alive_period` of the default node settings.
fn detection_bound_ms() -> f64 {
    let e = vipc::NodeConfig::default().engine;
    let period = e.alive_period.map(|p| p.as_secs_f64() * 1e3).unwrap_or(0.0);
    (e.alive_down_after as f64 + 1.05) * period
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_packet_formulas_are_004_fig_17_per_message() {
        // 16 other hosts, 4 with a member: 1 Send + 4 replies + 12 ACK 0.
        assert_eq!(formula_reliable(4, 12), 17.0);
        assert_eq!(formula_reliable(4, 0), 5.0);
        assert_eq!(formula_unisend(8), 16.0);
        assert_eq!(formula_unreliable(8), 9.0);
        assert_eq!(formula_datagram(), 1.0);
        // Chapter 7: the multicast (1 + (M-1)) beats 2N unicasts when N > M/2.
        let hosts = 16;
        assert!(formula_reliable(9, hosts - 9) < formula_unisend(9));
        assert!(formula_reliable(8, hosts - 8) > formula_unisend(7));
    }

    fn fields(median: f64, packets: f64) -> Fields {
        [("median".to_string(), median.to_string()), ("packets".to_string(), packets.to_string())].into()
    }

    #[test]
    fn records_carry_their_baselines_and_ratios() {
        let mut runs = Runs::default();
        runs.keep("unicast_4", &fields(100.0, 2.0)).unwrap();
        runs.keep("unicast_4", &fields(120.0, 2.0)).unwrap();
        runs.keep("unicast_4", &fields(110.0, 2.0)).unwrap();
        for (k, t, p) in [("k1", 150.0, 5.0), ("all", 160.0, 5.0), ("series", 440.0, 8.0), ("datagram", 10.0, 1.0)] {
            runs.keep(&format!("{k}_4"), &fields(t, p)).unwrap();
        }
        runs.received.insert("datagram_4".into(), vec![0.5]);
        runs.received.insert("deliver_4".into(), vec![0.9]);
        let rs = records(&runs, &[4]);
        let get = |n: &str| rs.iter().find(|r| r.name == n).unwrap_or_else(|| panic!("no {n}"));
        let all = get("all_reply_4");
        assert_eq!((all.value, all.baseline.as_str(), all.baseline_value), (160.0, "unicast_exchange_4", 110.0));
        assert!((all.ratio - 160.0 / 110.0).abs() < 1e-9);
        assert!((get("all_reply_vs_k1_4").ratio - 160.0 / 150.0).abs() < 1e-9);
        assert!((get("all_reply_vs_series_4").ratio - 160.0 / 440.0).abs() < 1e-9);
        assert_eq!(get("packets_all_reply_4").ratio, 1.0);
        assert_eq!(get("packets_series_4").ratio, 1.0);
        assert_eq!(get("packets_datagram_4").ratio, 1.0);
        assert_eq!(get("datagram_received_4").value, 0.5);
        assert!((get("all_deliver_received_4").ratio - 1.8).abs() < 1e-9);
        // One JSON line with the seven fields of every suite.
        let j: serde_json::Value = serde_json::from_str(&all.to_json_line()).unwrap();
        assert_eq!(j["suite"], "groups");
        assert_eq!(j["name"], "all_reply_4");
        assert_eq!(j["unit"], "us");
        assert_eq!(j["baseline"], "unicast_exchange_4");
        assert_eq!(j["baseline_value"], 110.0);
        assert!(j["ratio"].as_f64().is_some());
    }

    #[test]
    fn received_share_counts_the_copies_taken() {
        let mut a = topology::HostStats::default();
        a.received.insert(4, 100);
        let mut b = a.clone();
        b.received.insert(4, 100 + 3 * 40);
        assert_eq!(share_received(&a, &b, 4, 40), 0.75);
        assert_eq!(share_received(&a, &b, 4, 0), 0.0);
        assert_eq!(share_received(&b, &a, 4, 40), 0.0);
    }

    #[test]
    fn the_detection_bound_follows_the_default_settings() {
        let b = detection_bound_ms();
        assert!(b > 0.0 && b <= 500.0, "{b}");
    }

    #[test]
    fn groups_by_size_are_distinct_well_known_numbers() {
        let g: Vec<u16> = [2, 4, 8, 16].iter().map(|&s| peers::group_of_size(s)).collect();
        assert_eq!(g, vec![102, 104, 108, 116]);
        let silent: Vec<u16> = [2, 4, 8, 16].iter().map(|&s| peers::silent_group_of_size(s)).collect();
        assert_eq!(silent, vec![202, 204, 208, 216]);
    }
}
