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

/// The link count of `file` asked of the mount itself (a plain `fstat` may be
/// answered from the kernel's cache of the attributes).
fn links_asked(file: &File) -> rustix::io::Result<u32> {
    use rustix::fs::{statx, AtFlags, StatxFlags};
    let path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(file));
    statx(rustix::fs::CWD, path, AtFlags::STATX_FORCE_SYNC, StatxFlags::BASIC_STATS).map(|s| s.stx_nlink)
}

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

/// `fstat` of an open file while another thread unlinks its name: once the
/// unlink has returned, the link count is 0 (an fstat answered during the
/// unlink was kept with the count 1).
#[test]
fn an_fstat_racing_an_unlink_never_keeps_the_old_link_count() {
    require_fuse!();
    let s = Served::start(long_ttl());
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut stale = Vec::new();
    let mut i = 0;
    while Instant::now() < deadline && stale.len() < 3 {
        i += 1;
        let path = s.root().join(format!("f{i}"));
        fs::write(&path, b"abc").unwrap();
        let f = File::open(&path).unwrap();
        let stop = AtomicBool::new(false);
        std::thread::scope(|sc| {
            sc.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    // (One racing the unlink may find the name gone: ENOENT.)
                    let _ = links_asked(&f);
                }
            });
            std::thread::sleep(Duration::from_micros(200));
            fs::remove_file(&path).unwrap();
            stop.store(true, Ordering::Relaxed);
        });
        let (n, asked) = (f.metadata().unwrap().nlink(), links_asked(&f).unwrap());
        if (n, asked) != (0, 0) {
            stale.push(format!("unlink {i}: fstat after it returned says {n} links ({asked} asked of the mount)"));
        }
    }
    eprintln!("{i} unlinks raced by fstat");
    assert!(stale.is_empty(), "{stale:?}");
}

/// A directory listing held open while this mount writes to 2,100 other
/// names costs the server nothing more to read (its names are not among
/// them): the log of changed names keeps each name once, so busy writes
/// elsewhere do not make every entry look changed (they made it look each of
/// the 3,000 up again).
#[test]
fn writes_elsewhere_do_not_make_a_held_listing_ask_again() {
    require_fuse!();
    let s = Served::start(long_ttl());
    fs::create_dir(s.export_dir().join("big")).unwrap();
    for i in 0..3000 {
        fs::write(s.export_dir().join(format!("big/e{i:04}")), b"x").unwrap();
    }
    fs::create_dir(s.root().join("other")).unwrap();
    let log = File::create(s.root().join("other/log")).unwrap();
    let held = fs::read_dir(s.root().join("big")).unwrap();
    for k in 0..2100 {
        log.write_all_at(b"x", k).unwrap();
    }
    let before = s.client_node.stats().ipc_packets();
    let sizes: u64 = held.map(|e| e.unwrap().metadata().unwrap().len()).sum();
    let used = s.client_node.stats().ipc_packets() - before;
    assert_eq!(sizes, 3000, "3,000 entries of 1 byte");
    assert!(used < 100, "{used} packets to read a listing held in memory (a lookup per entry: 6,000)");
}

/// Renames of a new file over `a`, while other threads stat `a`: the
/// renamed file's descriptor keeps working (a lookup of `a` answered with
/// the old file just before the rename took the name from the renamed
/// file's node, and `ftruncate` through its descriptor failed with ENOENT).
#[test]
fn a_lookup_racing_a_rename_over_the_name_leaves_the_renamed_file_its_name() {
    require_fuse!();
    let s = Served::start(MountOptions {
        attr_ttl: Duration::from_secs(60),
        entry_ttl: Duration::ZERO,
        ..MountOptions::default()
    });
    let (a, b) = (s.root().join("a"), s.root().join("b"));
    fs::write(&a, b"0").unwrap();
    let stop = AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut broken = Vec::new();
    let mut i = 0u64;
    std::thread::scope(|sc| {
        for _ in 0..2 {
            sc.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let _ = fs::symlink_metadata(&a);
                }
            });
        }
        while Instant::now() < deadline && broken.len() < 3 {
            i += 1;
            let f = File::create(&b).unwrap();
            f.write_all_at(i.to_string().as_bytes(), 0).unwrap();
            fs::rename(&b, &a).unwrap();
            if let Err(e) = f.set_len(1) {
                broken.push(format!("rename {i}: ftruncate of the renamed file: {e}"));
            }
        }
        stop.store(true, Ordering::Relaxed);
    });
    eprintln!("{i} renames raced by lookups");
    assert!(broken.is_empty(), "{broken:?}");
}
