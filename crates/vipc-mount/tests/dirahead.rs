//! Directory read-ahead: the listings of subdirectories read in the background while a program walks a tree
//! never show a state older than this mount's own changes, nor older than the TTL for other clients' changes.

mod common;

use common::Served;
use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use vipc_mount::MountOptions;

/// Name -> (size, mode) of every entry of `dir`, as a listing shows them (`DirEntry::metadata` uses the
/// attributes the listing brought).
fn listing(dir: &Path) -> BTreeMap<String, (u64, u32)> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            (e.file_name().into_string().unwrap(), (if m.is_dir() { 0 } else { m.len() }, m.permissions().mode()))
        })
        .collect()
}

/// The same read from the export directory itself (lstat, as the server reports).
fn truth(dir: &Path) -> BTreeMap<String, (u64, u32)> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = fs::symlink_metadata(e.path()).unwrap();
            (e.file_name().into_string().unwrap(), (if m.is_dir() { 0 } else { m.len() }, m.permissions().mode()))
        })
        .collect()
}

/// One change through the mount inside directory `d`, which holds a file `f` of 3 bytes.
fn change(d: &Path, kind: usize) -> &'static str {
    let f = d.join("f");
    match kind {
        0 => {
            fs::write(d.join("new"), b"12345").unwrap();
            "create"
        }
        1 => {
            OpenOptions::new().append(true).open(&f).unwrap().write_all(b"+more bytes").unwrap();
            "write"
        }
        2 => {
            fs::remove_file(&f).unwrap();
            "unlink"
        }
        3 => {
            fs::rename(&f, d.join("g")).unwrap();
            "rename"
        }
        4 => {
            fs::create_dir(d.join("sub")).unwrap();
            "mkdir"
        }
        5 => {
            std::os::unix::fs::symlink("f", d.join("link")).unwrap();
            "symlink"
        }
        6 => {
            OpenOptions::new().write(true).open(&f).unwrap().set_len(1).unwrap();
            "truncate"
        }
        _ => {
            fs::set_permissions(&f, fs::Permissions::from_mode(0o600)).unwrap();
            "chmod"
        }
    }
}

const KINDS: usize = 8;

#[test]
fn own_changes_show_in_listings_read_ahead() {
    require_fuse!();
    // A TTL far longer than the test: only the mount's own bookkeeping can make the changes show.
    let long = Duration::from_secs(60);
    let s = Served::start(MountOptions { attr_ttl: long, entry_ttl: long, ..MountOptions::default() });
    for i in 0..KINDS {
        let d = s.export_dir().join("a").join(format!("b{i}"));
        fs::create_dir_all(&d).unwrap();
        fs::write(d.join("f"), b"abc").unwrap();
        fs::set_permissions(d.join("f"), fs::Permissions::from_mode(0o644)).unwrap();
    }
    let a = s.root().join("a");
    let mut stale = Vec::new();
    for kind in 0..KINDS {
        let d = a.join(format!("b{kind}"));
        // Listing `a` has the listings of a/b0..b7 read ahead; give the threads time to fetch them.
        listing(&a);
        std::thread::sleep(Duration::from_millis(150));
        let what = change(&d, kind);
        let (got, want) = (listing(&d), truth(&s.export_dir().join("a").join(format!("b{kind}"))));
        if got != want {
            stale.push(format!("{what}: listed {got:?}, the server has {want:?}"));
        }
    }
    assert!(stale.is_empty(), "listings stale after changes through the mount:\n{}", stale.join("\n"));
}

/// A mount with TTL `ttl` of an export holding a/b/f (3 bytes): the mount, a/b on the server, a on the mount.
fn served_a_b(ttl: Duration) -> (Served, PathBuf, PathBuf) {
    let s = Served::start(MountOptions { attr_ttl: ttl, entry_ttl: ttl, ..MountOptions::default() });
    let server_side = s.export_dir().join("a").join("b");
    fs::create_dir_all(&server_side).unwrap();
    fs::write(server_side.join("f"), b"abc").unwrap();
    let a = s.root().join("a");
    (s, server_side, a)
}

#[test]
fn other_clients_changes_show_after_the_ttl_despite_read_ahead() {
    require_fuse!();
    let ttl = Duration::from_millis(300);
    let (_s, server_side, a) = served_a_b(ttl);
    listing(&a); // reads a/b ahead
    std::thread::sleep(Duration::from_millis(50));
    // Another client (the server's own disk) changes a/b after it was read ahead.
    fs::write(server_side.join("f"), b"abcdefgh").unwrap();
    fs::write(server_side.join("new"), b"n").unwrap();
    std::thread::sleep(ttl + Duration::from_millis(100));
    assert_eq!(listing(&a.join("b")), truth(&server_side), "a listing read ahead was used after its TTL");
}

#[test]
fn a_walk_with_read_ahead_sees_the_whole_tree() {
    require_fuse!();
    let s = Served::start(MountOptions::default());
    let mut want = Vec::new();
    for i in 0..20 {
        for j in 0..5 {
            let d = s.export_dir().join(format!("d{i}")).join(format!("e{j}"));
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("x"), vec![b'x'; i * 10 + j]).unwrap();
            want.push((format!("d{i}/e{j}/x"), (i * 10 + j) as u64));
        }
    }
    want.sort();
    for _ in 0..3 {
        let mut got = Vec::new();
        let mut stack = vec![String::new()];
        while let Some(rel) = stack.pop() {
            for e in fs::read_dir(s.root().join(&rel)).unwrap() {
                let e = e.unwrap();
                let name = e.file_name().into_string().unwrap();
                let p = if rel.is_empty() { name } else { format!("{rel}/{name}") };
                let m = e.metadata().unwrap();
                if m.is_dir() {
                    stack.push(p);
                } else {
                    got.push((p, m.len()));
                }
            }
        }
        got.sort();
        assert_eq!(got, want);
    }
    let used = s.mounted.as_ref().map_or(0, |m| m.listings_read_ahead());
    assert!(used > 0, "the walks used no listing read ahead");
}

#[test]
fn attributes_from_a_listing_read_ahead_expire_with_the_listing() {
    require_fuse!();
    let ttl = Duration::from_millis(300);
    let (_s, server_side, a) = served_a_b(ttl);
    let t0 = std::time::Instant::now();
    listing(&a); // reads a/b ahead at about t0
    std::thread::sleep(Duration::from_millis(30));
    fs::write(server_side.join("f"), b"abcdefgh").unwrap(); // another client's change
    std::thread::sleep(Duration::from_millis(200));
    // The listing read ahead is still young enough to be used: it may show the old size, but the kernel may
    // keep its attributes only for what is left of the TTL, not a whole TTL from now.
    listing(&a.join("b"));
    std::thread::sleep(
        (t0 + Duration::from_millis(30) + ttl + Duration::from_millis(80))
            .saturating_duration_since(std::time::Instant::now()),
    );
    assert_eq!(fs::metadata(a.join("b").join("f")).unwrap().len(), 8, "a change older than the TTL is still hidden");
}
