//! Measures the file service on two loopback nodes in one process: random
//! page reads against the raw Send–Receive–ReplyWithSegment of the same
//! size plus a local pread, page writes, sequential reads with and without
//! read-ahead, and bulk reads and writes.
//!
//! `cargo run --release -p vipc-fs --example fsperf [-- FILE_MB]`

use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};
use vipc::{Node, NodeConfig, SegmentRef, SendOptions};
use vipc_fs::{ExportConfig, FileServer, FsClient, Tuning};

fn addrs() -> Vec<SocketAddr> {
    let s: Vec<UdpSocket> = (0..2).map(|_| UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap()).collect();
    s.iter().map(|s| s.local_addr().unwrap()).collect()
}

fn quantile(v: &mut [Duration], q: f64) -> f64 {
    v.sort();
    v[((v.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6
}

fn rng(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn main() {
    let mb: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(64);
    let a = addrs();
    let sn = Node::start(NodeConfig::fixed(1, a[0], a.clone())).unwrap();
    let cn = Node::start(NodeConfig::fixed(2, a[1], a.clone())).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("file");
    let data: Vec<u8> = (0..mb << 20).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&path, &data).unwrap();
    let local = std::fs::File::open(&path).unwrap();

    // Raw baseline: a process that replies with `n` bytes in the reply packet.
    let (raw, _t) = sn
        .spawn(|p| {
            let page = vec![7u8; 65536];
            loop {
                let mut m = [0u8; 32];
                let Ok(from) = p.receive(&mut m) else { return };
                let n = u32::from_le_bytes(m[0..4].try_into().unwrap()) as usize;
                if p.reply_with_segment(&m, from, 0, &page[..n]).is_err() {
                    return;
                }
            }
        })
        .unwrap();

    let cfg = |ra| ExportConfig { name: format!("perf{ra}"), dir: dir.path().into(), read_only: false, workers: 4 };
    let _s1 = FileServer::start_tuned(&sn, cfg(1), Tuning::default()).unwrap();
    let _s0 =
        FileServer::start_tuned(&sn, cfg(0), Tuning { read_ahead: false, write_behind: false, ..Tuning::default() })
            .unwrap();
    let c = FsClient::connect(&cn, "perf1").unwrap();
    let c0 = FsClient::connect(&cn, "perf0").unwrap();
    let p = cn.attach().unwrap();
    let (h, _) = c.open("file", libc::O_RDWR, 0).unwrap();
    let pages = (mb << 20) as u64;
    let iters = 3000;

    println!("random page reads from a {mb} MiB file (page cache warm), {iters} each, µs:");
    for size in [512usize, 4096, 8192] {
        let mut buf = vec![0u8; size];
        let mut s = 0x9e3779b97f4a7c15u64;
        let (mut raw_t, mut pread_t, mut fs_t) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..iters + 100 {
            let off = rng(&mut s) % (pages / size as u64) * size as u64;
            let mut m = [0u8; 32];
            m[0..4].copy_from_slice(&(size as u32).to_le_bytes());
            let t = Instant::now();
            p.send_with(&mut m, raw, Some(SegmentRef::Write(&mut buf)), SendOptions::default()).unwrap();
            let t1 = t.elapsed();
            let t = Instant::now();
            local.read_exact_at(&mut buf, off).unwrap();
            let t2 = t.elapsed();
            let t = Instant::now();
            assert_eq!(c.read(h, off, &mut buf).unwrap(), size);
            let t3 = t.elapsed();
            if i >= 100 {
                raw_t.push(t1);
                pread_t.push(t2);
                fs_t.push(t3);
            }
        }
        let (r, l, f) = (quantile(&mut raw_t, 0.5), quantile(&mut pread_t, 0.5), quantile(&mut fs_t, 0.5));
        println!(
            "  {size:>5} B: raw SRR {r:.1}, pread {l:.1}, FsClient {f:.1} (p99 {:.1}); FsClient / (SRR + pread) = {:.2}",
            quantile(&mut fs_t, 0.99),
            f / (r + l)
        );
    }

    println!("raw page-write exchanges (segment appended to the Send), µs (median):");
    let (sink, _t2) = sn
        .spawn(|p| {
            let mut buf = vec![0u8; 65536];
            loop {
                let mut m = [0u8; 32];
                let Ok(info) = p.receive_with_segment(&mut m, &mut buf) else { return };
                if p.reply(&m, info.from).is_err() {
                    return;
                }
            }
        })
        .unwrap();
    for size in [512usize, 4096, 8192] {
        let mut page = vec![1u8; size];
        let (mut ro, mut rw) = (Vec::new(), Vec::new());
        for _ in 0..iters {
            let mut m = [0u8; 32];
            let t0 = Instant::now();
            p.send_with(&mut m, sink, Some(SegmentRef::Read(&page)), SendOptions::default()).unwrap();
            ro.push(t0.elapsed());
            let t0 = Instant::now();
            p.send_with(&mut m, sink, Some(SegmentRef::ReadWrite(&mut page)), SendOptions::default()).unwrap();
            rw.push(t0.elapsed());
        }
        println!(
            "  {size:>5} B: read-granted {:.1}, read-write-granted {:.1}",
            quantile(&mut ro, 0.5),
            quantile(&mut rw, 0.5)
        );
    }

    println!("page writes, µs (median):");
    for size in [512usize, 4096, 8192] {
        let page = vec![1u8; size];
        let mut t = Vec::new();
        let mut s = 12345u64;
        for _ in 0..iters {
            let off = rng(&mut s) % (pages / size as u64) * size as u64;
            let t0 = Instant::now();
            c.write(h, off, &page).unwrap();
            t.push(t0.elapsed());
        }
        let lf = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let mut lt = Vec::new();
        for _ in 0..iters {
            let off = rng(&mut s) % (pages / size as u64) * size as u64;
            let t0 = Instant::now();
            lf.write_all_at(&page, off).unwrap();
            lt.push(t0.elapsed());
        }
        println!(
            "  {size:>5} B: {:.1} (p99 {:.1}); local pwrite {:.1}",
            quantile(&mut t, 0.5),
            quantile(&mut t, 0.99),
            quantile(&mut lt, 0.5)
        );
    }

    println!("4 KiB writes with 30 µs of computing between them, µs (median, p99):");
    for (name, client) in [("write-behind on ", &c), ("write-behind off", &c0)] {
        let (hh, _) = client.open("file", libc::O_RDWR, 0).unwrap();
        let page = vec![3u8; 4096];
        let mut t = Vec::new();
        let mut s = 777u64;
        for _ in 0..iters {
            let off = rng(&mut s) % (pages / 4096) * 4096;
            let t0 = Instant::now();
            client.write(hh, off, &page).unwrap();
            t.push(t0.elapsed());
            let spin = Instant::now();
            while spin.elapsed() < Duration::from_micros(30) {
                std::hint::spin_loop();
            }
        }
        client.close(hh).unwrap();
        println!("  {name}: {:.1}, {:.1}", quantile(&mut t, 0.5), quantile(&mut t, 0.99));
    }

    println!("sequential reads of the whole file, cold page cache (fadvise DONTNEED first), MB/s:");
    for (name, client) in [("read-ahead on ", &c), ("read-ahead off", &c0)] {
        for size in [4096usize, 65536] {
            let _ = rustix::fs::fadvise(&local, 0, None, rustix::fs::Advice::DontNeed);
            let (hh, _) = client.open("file", libc::O_RDONLY, 0).unwrap();
            let mut buf = vec![0u8; size];
            let t = Instant::now();
            let mut off = 0u64;
            while off < pages {
                off += client.read(hh, off, &mut buf).unwrap() as u64;
            }
            let secs = t.elapsed().as_secs_f64();
            client.close(hh).unwrap();
            println!("  {name} {size:>6} B requests: {:.0}", pages as f64 / secs / 1e6);
        }
    }

    println!("bulk transfers (MoveTo / MoveFrom), MB/s:");
    for unit in [64usize << 10, 1 << 20, 8 << 20] {
        let mut cl = FsClient::connect(&cn, "perf1").unwrap();
        cl.set_unit(unit);
        let (hh, _) = cl.open("file", libc::O_RDWR, 0).unwrap();
        let mut buf = vec![0u8; 8 << 20];
        let t = Instant::now();
        let mut off = 0u64;
        while off < pages {
            off += cl.read(hh, off, &mut buf).unwrap() as u64;
        }
        let rd = pages as f64 / t.elapsed().as_secs_f64() / 1e6;
        let t = Instant::now();
        let mut off = 0u64;
        while off < pages {
            off += cl.write(hh, off, &buf).unwrap() as u64;
        }
        let wr = pages as f64 / t.elapsed().as_secs_f64() / 1e6;
        cl.close(hh).unwrap();
        println!("  unit {:>5} KiB, 8 MiB requests: read {rd:.0}, write {wr:.0}", unit >> 10);
    }
    println!("random 4 KiB reads by concurrent readers sharing one FsClient (1 s each), reads/s:");
    let shared = std::sync::Arc::new(FsClient::connect(&cn, "perf1").unwrap());
    for readers in [1usize, 4, 16] {
        let (hh, _) = shared.open("file", libc::O_RDONLY, 0).unwrap();
        let end = Instant::now() + Duration::from_secs(1);
        let threads: Vec<_> = (0..readers)
            .map(|k| {
                let c = shared.clone();
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 4096];
                    let mut s = 0x1234_5678_9abc_def1u64 ^ k as u64;
                    let mut n = 0u64;
                    while Instant::now() < end {
                        let off = rng(&mut s) % (pages / 4096) * 4096;
                        c.read(hh, off, &mut buf).unwrap();
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        let total: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
        shared.close(hh).unwrap();
        println!("  {readers:>2} readers: {total}");
    }
    c.close(h).unwrap();
    drop(p);
}
