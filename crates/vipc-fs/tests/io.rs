//! Page reads and writes are 2-packet exchanges; large transfers move by
//! MoveTo/MoveFrom in the client's unit; the fallback without large packets.

mod common;
use common::*;
use std::fs;
use std::time::Duration;

/// Timers long enough that nothing is retransmitted on a busy machine (these
/// tests count packets).
fn patient(c: &mut vipc::NodeConfig) {
    c.engine.retransmit = Duration::from_secs(2);
    c.engine.timeout = Duration::from_secs(10);
}

fn page_exchange_packets(s: &Setup, page: usize) -> (u64, u64) {
    let c = &s.client;
    let data = pattern(page, 3);
    fs::write(s.dir.path().join("p"), pattern(page * 4, 9)).unwrap();
    let (h, _) = c.open("p", libc::O_RDWR, 0).unwrap();
    let mut buf = vec![0u8; page];
    c.read(h, 0, &mut buf).unwrap(); // warm-up (location cache)
    let before = packets(&s.client_node);
    assert_eq!(c.read(h, page as u64, &mut buf).unwrap(), page);
    let read = packets(&s.client_node) - before;
    assert_eq!(buf, pattern(page * 4, 9)[page..2 * page]);
    let before = packets(&s.client_node);
    assert_eq!(c.write(h, 2 * page as u64, &data).unwrap(), page);
    let write = packets(&s.client_node) - before;
    c.close(h).unwrap();
    assert_eq!(fs::read(s.dir.path().join("p")).unwrap()[2 * page..3 * page], data[..]);
    (read, write)
}

#[test]
fn page_reads_and_writes_are_two_packets() {
    let s = setup_with(false, patient);
    for page in [512, 4096, 8192] {
        assert_eq!(page_exchange_packets(&s, page), (2, 2), "{page}-byte page");
    }
    assert!(s.client.page_size() >= 8192);
}

#[test]
fn pages_larger_than_a_packet_fall_back_to_moves() {
    // Ethernet-size packets everywhere: a 4 KB reply segment is too large for
    // one packet, so the server moves the page and then replies.
    let s = setup_with(false, |c| {
        patient(c);
        c.engine.loopback_packet = None;
    });
    let (read, write) = page_exchange_packets(&s, 4096);
    assert!(read > 2 && write > 2, "read {read} write {write} packets");
    assert_eq!(page_exchange_packets(&s, 1024), (2, 2));
}

#[test]
fn large_reads_and_writes_move_in_units() {
    let mut s = setup(false);
    s.client.set_unit(64 << 10);
    let c = &s.client;
    let size = 3 << 20 | 12345;
    let data = pattern(size, 5);
    let (h, _) = c.open("big", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    assert_eq!(c.write(h, 0, &data).unwrap(), size);
    c.fsync(h, false).unwrap();
    assert_eq!(fs::read(s.dir.path().join("big")).unwrap(), data);
    let mut back = vec![0u8; size + 1000];
    assert_eq!(c.read(h, 0, &mut back).unwrap(), size, "short only at end of file");
    assert_eq!(back[..size], data[..]);
    // more than one request (MAX_IO) in one call
    let huge = pattern(9 << 20, 1);
    assert_eq!(c.write(h, 1, &huge).unwrap(), huge.len());
    let mut back = vec![0u8; huge.len()];
    assert_eq!(c.read(h, 1, &mut back).unwrap(), huge.len());
    assert!(back == huge);
    let mut none = [0u8; 10];
    assert_eq!(c.read(h, 1 << 40, &mut none).unwrap(), 0);
    c.close(h).unwrap();
}

#[test]
fn sequential_reads_see_writes_despite_read_ahead() {
    let s = setup(false);
    let c = &s.client;
    let mut model = pattern(64 << 10, 2);
    fs::write(s.dir.path().join("seq"), &model).unwrap();
    let (h, _) = c.open("seq", libc::O_RDWR, 0).unwrap();
    let mut buf = vec![0u8; 4096];
    for i in 0..8usize {
        assert_eq!(c.read(h, (i * 4096) as u64, &mut buf).unwrap(), 4096);
        assert_eq!(buf, model[i * 4096..(i + 1) * 4096]);
        // the next block is now prefetched; overwrite part of it
        c.write(h, ((i + 1) * 4096) as u64, &[0xEE; 16]).unwrap();
        model[(i + 1) * 4096..(i + 1) * 4096 + 16].copy_from_slice(&[0xEE; 16]);
        assert_eq!(c.read(h, ((i + 1) * 4096) as u64, &mut buf[..16]).unwrap(), 16);
        assert_eq!(buf[..16], [0xEE; 16]);
        c.read(h, (i * 4096) as u64, &mut buf).unwrap(); // back on the sequential track
    }
    // a change made on the server's side is seen once the read-ahead expires
    c.read(h, 0, &mut buf).unwrap();
    c.read(h, 4096, &mut buf).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let mut local = model.clone();
    local[8192] = 0x11;
    fs::write(s.dir.path().join("seq"), &local).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(250));
    assert_eq!(c.read(h, 8192, &mut buf).unwrap(), 4096);
    assert_eq!(buf[0], 0x11);
    c.close(h).unwrap();
}

#[test]
fn alternating_sequential_readers_get_fresh_bytes() {
    // Two readers of one file, alternating, each get their own bytes, and a
    // block rewritten meanwhile is never served stale: with blocks that fit
    // the reply packet (read ahead into a buffer, whole blocks handed over
    // without a copy) and with 1 MiB blocks (sent by MoveTo from the page cache).
    for block in [60_000usize, 1 << 20] {
        let s = setup(false);
        let c = &s.client;
        let mut model = pattern(8 * block, 3);
        fs::write(s.dir.path().join("big"), &model).unwrap();
        let (a, _) = c.open("big", libc::O_RDWR, 0).unwrap();
        let (b, _) = c.open("big", libc::O_RDONLY, 0).unwrap();
        let mut buf = vec![0u8; block];
        for round in 0..5 {
            for k in 0..8usize {
                let at = k * block;
                for h in [a, b] {
                    assert_eq!(c.read(h, at as u64, &mut buf).unwrap(), block);
                    assert!(buf == model[at..at + block], "{block}: round {round}, block {k}: wrong bytes");
                }
                if round > 0 && k + 1 < 8 {
                    // the next block is read ahead for both handles by now: rewrite some of it
                    let next = (k + 1) * block;
                    let mark = [round as u8; 100];
                    c.write(a, (next + 4096) as u64, &mark).unwrap();
                    model[next + 4096..next + 4196].copy_from_slice(&mark);
                }
            }
        }
        c.close(a).unwrap();
        c.close(b).unwrap();
    }
}

#[test]
fn directories_larger_than_one_batch_are_listed_whole() {
    let s = setup(false);
    let d = s.dir.path().join("many");
    fs::create_dir(&d).unwrap();
    for i in 0..1500 {
        fs::write(d.join(format!("file-with-a-longish-name-{i:05}")), []).unwrap();
    }
    let list = s.client.readdir("many").unwrap();
    assert_eq!(list.len(), 1500);
    let mut names: Vec<String> = list.into_iter().map(|e| e.name).collect();
    names.dedup();
    assert_eq!(names.len(), 1500);
}

#[test]
fn what_follows_a_write_behind_reply_sees_the_write() {
    // Replies to writes leave before the data are written; whatever any
    // client does after the reply must still see them.
    let s = setup(false);
    let other = vipc_fs::FsClient::connect(&s.client_node, &s.name).unwrap();
    let (h, _) = s.client.open("wb", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    let (h2, _) = other.open("wb", libc::O_RDONLY, 0).unwrap();
    let page = pattern(4096, 6);
    let mut back = vec![0u8; 4096];
    for i in 0..200u64 {
        s.client.write(h, i * 4096, &page).unwrap();
        assert_eq!(other.lookup("wb").unwrap().size, (i + 1) * 4096, "size after write {i}");
        assert_eq!(other.read(h2, i * 4096, &mut back).unwrap(), 4096);
        assert!(back == page, "data of write {i}");
    }
    s.client.fsync(h, true).unwrap();
    s.client.close(h).unwrap();
    other.close(h2).unwrap();
}

#[test]
fn long_paths_and_big_listings_work_over_ethernet_size_packets() {
    // 1,384 bytes of segment per packet: a 3,000-byte path is completed by
    // MoveFrom, a 32 KiB listing comes back by MoveTo.
    let s = setup_with(false, |c| c.engine.loopback_packet = None);
    let c = &s.client;
    let mut path = String::new();
    for i in 0..16 {
        if !path.is_empty() {
            path.push('/');
        }
        path.push_str(&format!("{i:02}{}", "d".repeat(190)));
        c.mkdir(&path, 0o755).unwrap();
    }
    assert!(path.len() > 2900);
    let file = format!("{path}/f");
    let (h, _) = c.open(&file, libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    c.write(h, 0, &pattern(5000, 1)).unwrap();
    c.close(h).unwrap();
    assert_eq!(c.lookup(&file).unwrap().size, 5000);
    // The file's beginning after the attributes does not fit the reply packet either: MoveTo.
    let (h, _, head) = c.open_with_head(&file, libc::O_RDONLY, 0, 8192).unwrap();
    assert_eq!(head, pattern(5000, 1));
    c.close(h).unwrap();
    for i in 0..400 {
        fs::write(s.dir.path().join(format!("entry-{i:04}")), []).unwrap();
    }
    assert_eq!(c.readdir("").unwrap().len(), 401);
    c.rename(&file, "moved", 0).unwrap();
    assert_eq!(c.lookup("moved").unwrap().size, 5000);
}

/// An OPEN asking for the file's beginning brings it back with the
/// attributes, in the same 2-packet exchange: all of a small file, at most
/// what was asked, none for a write-only open or a directory; an open that
/// asks for none gets none.
#[test]
fn an_open_brings_back_the_beginning_of_the_file() {
    let s = setup_with(false, patient);
    let c = &s.client;
    fs::write(s.dir.path().join("small"), pattern(3000, 4)).unwrap();
    fs::write(s.dir.path().join("big"), pattern(200_000, 5)).unwrap();
    fs::create_dir(s.dir.path().join("dir")).unwrap();
    let (h, _) = c.open("small", libc::O_RDONLY, 0).unwrap(); // warm-up (location cache)
    c.close(h).unwrap();

    let before = packets(&s.client_node);
    let (h, attr, head) = c.open_with_head("small", libc::O_RDONLY, 0, 16 << 10).unwrap();
    assert_eq!(packets(&s.client_node) - before, 2, "one exchange");
    assert_eq!((attr.size, head), (3000, pattern(3000, 4)), "the whole small file");
    c.close(h).unwrap();

    let (h, _, head) = c.open_with_head("big", libc::O_RDWR, 0, 10_000).unwrap();
    assert_eq!(head, pattern(200_000, 5)[..10_000], "what was asked");
    c.close(h).unwrap();
    let (h, _, head) = c.open_with_head("big", libc::O_RDONLY, 0, 1 << 20).unwrap();
    assert_eq!(head, pattern(200_000, 5)[..vipc_fs::proto::OPEN_HEAD_MAX], "at most OPEN_HEAD_MAX");
    c.close(h).unwrap();

    for (path, flags) in [("small", libc::O_WRONLY), ("dir", libc::O_RDONLY | libc::O_DIRECTORY)] {
        let (h, _, head) = c.open_with_head(path, flags, 0, 4096).unwrap();
        assert!(head.is_empty(), "{path} opened with {flags:#o}: {} bytes", head.len());
        c.close(h).unwrap();
    }
    let (h, _, head) = c.open_with_head("small", libc::O_RDONLY, 0, 0).unwrap();
    assert!(head.is_empty());
    c.close(h).unwrap();
}

/// SEEK_DATA and SEEK_HOLE through the service answer as the server's file
/// does: where data and holes begin, ENXIO past the last data.
#[test]
fn seek_finds_the_data_and_holes_of_a_sparse_file() {
    use std::os::unix::fs::FileExt;
    let s = setup(false);
    let f = std::fs::File::create(s.dir.path().join("sparse")).unwrap();
    f.write_all_at(&pattern(64 << 10, 1), 0).unwrap();
    f.write_all_at(&pattern(4096, 2), 8 << 20).unwrap();
    f.set_len(16 << 20).unwrap();
    let (h, _) = s.client.open("sparse", libc::O_RDONLY, 0).unwrap();
    let c = &s.client;
    assert_eq!(c.seek(h, 0, false).unwrap(), 0, "data at the start");
    assert_eq!(c.seek(h, 0, true).unwrap(), 64 << 10, "the first hole");
    assert_eq!(c.seek(h, 100 << 10, false).unwrap(), 8 << 20, "the next data");
    assert_eq!(c.seek(h, 8 << 20, true).unwrap(), (8 << 20) + 4096);
    assert_eq!(c.seek(h, (8 << 20) + 4096, false).unwrap_err().errno(), libc::ENXIO, "no data after");
    assert_eq!(c.seek(h, 20 << 20, true).unwrap_err().errno(), libc::ENXIO, "past the end");
}

/// A write that fails after its reply (write-behind) is reported by the
/// next FSYNC, WRITE or CLOSE of its handle — and of every other handle then
/// open on the file, as Linux reports it through any descriptor (the
/// mount's writeback writes through whichever handle it picks). The file
/// here is a device node like /dev/full, whose every write fails ENOSPC.
#[test]
fn a_failed_write_behind_is_reported_through_every_handle_of_the_file() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: making a device node needs root");
        return;
    }
    let s = setup(false);
    let full = s.dir.path().join("full");
    let made = std::process::Command::new("mknod").arg(&full).args(["c", "1", "7"]).status().unwrap();
    assert!(made.success(), "mknod");
    fs::write(s.dir.path().join("g"), b"g").unwrap();
    let c = &s.client;
    let (a, _) = c.open("full", libc::O_WRONLY, 0).unwrap();
    let (b, _) = c.open("full", libc::O_WRONLY, 0).unwrap();
    let (other, _) = c.open("g", libc::O_WRONLY, 0).unwrap();
    assert_eq!(c.write(a, 0, b"x").unwrap(), 1, "answered before it is written");
    let err = |r: Result<(), vipc_fs::FsError>| match r {
        Err(vipc_fs::FsError::Errno(e)) => e,
        r => panic!("{r:?}"),
    };
    assert_eq!(err(c.close(b)), libc::ENOSPC, "through another handle of the file");
    assert_eq!(err(c.fsync(a, false)), libc::ENOSPC, "through its own");
    c.close(a).unwrap(); // reported once
    c.close(other).unwrap();
}
