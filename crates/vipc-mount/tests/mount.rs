//! The mount's own behaviour: caching that stays correct for this client's changes and catches up with
//! other clients' after the TTL, parallel readers, errors passed through (EROFS, EIO when the server is
//! gone) and recovery when the server comes back, without remounting.

mod common;

use common::Served;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::time::{Duration, Instant};
use vipc_mount::MountOptions;

#[test]
fn own_changes_show_at_once_under_a_long_ttl() {
    require_fuse!();
    let long = Duration::from_secs(60);
    let s = Served::start(MountOptions { attr_ttl: long, entry_ttl: long, ..MountOptions::default() });
    let f = s.root().join("f");
    fs::write(&f, b"one").unwrap();
    assert_eq!(fs::metadata(&f).unwrap().len(), 3);
    let m0 = fs::metadata(&f).unwrap().modified().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    OpenOptions::new().append(true).open(&f).unwrap().write_all(b"+two").unwrap();
    let m = fs::metadata(&f).unwrap();
    assert_eq!(m.len(), 7, "size after an append");
    assert!(m.modified().unwrap() > m0, "mtime after a write");
    fs::set_permissions(&f, fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!(fs::metadata(&f).unwrap().permissions().mode() & 0o777, 0o640);
    fs::rename(&f, s.root().join("g")).unwrap();
    assert!(fs::metadata(&f).is_err());
    assert_eq!(fs::read(s.root().join("g")).unwrap(), b"one+two");
    fs::create_dir(s.root().join("d")).unwrap();
    let names: Vec<_> = fs::read_dir(s.root()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(names.iter().any(|n| n == "d") && names.iter().any(|n| n == "g"));
    fs::remove_file(s.root().join("g")).unwrap();
    assert!(fs::metadata(s.root().join("g")).is_err());
}

#[test]
fn other_clients_changes_show_after_the_ttl() {
    require_fuse!();
    let ttl = Duration::from_millis(200);
    let s = Served::start(MountOptions { attr_ttl: ttl, entry_ttl: ttl, ..MountOptions::default() });
    let f = s.root().join("f");
    fs::write(&f, b"version 1").unwrap();
    assert_eq!(fs::read(&f).unwrap(), b"version 1");
    // Another client (here: the server's own disk) changes the file, its size and its mtime.
    std::thread::sleep(Duration::from_millis(20));
    fs::write(s.export_dir().join("f"), b"version 2, longer").unwrap();
    fs::write(s.export_dir().join("new"), b"n").unwrap();
    std::thread::sleep(ttl + Duration::from_millis(100));
    assert_eq!(fs::metadata(&f).unwrap().len(), 17);
    assert_eq!(fs::read(&f).unwrap(), b"version 2, longer", "a reopen after the change reads new data");
    assert_eq!(fs::read(s.root().join("new")).unwrap(), b"n");
    fs::remove_file(s.export_dir().join("new")).unwrap();
    std::thread::sleep(ttl + Duration::from_millis(100));
    assert!(fs::metadata(s.root().join("new")).is_err(), "a name removed elsewhere goes after the TTL");
}

/// Sixteen threads reading random pages of one file at once through the
/// mount each get the right bytes (how fast they go is `vipc bench files`).
#[test]
fn sixteen_concurrent_readers_read_the_right_bytes() {
    require_fuse!();
    let s = Served::start(MountOptions { direct_io: true, ..MountOptions::default() });
    const LEN: usize = 8 << 20;
    let data: Vec<u8> = (0..LEN as u32).map(|i| (i.wrapping_mul(2654435761) >> 11) as u8).collect();
    fs::write(s.export_dir().join("big"), &data).unwrap();
    let path = s.root().join("big");
    let per = 400;
    std::thread::scope(|sc| {
        for t in 0..16u64 {
            let (path, data) = (&path, &data);
            sc.spawn(move || {
                let f = File::open(path).unwrap();
                let mut buf = [0u8; 4096];
                let mut x = (t + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                for _ in 0..per {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let off = (x % (LEN as u64 / 4096)) * 4096;
                    f.read_exact_at(&mut buf, off).unwrap();
                    assert!(buf[..] == data[off as usize..off as usize + 4096], "reader {t}: page at {off}");
                }
            });
        }
    });
}

#[test]
fn a_read_only_export_refuses_writes_with_erofs() {
    require_fuse!();
    let s = Served::start_with(MountOptions::default(), true);
    fs::write(s.export_dir().join("f"), b"ro").unwrap();
    assert_eq!(fs::read(s.root().join("f")).unwrap(), b"ro");
    for r in [
        fs::write(s.root().join("g"), b"x").map(|_| ()),
        OpenOptions::new().write(true).open(s.root().join("f")).map(|_| ()),
        fs::create_dir(s.root().join("d")),
        fs::remove_file(s.root().join("f")),
    ] {
        assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EROFS));
    }
}

#[test]
fn server_gone_gives_eio_quickly_and_the_mount_recovers() {
    require_fuse!();
    let mut s = Served::start(MountOptions { direct_io: true, ..MountOptions::default() });
    let data = vec![5u8; 100_000];
    fs::write(s.root().join("f"), &data).unwrap();
    let held = File::open(s.root().join("f")).unwrap();
    let mut buf = vec![0u8; 4096];
    held.read_exact_at(&mut buf, 0).unwrap();
    s.stop_server();
    let t0 = Instant::now();
    let e = held.read_at(&mut buf, 8192).unwrap_err();
    let took = t0.elapsed();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    assert!(took < Duration::from_secs(5), "the read failed after {took:?}: it must not hang");
    eprintln!("read with the server gone failed with EIO after {took:?}");
    s.restart_server();
    // Without remounting: new opens work, and so does the descriptor held across the restart.
    assert!(fs::read(s.root().join("f")).unwrap() == data);
    buf.fill(0);
    held.read_exact_at(&mut buf, 8192).unwrap();
    assert!(buf.iter().all(|&b| b == 5));
}

/// Small files opened for reading come with their contents (one exchange
/// instead of two): what programs read is the file, whatever its size
/// around the limit, and a write through the mount to a file another
/// descriptor has open shows in that descriptor's next read.
#[test]
fn small_files_read_whole_with_their_open_and_see_this_mounts_writes() {
    require_fuse!();
    let s = Served::start(MountOptions::default());
    let limit = vipc_fs::proto::OPEN_HEAD_MAX;
    let sizes = [0, 1, 4095, 4096, 4097, limit - 1, limit, limit + 1, 200_000];
    for (i, &n) in sizes.iter().enumerate() {
        let body: Vec<u8> = (0..n).map(|k| (k * 7 + i) as u8).collect();
        fs::write(s.export_dir().join(format!("f{i}")), &body).unwrap();
    }
    // Listed first, as `tar c` does: the mount then knows the sizes and asks for the contents with the open.
    assert_eq!(fs::read_dir(s.root()).unwrap().count(), sizes.len());
    for (i, &n) in sizes.iter().enumerate() {
        let body: Vec<u8> = (0..n).map(|k| (k * 7 + i) as u8).collect();
        assert!(fs::read(s.root().join(format!("f{i}"))).unwrap() == body, "{n}-byte file");
    }

    // One exchange per file to open it (with its contents) and one to close it: no READ of its own.
    for k in 0..50 {
        fs::write(s.export_dir().join(format!("n{k}")), [k as u8; 100]).unwrap();
    }
    assert_eq!(fs::read_dir(s.root()).unwrap().count(), sizes.len() + 50);
    let before = settled_packets(&s.client_node);
    for k in 0..50 {
        assert_eq!(fs::read(s.root().join(format!("n{k}"))).unwrap(), [k as u8; 100]);
    }
    let used = settled_packets(&s.client_node) - before;
    // 4 per file, with room for retransmissions on a loaded machine; a READ each would make 300.
    assert!(used <= 50 * 4 + 40, "{used} packets for 50 small files (with a READ each: 300)");

    let f = s.root().join("w");
    fs::write(s.export_dir().join("w"), vec![b'a'; 5000]).unwrap();
    assert_eq!(fs::metadata(&f).unwrap().len(), 5000);
    let reader = File::open(&f).unwrap();
    let writer = OpenOptions::new().write(true).open(&f).unwrap();
    writer.write_all_at(b"XYZ", 10).unwrap();
    let mut got = vec![0u8; 5000];
    reader.read_exact_at(&mut got, 0).unwrap();
    assert_eq!(&got[8..15], b"aaXYZaa", "a write through the mount after the reader's open");
}

/// The node's IPC packets once they stop changing (closes are sent after
/// `close(2)` has returned).
fn settled_packets(node: &vipc::Node) -> u64 {
    let mut last = node.stats().ipc_packets();
    let give_up = Instant::now() + Duration::from_secs(5);
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let now = node.stats().ipc_packets();
        if now == last || Instant::now() > give_up {
            return now;
        }
        last = now;
    }
}

#[test]
fn an_open_file_renamed_over_elsewhere_keeps_its_own_size_and_bytes() {
    require_fuse!();
    let ttl = Duration::from_millis(100);
    let s = Served::start(MountOptions { attr_ttl: ttl, entry_ttl: ttl, ..MountOptions::default() });
    let old: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    fs::write(s.export_dir().join("a"), &old).unwrap();
    let f = File::open(s.root().join("a")).unwrap();
    // Another client puts a short file in its place.
    fs::write(s.export_dir().join("new"), b"short").unwrap();
    fs::rename(s.export_dir().join("new"), s.export_dir().join("a")).unwrap();
    std::thread::sleep(ttl * 3);
    assert_eq!(f.metadata().unwrap().len(), 100_000, "the open file's size, not the new name's");
    let mut buf = vec![0u8; 100_000];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert!(buf == old, "the open file's bytes");
    assert_eq!(fs::read(s.root().join("a")).unwrap(), b"short", "the name is the new file's");
}

/// What the mount does not serve answers as docs/FILES.md says: as a local
/// file system without it would.
#[test]
fn unserved_calls_answer_as_a_local_file_system_would() {
    require_fuse!();
    let s = Served::start(MountOptions::default());
    let f = File::create(s.root().join("f")).unwrap();
    f.write_all_at(b"data", 0).unwrap();
    let e = rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), 0, 1 << 20);
    assert_eq!(e, Err(rustix::io::Errno::OPNOTSUPP), "fallocate");
    assert_eq!(rustix::termios::tcgetattr(&f).err(), Some(rustix::io::Errno::NOTTY), "a terminal ioctl");
    assert_eq!(rustix::fs::seek(&f, rustix::fs::SeekFrom::Data(0)), Ok(0), "all data");
    assert_eq!(rustix::fs::seek(&f, rustix::fs::SeekFrom::Hole(0)), Ok(4), "the hole at the end");
}

/// SEEK_DATA and SEEK_HOLE see the holes of the server's file (cp --sparse,
/// tar -S and rsync find them), and ENXIO past the last data.
#[test]
fn seek_data_and_seek_hole_see_the_servers_holes() {
    use rustix::fs::{seek, SeekFrom};
    require_fuse!();
    let s = Served::start(MountOptions::default());
    let f =
        OpenOptions::new().create(true).truncate(true).read(true).write(true).open(s.root().join("sparse")).unwrap();
    f.set_len(16 << 20).unwrap();
    f.write_all_at(&[7; 4096], 8 << 20).unwrap();
    assert_eq!(seek(&f, SeekFrom::Data(0)), Ok(8 << 20), "the first data");
    assert_eq!(seek(&f, SeekFrom::Hole(8 << 20)), Ok((8 << 20) + 4096), "the hole after it");
    assert_eq!(seek(&f, SeekFrom::Data((8 << 20) + 4096)), Err(rustix::io::Errno::NXIO), "no data after");
}

/// Request threads beyond the limit are refused before mounting (4294967295
/// of them aborted the process allocating their buffers, leaving the mount).
#[test]
fn request_threads_are_bounded() {
    require_fuse!();
    let s = Served::start(MountOptions::default());
    let other = tempfile::tempdir().unwrap();
    for threads in [0, vipc_mount::MAX_THREADS + 1, u32::MAX as usize] {
        let opts = MountOptions { threads, ..MountOptions::default() };
        match vipc_mount::mount(s.client.clone(), other.path(), "vipc:test", opts) {
            Err(vipc_mount::MountError::Threads(n)) => assert_eq!(n, threads),
            r => panic!("{threads} threads: {:?}", r.map(|_| ())),
        }
    }
    assert!(!vipc_mount::is_mount_point(other.path()), "nothing mounted");
}
