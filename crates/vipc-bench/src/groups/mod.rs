//! Suite `groups`: process groups and reliable multicast (004) between
//! member hosts in network namespaces that the bench creates and removes.
//!
//! Every host is a vipc node in its own namespace on one bridge, with IP
//! multicast between them; host `i` (1-based) has one member in the group of
//! every size `s ≥ i`, so the group of size `s` has one member on each of
//! hosts 1..=s and the other hosts answer its reliable Sends with ACK 0. A
//! measuring client runs in a namespace of its own. Figures (medians of round
//! medians, each round measuring the baseline beside the figure):
//! - 004 Table 2: 1-reliable (K_REPLY 1), K_REPLY s/2 and ALL_REPLY against
//!   one unicast exchange, and ALL_REPLY against 1-reliable, by size;
//! - 004 Table 3: ALL_DELIVER (to a twin group whose members never reply)
//!   against a unicast exchange, and the share of the members it reached;
//! - 004 Table 4: the application task — a series of unicasts, an unreliable
//!   Send with user-level retries, the reliable Send;
//! - 000 §6: the cost of each further reply;
//! - 004 Fig. 17: packets per Send against the formula;
//! - I-Am-Here: time until a SIGKILLed host is declared down, and false
//!   downs during a soak at full load.
//!
//! Needs root and iproute2; elsewhere the suite says why and records nothing.

pub mod peers;
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

    /// Runs one item; a machine without network namespaces skips it with a note.
    pub fn run_item(&mut self, out: &mut Output, item: &str) -> Result<()> {
        if self.topo.is_none() && self.skipped.is_none() {
            let hosts = *self.sizes().last().unwrap_or(&2);
            match Topology::create(&self.exe, hosts, &self.sizes()) {
                Ok(t) => self.topo = Some(t),
                Err(Setup::Unavailable(why)) => {
                    eprintln!("bench: groups skipped: {why}");
                    out.note(format!("groups: skipped ({why})"));
                    self.skipped = Some(why);
                }
                Err(Setup::Failed(e)) => return Err(format!("setting up the namespaces: {e}").into()),
            }
        }
        let all = self.sizes();
        let Some(topo) = self.topo.as_mut() else { return Ok(()) };
        match item {
            "sizes" => sizes(topo, out, &all, self.quick),
            "soak" => soak(topo, out, if self.quick { 3.0 } else { 600.0 }),
            "detect" => detect(topo, out),
            other => Err(format!("unknown item groups/{other}").into()),
        }
    }
}

fn num(f: &Fields, key: &str) -> Result<f64> {
    f.get(key).and_then(|v| v.parse().ok()).ok_or_else(|| format!("no {key}= in the client's answer").into())
}

/// Formula of 004 Fig. 17 for one ALL_REPLY Send from a host without
/// members to a group with one member on each of `members` of the `hosts`
/// other alive hosts: the Send (one multicast), one reply per member carrying
/// its host's acknowledgement, one ACK 0 from each host without members.
pub fn packets_formula_reply(hosts: usize, members: usize) -> f64 {
    (1 + members + (hosts - members)) as f64
}

/// The same for ALL_DELIVER to members that do not reply: the Send and one
/// acknowledgement per other host, sent on delivery.
pub fn packets_formula_deliver(hosts: usize) -> f64 {
    (1 + hosts) as f64
}

/// Round-robin rounds of every figure beside its baselines.
fn sizes(topo: &mut Topology, out: &mut Output, sizes: &[usize], quick: bool) -> Result<()> {
    let (rounds, n) = if quick { (1, 40) } else { (5, 300) };
    let mut runs: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut packets: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut keep = |name: String, f: &Fields| -> Result<()> {
        runs.entry(name.clone()).or_default().push(num(f, "median")?);
        packets.entry(name).or_default().push(num(f, "packets")?);
        Ok(())
    };
    let mut fractions: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for _ in 0..rounds {
        keep("unicast".into(), &topo.ask(&format!("UNICAST host=1 n={n}"))?)?;
        for &s in sizes {
            keep(format!("k1_{s}"), &topo.ask(&format!("RELIABLE mode=k-reply=1 size={s} n={n}"))?)?;
            keep(format!("khalf_{s}"), &topo.ask(&format!("RELIABLE mode=k-reply={} size={s} n={n}", s / 2))?)?;
            keep(format!("all_{s}"), &topo.ask(&format!("RELIABLE mode=all-reply size={s} n={n}"))?)?;
            let d = topo.ask(&format!("RELIABLE mode=all-deliver size={s} n={n}"))?;
            fractions.entry(s).or_default().push(num(&d, "fraction")?);
            keep(format!("deliver_{s}"), &d)?;
            keep(format!("series_{s}"), &topo.ask(&format!("SERIES hosts={s} n={}", n / 4))?)?;
            keep(format!("retry_{s}"), &topo.ask(&format!("RETRY size={s} n={n}"))?)?;
        }
    }
    let m = |k: &str| runs.get(k).map(|v| median(v)).unwrap_or(0.0);
    let p = |k: &str| packets.get(k).map(|v| median(v)).unwrap_or(0.0);
    let rec = |name: String, v: f64, unit: &str, base: String, bv: f64| Record::new(SUITE, &name, v, unit, &base, bv);
    let unicast = m("unicast");
    for &s in sizes {
        let (k1, all) = (m(&format!("k1_{s}")), m(&format!("all_{s}")));
        out.record(rec(format!("k_reply1_{s}"), k1, "us", "unicast_exchange".into(), unicast));
        out.record(rec(
            format!("k_reply_half_{s}"),
            m(&format!("khalf_{s}")),
            "us",
            "unicast_exchange".into(),
            unicast,
        ));
        out.record(rec(format!("all_reply_{s}"), all, "us", "unicast_exchange".into(), unicast));
        out.record(rec(format!("all_reply_vs_k1_{s}"), all, "us", format!("k_reply1_{s}"), k1));
        let deliver = m(&format!("deliver_{s}"));
        out.record(rec(format!("all_deliver_{s}"), deliver, "us", "unicast_exchange".into(), unicast));
        let frac = fractions.get(&s).map(|v| median(v)).unwrap_or(0.0);
        out.record(rec(format!("all_deliver_fraction_{s}"), frac, "share", "all_members".into(), 1.0));
        let (series, retry) = (m(&format!("series_{s}")), m(&format!("retry_{s}")));
        out.record(rec(format!("retry_multicast_{s}"), retry, "us", format!("unicast_series_{s}"), series));
        out.record(rec(format!("all_reply_vs_series_{s}"), all, "us", format!("unicast_series_{s}"), series));
        out.record(rec(format!("all_reply_vs_retry_{s}"), all, "us", format!("retry_multicast_{s}"), retry));
        let (got, want) = (p(&format!("all_{s}")), packets_formula_reply(topo.hosts(), s));
        out.record(rec(format!("packets_all_reply_{s}"), got, "packets", format!("formula_all_reply_{s}"), want));
        let (got, want) = (p(&format!("deliver_{s}")), packets_formula_deliver(topo.hosts()));
        out.record(rec(format!("packets_all_deliver_{s}"), got, "packets", format!("formula_all_deliver_{s}"), want));
    }
    if let (Some(&big), true) = (sizes.last(), sizes.len() > 1) {
        let further = (m(&format!("all_{big}")) - m(&format!("k1_{big}"))) / (big - 1) as f64;
        out.record(rec("further_reply_cost".into(), further, "us", "unicast_exchange".into(), unicast));
    }
    out.record(rec("unicast_packets".into(), p("unicast"), "packets", "two_packets".into(), 2.0));
    Ok(())
}

/// ALL_REPLY Sends back to back to the largest group for `secs`; every host
/// (and the client) reports how many hosts it declared down meanwhile.
fn soak(topo: &mut Topology, out: &mut Output, secs: f64) -> Result<()> {
    let size = topo.hosts();
    let before = topo.hosts_down()?;
    let f = topo.ask_within(&format!("SOAK size={size} secs={secs}"), Duration::from_secs_f64(secs + 60.0))?;
    let after = topo.hosts_down()?;
    let false_downs = num(&f, "hosts_down")? + (after - before) as f64;
    out.record(Record::new(SUITE, "soak_false_downs", false_downs, "hosts", "soak_sends", num(&f, "sends")?));
    out.note(format!(
        "groups: soak of {secs:.0} s at full load: {} ALL_REPLY sends to {size} hosts, {} not met, {false_downs} false downs",
        num(&f, "sends")?,
        num(&f, "missed")?
    ));
    Ok(())
}

/// SIGKILL the last host and time until the client declares it down.
fn detect(topo: &mut Topology, out: &mut Output) -> Result<()> {
    let victim = topo.hosts();
    topo.send(&format!("WATCH host={victim}"))?;
    topo.expect_line("WATCHING")?;
    let killed = Instant::now();
    topo.kill_host(victim);
    let f = topo.answer(Duration::from_secs(15))?;
    let detected = killed.elapsed().as_secs_f64() * 1e3;
    num(&f, "down_after_ms")?; // the client saw it go
    out.record(Record::new(SUITE, "down_detect_ms", detected, "ms", "alive_period_ms", 100.0));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_packet_formulas_count_send_replies_and_acknowledgements() {
        // 16 other hosts, 4 with a member: 1 Send + 4 replies + 12 ACK 0.
        assert_eq!(packets_formula_reply(16, 4), 17.0);
        assert_eq!(packets_formula_reply(4, 4), 5.0);
        // DELIVER: 1 Send + 16 acknowledgements.
        assert_eq!(packets_formula_deliver(16), 17.0);
    }

    #[test]
    fn groups_by_size_are_distinct_well_known_numbers() {
        let g: Vec<u16> = [2, 4, 8, 16].iter().map(|&s| peers::group_of_size(s)).collect();
        assert_eq!(g, vec![102, 104, 108, 116]);
        let silent: Vec<u16> = [2, 4, 8, 16].iter().map(|&s| peers::silent_group_of_size(s)).collect();
        assert_eq!(silent, vec![202, 204, 208, 216]);
    }
}
