//! The name service over real UDP on loopback: clerks on three nodes,
//! lookups that pull from other clerks' tables, lazy deletes and
//! generations, a reader racing a writer, injected loss, collisions in a
//! small table, and import by name.

#[path = "../../vipc-rmem-layers/tests/common/mod.rs"]
mod common;
mod support;

use common::*;
use std::sync::Arc;
use std::time::Duration;
use support::*;
use vipc::{Access, SegmentOptions};
use vipc_rmem_names::{bucket_of, Clerk, ClerkParams, Error, Source};

#[test]
fn names_registered_on_one_node_are_pulled_by_the_others() {
    let nodes = cluster(3, 201, clean());
    let c = clerks(&nodes, &params(&nodes));
    let (h0, h1) = (nodes[0].host_id(), nodes[1].host_id());
    let g = c[0].register("alpha", binding(1, h0)).unwrap();
    c[1].register("beta", binding(2, h1)).unwrap();

    let f = c[0].lookup("alpha", None).unwrap();
    assert_eq!((f.binding, f.generation, f.table, f.source), (binding(1, h0), g, h0, Source::Local));

    let f = c[2].lookup("alpha", None).unwrap();
    assert_eq!((f.binding, f.generation, f.table, f.source), (binding(1, h0), g, h0, Source::Remote));
    assert_eq!(f.slot, bucket_of("alpha", c[0].header().buckets), "no collision: the home bucket");
    assert_eq!(c[2].lookup("alpha", None).unwrap().source, Source::Cache);
    assert_eq!(c[2].cached(), 1);

    let f = c[0].lookup("beta", Some(h1)).unwrap();
    assert_eq!((f.binding, f.table, f.source), (binding(2, h1), h1, Source::Remote));
    let f = c[2].lookup("beta", None).unwrap();
    assert_eq!((f.binding, f.table), (binding(2, h1), h1));
    // A clerk's own table is not pushed anywhere: host 1's table has no "alpha"
    // (a copy there would make this registration fail with AlreadyRegistered).
    let r = c[1].register("alpha", binding(3, h1));
    assert!(r.is_ok(), "the same name may live in two tables: {:?}", r.err());
    assert!(matches!(c[0].register("alpha", binding(4, h0)), Err(Error::AlreadyRegistered(_))));
}

#[test]
fn missing_and_malformed_names_are_typed_errors() {
    let nodes = cluster(3, 211, clean());
    let c = clerks(&nodes, &params(&nodes));
    assert!(matches!(c[1].lookup("nobody", None), Err(Error::NotFound(n)) if n == "nobody"));
    assert!(matches!(c[1].lookup_fresh("nobody", Some(nodes[2].host_id())), Err(Error::NotFound(_))));
    assert!(matches!(c[0].lookup("", None), Err(Error::BadName { len: 0, .. })));
    let long = "x".repeat(81);
    assert!(matches!(c[0].register(&long, binding(1, 1)), Err(Error::BadName { len: 81, .. })));
    assert!(matches!(c[0].delete("nobody"), Err(Error::NotFound(_))));
    assert_eq!(c[1].cached(), 0, "a miss caches nothing");
}

#[test]
fn a_host_without_a_clerk_is_reported_not_taken_for_a_miss() {
    let nodes = cluster(2, 221, clean());
    let p = ClerkParams { timeout: Duration::from_millis(400), ..params(&nodes) };
    let c = Clerk::start(&nodes[0], p).unwrap();
    assert!(matches!(c.lookup("x", Some(nodes[1].host_id())), Err(Error::NoClerk(h)) if h == nodes[1].host_id()));
    let second = Clerk::start(&nodes[0], ClerkParams::default());
    assert!(
        matches!(second, Err(Error::Vipc(vipc::Error::Protocol(vipc::ProtocolError::Unsupported(_))))),
        "one clerk per node: {:?}",
        second.err()
    );
}

#[test]
fn a_deleted_name_is_not_found_and_stale_cache_entries_are_purged() {
    let nodes = cluster(3, 231, clean());
    let c = clerks(&nodes, &params(&nodes));
    let h0 = nodes[0].host_id();
    let g1 = c[0].register("svc", binding(1, h0)).unwrap();
    assert_eq!(c[1].lookup("svc", None).unwrap().generation, g1);

    assert_eq!(c[0].delete("svc").unwrap(), g1);
    assert!(matches!(c[0].lookup("svc", None), Err(Error::NotFound(_))));
    assert!(matches!(c[2].lookup("svc", None), Err(Error::NotFound(_))), "a pull never returns a deleted entry");
    assert!(matches!(c[1].lookup_fresh("svc", None), Err(Error::NotFound(_))));
    assert!(matches!(c[0].delete("svc"), Err(Error::NotFound(_))));

    // Pulled by host 2 and deleted after: a hint until the refresh purges it.
    let g2 = c[0].register("svc", binding(2, h0)).unwrap();
    let cached = c[2].lookup("svc", None).unwrap();
    assert_eq!((cached.generation, cached.source), (g2, Source::Remote));
    c[0].delete("svc").unwrap();
    assert_eq!(c[2].lookup("svc", None).unwrap().source, Source::Cache);
    assert_eq!(c[2].refresh().unwrap(), 1);
    assert!(matches!(c[2].lookup("svc", None), Err(Error::NotFound(_))));
}

#[test]
fn re_registering_after_a_delete_gives_a_new_generation_and_refresh_drops_the_old() {
    let nodes = cluster(2, 241, clean());
    let c = clerks(&nodes, &params(&nodes));
    let h0 = nodes[0].host_id();
    let g1 = c[0].register("fs", binding(1, h0)).unwrap();
    assert_eq!(c[1].lookup("fs", None).unwrap().generation, g1);
    c[0].delete("fs").unwrap();
    let g2 = c[0].register("fs", binding(2, h0)).unwrap();
    assert!(g2 > g1, "{g2} after {g1}");
    // The same bucket is reused (the deleted entry was first on the chain).
    let f = c[1].lookup_fresh("fs", None).unwrap();
    assert_eq!((f.generation, f.binding), (g2, binding(2, h0)));
    // An unchanged entry survives a refresh; a replaced one does not.
    assert_eq!(c[1].refresh().unwrap(), 0);
    c[0].delete("fs").unwrap();
    let g3 = c[0].register("fs", binding(3, h0)).unwrap();
    assert_eq!(c[1].lookup("fs", None).unwrap().generation, g2, "cached");
    assert_eq!(c[1].refresh().unwrap(), 1);
    let f = c[1].lookup("fs", None).unwrap();
    assert_eq!((f.generation, f.binding, f.source), (g3, binding(3, h0), Source::Remote));
}

#[test]
fn a_reader_racing_deletes_and_re_registrations_never_sees_a_torn_entry() {
    let nodes = cluster(2, 251, clean());
    let c: Vec<Arc<Clerk>> = clerks(&nodes, &params(&nodes)).into_iter().map(Arc::new).collect();
    let h0 = nodes[0].host_id();
    let g = c[0].register("hot", binding(1, h0)).unwrap();
    assert_eq!(g, 1);
    // The writer changes the entry once per lookup begun, while that lookup
    // runs: unpaced, it once made 35 changes per lookup, and every lookup
    // met one (a miss each time, never a tear).
    let (begun, lookups) = std::sync::mpsc::channel::<()>();
    let writer = c[0].clone();
    let w = std::thread::spawn(move || {
        let mut next = g + 1;
        while lookups.recv().is_ok() {
            writer.delete("hot").unwrap();
            // Generations are handed out in order: the binding follows from the one this registration gets.
            assert_eq!(writer.register("hot", binding(next, h0)).unwrap(), next);
            next += 1;
        }
        next - g - 1
    });
    let (mut whole, mut missing, mut generations) = (0, 0, std::collections::HashSet::new());
    for _ in 0..400 {
        begun.send(()).unwrap();
        match c[1].lookup_fresh("hot", Some(h0)) {
            Ok(f) => {
                assert_eq!(f.binding, binding(f.generation, h0), "a mix of two registrations");
                whole += 1;
                generations.insert(f.generation);
            }
            Err(Error::NotFound(_)) => missing += 1,
            Err(e) => panic!("lookup during the race: {e}"),
        }
    }
    drop(begun);
    let registrations = w.join().unwrap();
    let changes = generations.len();
    assert!(
        whole > 10 && changes > 10 && registrations == 400,
        "{whole} whole entries of {changes} generations, {missing} misses, {registrations} registrations"
    );
    eprintln!("racing reader: {whole} whole entries of {changes} generations, {missing} misses");
}

#[test]
fn lookups_survive_loss_duplication_and_reordering() {
    let nodes = cluster(3, 261, lossy(0.15, 7));
    let p = ClerkParams { read_wait: Duration::from_millis(40), timeout: WAIT, ..params(&nodes) };
    let c = clerks(&nodes, &p);
    let h0 = nodes[0].host_id();
    for k in 0..30 {
        c[0].register(&format!("lossy-{k}"), binding(k, h0)).unwrap();
    }
    for k in 0..30 {
        let f = c[1 + (k as usize % 2)].lookup(&format!("lossy-{k}"), None).unwrap();
        assert_eq!((f.binding, f.source), (binding(k, h0), Source::Remote), "name {k}");
    }
    assert!(matches!(c[1].lookup("lossy-none", None), Err(Error::NotFound(_))));
    let (s1, s2) = (c[1].stats(), c[2].stats());
    assert!(s1.resent + s2.resent > 0, "no read was lost ({s1:?}, {s2:?}): the test tested nothing");
}

#[test]
fn colliding_names_in_a_small_table_are_found_by_probing() {
    let nodes = cluster(2, 271, clean());
    for window in [1, 3] {
        let p = ClerkParams { buckets: 8, window, ..params(&nodes) };
        let c = clerks(&nodes, &p);
        let h0 = nodes[0].host_id();
        let names: Vec<String> = (0..8).map(|k| format!("col-{k}")).collect();
        for (k, n) in names.iter().enumerate() {
            c[0].register(n, binding(k as u32, h0)).unwrap();
        }
        assert!(matches!(c[0].register("col-8", binding(8, h0)), Err(Error::TableFull(8))));
        let mut displaced = 0;
        for (k, n) in names.iter().enumerate() {
            let f = c[1].lookup(n, None).unwrap();
            assert_eq!(f.binding, binding(k as u32, h0), "{n} (window {window})");
            displaced += usize::from(f.slot != bucket_of(n, 8));
        }
        assert!(displaced > 0, "no collisions: the test tested nothing");
        // Deleted buckets keep the chains intact and are reused.
        c[0].delete("col-3").unwrap();
        c[0].delete("col-5").unwrap();
        c[0].register("col-9", binding(9, h0)).unwrap();
        for (k, n) in names.iter().enumerate().filter(|(k, _)| *k != 3 && *k != 5) {
            assert_eq!(c[1].lookup_fresh(n, None).unwrap().binding, binding(k as u32, h0));
        }
        assert_eq!(c[1].lookup_fresh("col-9", None).unwrap().binding, binding(9, h0));
        assert!(matches!(c[1].lookup_fresh("col-3", None), Err(Error::NotFound(_))));
        assert!(matches!(c[1].lookup_fresh("col-404", None), Err(Error::NotFound(_))), "a full scan ends");
        drop(c);
    }
}

#[test]
fn segments_are_imported_by_name_and_a_stale_cached_binding_is_pulled_again() {
    let nodes = cluster(3, 281, clean());
    let c = clerks(&nodes, &params(&nodes));
    let opts = SegmentOptions { access: Access::READ_WRITE, ..Default::default() };
    let seg = c[0].export_segment("fileserver", 4096, opts.clone()).unwrap();
    seg.write(0, b"first").unwrap();
    let anon = nodes[2].anonymous_segment(64).unwrap();
    let remote = c[2].import("fileserver", Access::READ, WAIT).unwrap();
    assert_eq!((remote.host(), remote.size()), (nodes[0].host_id(), 4096));
    remote.read(0, 5, (&anon, 0), false).unwrap().wait(WAIT).unwrap();
    assert_eq!(anon.to_vec(0, 5).unwrap(), b"first");

    // The file server restarts: its segment and name go, a new one comes.
    drop(seg);
    c[0].delete("fileserver").unwrap();
    let seg2 = c[0].export_segment("fileserver", 8192, opts).unwrap();
    seg2.write(0, b"again").unwrap();
    assert_eq!(c[2].lookup("fileserver", None).unwrap().source, Source::Cache, "still the stale hint");
    let remote = c[2].import("fileserver", Access::READ, WAIT).unwrap();
    assert_eq!(remote.size(), 8192);
    remote.read(0, 5, (&anon, 0), false).unwrap().wait(WAIT).unwrap();
    assert_eq!(anon.to_vec(0, 5).unwrap(), b"again");
    assert!(matches!(c[1].import("nothing", Access::READ, WAIT), Err(Error::NotFound(_))));
}

/// A table's node restarted (same address, same host id): its new clerk's
/// table gets the same descriptor, so the cached handle is not refused, but
/// its entries carry the new incarnation. A pull reads the header again
/// instead of reporting `Corrupt` for ever.
#[test]
fn a_restarted_owners_table_is_read_again() {
    let nodes = cluster(2, 281, clean());
    let (owner_addr, owner_host) = (nodes[0].local_addr(), nodes[0].host_id());
    let p = params(&nodes);
    let asker = Clerk::start(&nodes[1], p.clone()).unwrap();
    let owner = Clerk::start(&nodes[0], p.clone()).unwrap();
    owner.register("svc", binding(1, owner_host)).unwrap();
    assert_eq!(asker.lookup_fresh("svc", Some(owner_host)).unwrap().binding, binding(1, owner_host));
    drop(owner);
    let mut nodes = nodes;
    let old = nodes.remove(0);
    old.shutdown();
    drop(old);
    let peers = vec![nodes[0].local_addr()];
    let again = vipc::Node::start(vipc::NodeConfig::fixed(owner_host, owner_addr, peers)).unwrap();
    let owner = Clerk::start(&again, p).unwrap();
    owner.register("svc", binding(2, owner_host)).unwrap();
    let found = asker.lookup_fresh("svc", Some(owner_host)).unwrap();
    assert_eq!(found.binding, binding(2, owner_host), "the restarted table's entry");
}
