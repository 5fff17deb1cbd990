//! Lookups by notification over real UDP on loopback: found, not found,
//! generations, lost requests and answers, garbage in request slots, a
//! clerk that does not serve, and option (3) — probe by reads, then ask —
//! when the home window is all collisions.

#[path = "../../vipc-rmem-layers/tests/common/mod.rs"]
mod common;
mod support;

use common::*;
use std::time::{Duration, Instant};
use support::*;
use vipc::{Access, FaultConfig, Node, ProtectionGroup};
use vipc_rmem_names::{
    bucket_of, well_known_requests, Clerk, ClerkParams, Error, LookupPolicy, Request, Source, REQUEST_SIZE,
};

/// Clerks that serve lookups by notification (not the default).
fn serving(nodes: &[Node]) -> ClerkParams {
    ClerkParams { serve: true, ..params(nodes) }
}

/// Waits until `done` holds (the serving thread works on its own time).
fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_name_on_another_node_is_found_by_notification() {
    let nodes = cluster(3, 301, clean());
    let c = clerks(&nodes, &serving(&nodes));
    let h0 = nodes[0].host_id();
    let g = c[0].register("alpha", binding(1, h0)).unwrap();

    let f = c[1].lookup_notify("alpha", h0, WAIT).unwrap();
    assert_eq!((f.binding, f.generation, f.table, f.source), (binding(1, h0), g, h0, Source::Notified));
    assert_eq!(f.slot, bucket_of("alpha", c[0].header().buckets));
    assert_eq!(c[1].lookup("alpha", None).unwrap().source, Source::Cache, "the answer is cached as a pull is");
    assert_eq!(c[1].refresh().unwrap(), 0, "and survives a refresh: the same entry in the same bucket");
    let (asked, served) = (c[1].notify_stats(), c[0].serve_stats());
    assert_eq!((asked.requests, asked.imports), (1, 1));
    assert!(served.answered >= 1 && served.answered <= asked.requests + asked.resent, "{served:?} {asked:?}");
    assert_eq!((served.bad_requests, served.unreachable), (0, 0));
    // Asking one's own host is a local lookup.
    assert_eq!(c[0].lookup_notify("alpha", h0, WAIT).unwrap().source, Source::Local);
}

#[test]
fn a_name_not_registered_is_answered_not_found_and_bad_names_are_refused() {
    let nodes = cluster(2, 311, clean());
    let c = clerks(&nodes, &serving(&nodes));
    let h0 = nodes[0].host_id();
    assert!(matches!(c[1].lookup_notify("nobody", h0, WAIT), Err(Error::NotFound(n)) if n == "nobody"));
    let long = "y".repeat(81);
    assert!(matches!(c[1].lookup_notify(&long, h0, WAIT), Err(Error::BadName { len: 81, max: 80 })));
    assert!(matches!(c[1].lookup_notify("", h0, WAIT), Err(Error::BadName { len: 0, .. })));
    assert_eq!(c[1].notify_stats().requests, 1, "bad names never leave the clerk");
    assert_eq!(c[1].cached(), 0);
}

#[test]
fn deleted_and_re_registered_names_are_answered_by_generation() {
    let nodes = cluster(2, 321, clean());
    let c = clerks(&nodes, &serving(&nodes));
    let h0 = nodes[0].host_id();
    let g1 = c[0].register("svc", binding(1, h0)).unwrap();
    assert_eq!(c[1].lookup_notify("svc", h0, WAIT).unwrap().generation, g1);

    c[0].delete("svc").unwrap();
    assert!(matches!(c[1].lookup_notify("svc", h0, WAIT), Err(Error::NotFound(_))));
    // The authoritative "not found" also dropped the cached generation g1.
    assert!(matches!(c[1].lookup("svc", None), Err(Error::NotFound(_))));

    let g2 = c[0].register("svc", binding(2, h0)).unwrap();
    assert!(g2 > g1);
    let f = c[1].lookup_notify("svc", h0, WAIT).unwrap();
    assert_eq!((f.generation, f.binding), (g2, binding(2, h0)));
    c[0].delete("svc").unwrap();
    let g3 = c[0].register("svc", binding(3, h0)).unwrap();
    let f = c[1].lookup_notify("svc", h0, WAIT).unwrap();
    assert_eq!((f.generation, f.binding, f.source), (g3, binding(3, h0), Source::Notified), "the cache is skipped");
}

#[test]
fn lost_requests_and_answers_are_recovered_by_writing_the_request_again() {
    // Node 0 serves and loses half of what it sends (answers); node 2 asks and
    // loses half of what it sends (requests); node 1 asks on a clean network.
    let nodes = vipc::loopback_cluster(3, 331, |i, cfg| {
        let loss = if i == 1 { 0.0 } else { 0.5 };
        cfg.faults = FaultConfig { loss, seed: 40 + i as u64, ..FaultConfig::default() };
    })
    .unwrap();
    let c = clerks(&nodes, &serving(&nodes));
    let h0 = nodes[0].host_id();
    for k in 0..10 {
        c[0].register(&format!("lossy-{k}"), binding(k, h0)).unwrap();
    }
    for k in 0..10 {
        for asker in [&c[1], &c[2]] {
            let f = asker.lookup_notify(&format!("lossy-{k}"), h0, WAIT).unwrap();
            assert_eq!(f.binding, binding(k, h0), "name {k}");
        }
    }
    assert!(matches!(c[1].lookup_notify("lossy-none", h0, WAIT), Err(Error::NotFound(_))));
    let (s1, s2) = (c[1].notify_stats(), c[2].notify_stats());
    assert!(s1.resent > 0 && s2.resent > 0, "nothing was lost ({s1:?}, {s2:?}): the test tested nothing");
    eprintln!("lossy lookups by notification: {s1:?} {s2:?}, served {:?}", c[0].serve_stats());
}

#[test]
fn a_zero_notify_rto_still_waits_between_copies() {
    // Node 1 asks with no wait between copies asked for, and its answer
    // segment admits only itself, so node 0's answers never land: it must
    // not write the request again without pause.
    let nodes = cluster(2, 341, clean());
    let base = serving(&nodes);
    let c0 = Clerk::start(&nodes[0], base.clone()).unwrap();
    let h1 = nodes[1].host_id();
    let asking = ClerkParams { notify_rto: Duration::ZERO, protection: ProtectionGroup::Hosts(vec![h1]), ..base };
    let c1 = Clerk::start(&nodes[1], asking).unwrap();
    let h0 = nodes[0].host_id();
    c0.register("unanswered", binding(1, h0)).unwrap();
    let timeout = Duration::from_millis(200);
    assert!(matches!(c1.lookup_notify("unanswered", h0, timeout), Err(Error::Timeout)));
    let s = c1.notify_stats();
    assert!(s.resent >= 2, "no copy was written again ({s:?}): the test tested nothing");
    assert!(s.resent <= 200, "{} copies in {timeout:?}: written without pause", s.resent);
}

/// A request's bytes with a check word made good again after `f` changed them:
/// garbage a careless or hostile clerk could write.
fn resealed(r: &Request, f: impl Fn(&mut [u8; REQUEST_SIZE])) -> [u8; REQUEST_SIZE] {
    let mut b = r.encode();
    f(&mut b);
    let h = blake3::hash(&b[4..]);
    b[0..4].copy_from_slice(&h.as_bytes()[..4]);
    b
}

#[test]
fn garbage_in_a_request_slot_is_counted_and_ignored() {
    let nodes = cluster(3, 341, clean());
    let c = clerks(&nodes, &serving(&nodes));
    let (h0, h1, h2) = (nodes[0].host_id(), nodes[1].host_id(), nodes[2].host_id());
    c[0].register("target", binding(1, h0)).unwrap();
    let requests = nodes[1].import_segment(well_known_requests(h0), Access::WRITE, WAIT).unwrap();
    let slots = requests.size() / REQUEST_SIZE as u32;
    let at = |host: u16| u32::from(host) % slots * REQUEST_SIZE as u32;
    let good = Request { seq: 1, host: h1, name: "target".into(), answer: [0; 16], answer_at: 0 };

    let noise: Vec<u8> = (0..REQUEST_SIZE).map(|i| (i * 37 + 11) as u8).collect();
    // (where, bytes, slots it spoils): written one at a time, since the
    // server reads a slot once for all the writes it finds waiting.
    let garbage: Vec<(u32, Vec<u8>, u64)> = vec![
        (at(h1), noise, 1),                                                  // fails its check word
        (at(h1), vec![0; REQUEST_SIZE], 1),                                  // an empty slot
        (at(h1), resealed(&good, |b| b[10] = 0).to_vec(), 1),                // name length 0
        (at(h1), resealed(&good, |b| b[10] = 200).to_vec(), 1),              // name length past 80
        (at(h1), resealed(&good, |b| b[32] = 0xc3).to_vec(), 1),             // not UTF-8
        (at(h1), resealed(&good, |b| b[4..8].fill(0)).to_vec(), 1),          // sequence number 0
        (at(h2), good.encode().to_vec(), 1),                                 // host 1's request in host 2's slot
        (at(h2), Request { host: h2, ..good.clone() }.encode().to_vec(), 1), // host 2's, but written by host 1
        (at(h1) + REQUEST_SIZE as u32 - 8, vec![0xff; 16], 2),               // across two slots
    ];
    let mut expected = 0;
    for (offset, bytes, spoils) in &garbage {
        requests.write(*offset, bytes, true).unwrap();
        expected += spoils;
        eventually("the garbage slot counted", || c[0].serve_stats().bad_requests >= expected);
    }
    let s = c[0].serve_stats();
    assert_eq!((s.bad_requests, s.answered, s.unreachable), (expected, 0, 0));
    // The clerk still serves.
    assert_eq!(c[1].lookup_notify("target", h0, WAIT).unwrap().binding, binding(1, h0));
    assert_eq!(c[2].lookup_notify("target", h0, WAIT).unwrap().binding, binding(1, h0));
    // A well-formed request naming a segment nobody exports is not answered, and counted.
    let lost = Request { seq: 4, host: h1, name: "target".into(), answer: [0xab; 16], answer_at: 0 };
    requests.write(at(h1), &lost.encode(), true).unwrap();
    eventually("the unreachable answer counted", || c[0].serve_stats().unreachable == 1);
}

#[test]
fn a_clerk_that_does_not_serve_the_default_is_reported() {
    let nodes = cluster(2, 351, clean());
    let quiet = params(&nodes);
    let c0 = Clerk::start(&nodes[0], quiet).unwrap();
    let c1 = Clerk::start(&nodes[1], serving(&nodes)).unwrap();
    c0.register("here", binding(1, nodes[0].host_id())).unwrap();
    let h0 = nodes[0].host_id();
    let r = c1.lookup_notify("here", h0, Duration::from_millis(400));
    assert!(matches!(r, Err(Error::NoClerk(h)) if h == h0), "{r:?}");
    assert_eq!(c1.lookup("here", None).unwrap().source, Source::Remote, "its table is still read");
    assert_eq!(c0.serve_stats(), Default::default());
}

/// `n` names whose home bucket in a table of `buckets` is `home`.
fn colliding(n: usize, home: u32, buckets: u32) -> Vec<String> {
    (0..).map(|k| format!("clash-{k}")).filter(|s| bucket_of(s, buckets) == home).take(n).collect()
}

#[test]
fn option_3_asks_by_notification_when_the_home_window_is_all_collisions() {
    let nodes = cluster(2, 361, clean());
    let base = ClerkParams { buckets: 8, window: 3, ..serving(&nodes) };
    let three = ClerkParams { policy: LookupPolicy::ProbeThenNotify { reads: 1 }, ..base.clone() };
    let c0 = Clerk::start(&nodes[0], base.clone()).unwrap();
    let c1 = Clerk::start(&nodes[1], three).unwrap();
    let h0 = nodes[0].host_id();
    // Home bucket 2: four names fill buckets 2, 3, 4, 5; a fifth is not registered.
    let names = colliding(5, 2, 8);
    for (k, n) in names[..4].iter().enumerate() {
        c0.register(n, binding(k as u32, h0)).unwrap();
    }

    let f = c1.lookup(&names[0], None).unwrap();
    assert_eq!((f.slot, f.source), (2, Source::Remote), "in the first window: read");
    let f = c1.lookup(&names[3], None).unwrap();
    assert_eq!((f.slot, f.source, f.binding), (5, Source::Notified, binding(3, h0)), "window 2..5 all others: asked");
    assert!(matches!(c1.lookup(&names[4], None), Err(Error::NotFound(_))), "asked, and not there");
    assert_eq!(c1.notify_stats().requests, 2);
    assert_eq!(c1.stats().reads, 4, "the header, then one window per lookup");

    // Option (2), reads: 0, always asks; option (1), the default, reads on along the chain.
    drop(c1);
    let two = ClerkParams { policy: LookupPolicy::ProbeThenNotify { reads: 0 }, ..base.clone() };
    let c1 = Clerk::start(&nodes[1], two).unwrap();
    assert_eq!(c1.lookup(&names[0], None).unwrap().source, Source::Notified);
    drop(c1);
    let c1 = Clerk::start(&nodes[1], base).unwrap();
    let f = c1.lookup(&names[3], None).unwrap();
    assert_eq!((f.slot, f.source), (5, Source::Remote));
    assert!(matches!(c1.lookup(&names[4], None), Err(Error::NotFound(_))));
    assert_eq!(c1.notify_stats().requests, 0);
}
