//! This mount's own changes racing what it caches: a `stat`, an open or a directory listing whose answer
//! left the server before a change made through the mount must not be kept past that change. Every test runs
//! under a TTL far longer than itself, so only the mount's own bookkeeping can make a change show.

mod common;

use common::Served;
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use vipc_mount::MountOptions;

fn long_ttl() -> MountOptions {
    let long = Duration::from_secs(60);
    MountOptions { attr_ttl: long, entry_ttl: long, ..MountOptions::default() }
}

/// A directory opened before changes and read after them lists only names
/// that still exist, each with its present size and file: the listing read
/// at the open is older than the changes.
#[test]
fn a_directory_read_after_changes_shows_them() {
    require_fuse!();
    let s = Served::start(long_ttl());
    let d = s.root().join("d");
    fs::create_dir(&d).unwrap();
    for name in ["grown", "gone", "replaced", "moved", "kept"] {
        fs::write(d.join(name), b"abc").unwrap();
    }
    // Each is known to the mount, as after any earlier look at them.
    let before: BTreeMap<String, u64> = fs::read_dir(&d)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().into_string().unwrap(), e.metadata().unwrap().ino())
        })
        .collect();
    assert_eq!(before.len(), 5);

    let held = fs::read_dir(&d).unwrap(); // opendir: the mount reads the listing now
    OpenOptions::new().append(true).open(d.join("grown")).unwrap().write_all_at(b"+more", 0).unwrap();
    fs::remove_file(d.join("gone")).unwrap();
    fs::remove_file(d.join("replaced")).unwrap();
    fs::write(d.join("replaced"), b"a longer file").unwrap();
    fs::rename(d.join("moved"), d.join("moved-to")).unwrap();

    let server = s.export_dir().join("d");
    let mut listed = Vec::new();
    for e in held {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        let truth = fs::symlink_metadata(server.join(&name)).ok().map(|m| m.len());
        let seen = e.metadata().ok().map(|m| m.len());
        assert_eq!(seen, truth, "{name}: the listing's size (None: no such file), the server's");
        listed.push(name);
    }
    for name in ["grown", "replaced", "kept"] {
        assert!(listed.iter().any(|n| n == name), "{name} is in the directory all along: listed {listed:?}");
    }
    // And by name, as a program holding the names would find them.
    assert_eq!(fs::metadata(d.join("replaced")).unwrap().len(), 13);
    assert!(fs::metadata(d.join("gone")).is_err() && fs::metadata(d.join("moved")).is_err());
}

/// `stat` in a loop while the main thread appends: a size read after an
/// append has returned is at least that append's (a stat answered with the
/// old size must not be cached past the append).
#[test]
fn a_stat_racing_a_write_never_keeps_the_old_size() {
    require_fuse!();
    let s = Served::start(long_ttl());
    let path = s.root().join("f");
    let f = File::create(&path).unwrap();
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut stale = Vec::new();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let _ = fs::metadata(&path);
            }
        });
        let mut size = 0u64;
        while Instant::now() < deadline && stale.len() < 5 {
            f.write_all_at(b"x", size).unwrap();
            size += 1;
            let seen = fs::metadata(&path).unwrap().len();
            if seen != size {
                stale.push(format!("after append {size}: stat says {seen}"));
            }
        }
        stop.store(true, Ordering::Relaxed);
        eprintln!("{size} appends raced by stats");
    });
    assert!(stale.is_empty(), "stale sizes: {stale:?}");
}

/// Opens and reads of a small file in a loop while the main thread rewrites
/// it: a read begun after a write has returned sees that write (a small
/// file's contents brought by an open that began before the write must not
/// answer reads made after it).
#[test]
fn an_open_racing_a_write_never_reads_the_old_bytes() {
    require_fuse!();
    let s = Served::start(long_ttl());
    let path = s.root().join("f");
    let writer = File::create(&path).unwrap();
    writer.write_all_at(&0u64.to_le_bytes(), 0).unwrap();
    let written = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs(4);
    let stale = std::thread::scope(|sc| {
        let reader = sc.spawn(|| {
            let mut stale = Vec::new();
            let mut reads = 0;
            while !stop.load(Ordering::Relaxed) && stale.len() < 5 {
                // A stat first: the mount then knows the size and asks for the contents with the open.
                fs::metadata(&path).unwrap();
                let f = File::open(&path).unwrap();
                let done = written.load(Ordering::SeqCst);
                let mut buf = [0u8; 8];
                f.read_exact_at(&mut buf, 0).unwrap();
                let seen = u64::from_le_bytes(buf);
                if seen < done {
                    stale.push(format!("version {done} written before the read, version {seen} read"));
                }
                reads += 1;
            }
            eprintln!("{reads} opens and reads");
            stale
        });
        let mut v = 0u64;
        while Instant::now() < deadline && !reader.is_finished() {
            v += 1;
            writer.write_all_at(&v.to_le_bytes(), 0).unwrap();
            written.store(v, Ordering::SeqCst);
            // Pauses of varied length let opens begin between writes, as well as during them.
            std::thread::sleep(Duration::from_micros(50 * (v % 8)));
        }
        stop.store(true, Ordering::Relaxed);
        eprintln!("{v} writes");
        reader.join().unwrap()
    });
    assert!(stale.is_empty(), "reads older than a write that had returned: {stale:?}");
}
