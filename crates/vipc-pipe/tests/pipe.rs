//! The pipe service over real UDP on loopback: ordering, transfers larger
//! than the buffer, many writers, EOF and EPIPE, dead readers and writers,
//! bad requests.

use std::io::{Read, Write};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use vipc::{Node, SegmentRef, SendOptions};
use vipc_pipe::{proto, stat, PipeConfig, PipeError, PipeReader, PipeServer, PipeWriter};

/// `n` nodes with fixed host ids from `first`, every node a static peer of every other, no multicast.
fn cluster(n: usize, first: u16) -> Vec<Node> {
    vipc::loopback_cluster(n, first, |_, cfg| cfg.engine.timeout = Duration::from_millis(500)).unwrap()
}

fn small(capacity: usize) -> PipeConfig {
    PipeConfig { capacity, lease: Duration::from_millis(800), tick: Duration::from_millis(100), max_ends: 64 }
}

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len).map(|i| ((i * 31 + 7) % 251) as u8 ^ salt).collect()
}

/// Runs `f` on a thread and waits at most `secs` for it (a hung pipe fails the test instead of hanging it).
fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs)).expect("pipe operation hung")
}

fn wait_until(what: &str, secs: u64, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(secs), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn records_arrive_in_order_across_nodes_then_eof() {
    let nodes = cluster(3, 0x101);
    let _s = PipeServer::start(&nodes[0], "order", small(4096)).unwrap();
    let mut r = PipeReader::open(&nodes[2], "order").unwrap();
    let w_node = nodes[1].clone();
    let writer = std::thread::spawn(move || {
        let mut w = PipeWriter::open(&w_node, "order").unwrap();
        for i in 0..2000u32 {
            w.write_all(format!("{i:08}\n").as_bytes()).unwrap();
        }
        w.close().unwrap();
    });
    let text = within(60, move || {
        let mut s = String::new();
        r.read_to_string(&mut s).unwrap();
        s
    });
    writer.join().unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2000);
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(*l, format!("{i:08}"));
    }
}

#[test]
fn transfer_much_larger_than_the_buffer() {
    let nodes = cluster(3, 0x111);
    let _s = PipeServer::start(&nodes[0], "big", small(64 * 1024)).unwrap();
    let data = pattern(8 << 20, 0x5a);
    let expect = data.clone();
    let w_node = nodes[1].clone();
    let writer = std::thread::spawn(move || {
        let mut w = PipeWriter::open(&w_node, "big").unwrap();
        // Uneven pieces: some inline, some by MoveFrom, some split by the capacity.
        let mut off = 0;
        let mut step = 1;
        while off < data.len() {
            let n = step.min(data.len() - off);
            w.write_all(&data[off..off + n]).unwrap();
            off += n;
            step = (step * 7 + 3) % 200_000 + 1;
        }
    });
    let mut r = PipeReader::open(&nodes[2], "big").unwrap();
    let got = within(120, move || {
        let mut v = Vec::new();
        let mut buf = vec![0u8; 100_000];
        loop {
            let n = r.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            assert!(n <= 64 * 1024, "a read returns at most the capacity");
            v.extend_from_slice(&buf[..n]);
        }
        v
    });
    writer.join().unwrap();
    assert_eq!(got.len(), expect.len());
    assert!(got == expect, "bytes differ");
}

#[test]
fn many_writers_each_write_is_atomic_and_ordered() {
    let nodes = cluster(3, 0x121);
    let _s = PipeServer::start(&nodes[0], "many", small(8192)).unwrap();
    let mut r = PipeReader::open(&nodes[0], "many").unwrap();
    const W: usize = 8;
    const N: usize = 150;
    let mut ws = Vec::new();
    for k in 0..W {
        let node = nodes[1 + k % 2].clone();
        ws.push(std::thread::spawn(move || {
            let mut w = PipeWriter::open(&node, "many").unwrap();
            for i in 0..N {
                // 300-byte records: writer, sequence, filler.
                let mut rec = vec![b'a' + k as u8; 300];
                rec[..12].copy_from_slice(format!("{k:02}:{i:08}|").as_bytes());
                assert_eq!(w.write_chunk(&rec).unwrap(), 300);
            }
        }));
    }
    let got = within(60, move || {
        let mut v = Vec::new();
        r.read_to_end(&mut v).unwrap();
        v
    });
    for w in ws {
        w.join().unwrap();
    }
    assert_eq!(got.len(), W * N * 300);
    let mut next = [0usize; W];
    for rec in got.chunks(300) {
        let head = std::str::from_utf8(&rec[..12]).unwrap();
        let k: usize = head[..2].parse().unwrap();
        let i: usize = head[3..11].parse().unwrap();
        assert_eq!(i, next[k], "writer {k} out of order");
        next[k] += 1;
        assert!(rec[12..].iter().all(|&b| b == b'a' + k as u8), "record of writer {k} interleaved");
    }
    assert_eq!(next, [N; W]);
}

#[test]
fn writer_first_data_outlive_it_and_reader_first_waits() {
    let nodes = cluster(2, 0x131);
    let _s = PipeServer::start(&nodes[0], "order2", small(4096)).unwrap();
    // Writer first: its data stay after it closes.
    let mut w = PipeWriter::open(&nodes[1], "order2").unwrap();
    w.write_all(b"abc").unwrap();
    w.close().unwrap();
    let mut r = PipeReader::open(&nodes[1], "order2").unwrap();
    let mut s = String::new();
    r.read_to_string(&mut s).unwrap();
    assert_eq!(s, "abc");
    r.close().unwrap();
    // The pipe is fresh again: a reader now waits for the next writer instead of seeing EOF.
    let rn = nodes[1].clone();
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut r = PipeReader::open(&rn, "order2").unwrap();
        let mut s = String::new();
        r.read_to_string(&mut s).unwrap();
        tx.send(s).unwrap();
    });
    let p = nodes[0].attach().unwrap();
    wait_until("the reader to block", 10, || stat(&p, "order2").unwrap().held_reads == 1);
    std::thread::sleep(Duration::from_millis(200));
    assert!(rx.try_recv().is_err(), "no EOF before any writer");
    let mut w = PipeWriter::open(&nodes[0], "order2").unwrap();
    w.write_all(b"second").unwrap();
    drop(w);
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), "second");
    reader.join().unwrap();
}

#[test]
fn writers_get_epipe_when_the_readers_are_gone() {
    let nodes = cluster(2, 0x141);
    let _s = PipeServer::start(&nodes[0], "ep", small(1000)).unwrap();
    let mut w = PipeWriter::open(&nodes[1], "ep").unwrap();
    let r = PipeReader::open(&nodes[1], "ep").unwrap();
    w.write_all(&[1; 1000]).unwrap(); // fills the pipe
    let wn = nodes[1].clone();
    // A second writer blocks on the full pipe...
    let blocked = std::thread::spawn(move || {
        let mut w2 = PipeWriter::open(&wn, "ep").unwrap();
        w2.write_chunk(&[2; 10])
    });
    let p = nodes[0].attach().unwrap();
    wait_until("the writer to block", 10, || stat(&p, "ep").unwrap().held_writes == 1);
    // ...until the only reader closes: then EPIPE, and the buffered data are dropped.
    r.close().unwrap();
    let e = within(10, move || blocked.join().unwrap()).unwrap_err();
    assert!(e.is_broken_pipe(), "{e}");
    assert_eq!(e.errno(), libc::EPIPE);
    let e = w.write_chunk(b"more").unwrap_err();
    assert!(e.is_broken_pipe(), "{e}");
    let io = w.write(b"x").unwrap_err();
    assert_eq!(io.kind(), std::io::ErrorKind::BrokenPipe);
    assert_eq!(stat(&p, "ep").unwrap().buffered, 0);
}

#[test]
fn a_dead_reader_is_noticed_and_the_writer_gets_epipe() {
    let nodes = cluster(3, 0x151);
    let _s = PipeServer::start(&nodes[0], "dr", small(1000)).unwrap();
    let p = nodes[0].attach().unwrap();
    // The reader's node goes away while its read is held (as if its program were killed).
    let reader = PipeReader::open(&nodes[2], "dr").unwrap();
    let victim = nodes[2].clone();
    std::thread::spawn(move || {
        let mut reader = reader;
        let _ = reader.read(&mut [0u8; 100]);
    });
    wait_until("the read to be held", 10, || stat(&p, "dr").unwrap().held_reads == 1);
    let mut w = PipeWriter::open(&nodes[1], "dr").unwrap();
    victim.shutdown();
    let t = Instant::now();
    wait_until("the dead reader to be dropped", 10, || stat(&p, "dr").unwrap().readers == 0);
    let took = t.elapsed();
    assert!(took < Duration::from_secs(3), "lease 800 ms, took {took:?}");
    let e = within(10, move || w.write_chunk(b"anyone?")).unwrap_err();
    assert!(e.is_broken_pipe(), "{e}");
}

#[test]
fn a_dead_writer_is_noticed_and_the_reader_gets_the_data_then_eof() {
    let nodes = cluster(3, 0x161);
    let _s = PipeServer::start(&nodes[0], "dw", small(100)).unwrap();
    let p = nodes[0].attach().unwrap();
    let mut w = PipeWriter::open(&nodes[2], "dw").unwrap();
    w.write_all(&[7; 100]).unwrap();
    let victim = nodes[2].clone();
    // Its next write is held on the full pipe when its node dies.
    std::thread::spawn(move || {
        let _ = w.write_chunk(&[8; 50]);
    });
    wait_until("the write to be held", 10, || stat(&p, "dw").unwrap().held_writes == 1);
    victim.shutdown();
    wait_until("the dead writer to be dropped", 10, || stat(&p, "dw").unwrap().writers == 0);
    let mut r = PipeReader::open(&nodes[1], "dw").unwrap();
    let got = within(10, move || {
        let mut v = Vec::new();
        r.read_to_end(&mut v).unwrap();
        v
    });
    assert_eq!(got, vec![7; 100], "the buffered data, then EOF; the held write never happened");
}

#[test]
fn a_writer_killed_between_writes_is_noticed_by_its_missing_heartbeat() {
    let nodes = cluster(2, 0x171);
    let _s = PipeServer::start(&nodes[0], "hb", small(100)).unwrap();
    let p = nodes[0].attach().unwrap();
    let mut w = PipeWriter::open(&nodes[1], "hb").unwrap();
    w.write_all(b"x").unwrap();
    // Alive while idle: heartbeats keep the end open past several leases.
    std::thread::sleep(Duration::from_millis(2000));
    assert_eq!(stat(&p, "hb").unwrap().writers, 1);
    nodes[1].shutdown();
    wait_until("the silent writer to expire", 10, || stat(&p, "hb").unwrap().writers == 0);
    std::mem::forget(w); // its node is gone; closing would only time out
}

#[test]
fn bad_requests_are_refused_and_the_server_goes_on() {
    let nodes = cluster(2, 0x181);
    let s = PipeServer::start(&nodes[0], "bad", small(1000)).unwrap();
    let p = nodes[1].attach().unwrap();
    let server = vipc_pipe::lookup(&p, "bad").unwrap();
    assert_eq!(server, s.pid());
    let ask = |m: &mut vipc::Message| {
        p.send(m, server).unwrap();
        m[0]
    };
    assert_eq!(ask(&mut [0xee; 32]), proto::EPROTO, "wrong version");
    assert_eq!(ask(&mut proto::request(99, 0, 0)), proto::ENOSYS);
    assert_eq!(ask(&mut proto::request(proto::OP_OPEN, 0, 7)), proto::EINVAL, "bad mode");
    assert_eq!(ask(&mut proto::request(proto::OP_READ, 12345, 0)), proto::EBADF);
    assert_eq!(ask(&mut proto::request(proto::OP_WRITE, 12345, 0)), proto::EBADF);
    assert_eq!(ask(&mut proto::request(proto::OP_CLOSE, 12345, 0)), proto::EBADF);
    assert_eq!(ask(&mut proto::request(proto::OP_STOP, 0, 1)), proto::ENOSYS, "stop needs the token");
    let mut open = proto::request(proto::OP_OPEN, 0, proto::MODE_READ);
    assert_eq!(ask(&mut open), proto::OK);
    let rid = proto::get(&open, 4);
    // End ids say nothing of the token (the first end's id was the token).
    for guess in (0..64).map(|k| rid.wrapping_sub(k)) {
        assert_eq!(ask(&mut proto::request(proto::OP_STOP, 0, guess)), proto::ENOSYS, "stopped by {guess:#x}");
    }
    // A read without a write segment, a write on a reader end.
    assert_eq!(ask(&mut proto::request(proto::OP_READ, rid, 0)), proto::EINVAL);
    let mut m = proto::request(proto::OP_WRITE, rid, 0);
    p.send_with(&mut m, server, Some(SegmentRef::Read(b"x")), SendOptions::default()).unwrap();
    assert_eq!(m[0], proto::EINVAL);
    // A write larger than the pipe.
    let mut open = proto::request(proto::OP_OPEN, 0, proto::MODE_WRITE);
    assert_eq!(ask(&mut open), proto::OK);
    let wid = proto::get(&open, 4);
    let mut m = proto::request(proto::OP_WRITE, wid, 0);
    p.send_with(&mut m, server, Some(SegmentRef::Read(&[0; 1001])), SendOptions::default()).unwrap();
    assert_eq!(m[0], proto::EMSGSIZE);
    // A read segment without read access (write-only grant) for a write.
    let mut buf = [0u8; 10];
    let mut m = proto::request(proto::OP_WRITE, wid, 0);
    p.send_with(&mut m, server, Some(SegmentRef::Write(&mut buf)), SendOptions::default()).unwrap();
    assert_eq!(m[0], proto::EINVAL);
    // Bad names and missing pipes on the client side.
    assert!(matches!(PipeReader::open(&nodes[1], ""), Err(PipeError::BadName(_))));
    assert!(matches!(PipeReader::open(&nodes[1], &"x".repeat(28)), Err(PipeError::BadName(_))));
    assert!(matches!(PipeWriter::open(&nodes[1], "no-such-pipe"), Err(PipeError::NotFound(_))));
    // Still serving.
    let mut w = PipeWriter::open(&nodes[1], "bad").unwrap();
    w.write_all(b"ok").unwrap();
    let st = stat(&p, "bad").unwrap();
    assert_eq!((st.buffered, st.readers, st.writers, st.capacity), (2, 1, 2, 1000));
}

/// Stops the server of pipe `name` while a read waits, with a writer open
/// or not: the nodes, and what the read got (bytes, or its errno).
fn read_held_at_stop(first: u16, name: &str, writer: bool) -> (Vec<Node>, Result<usize, Option<i32>>) {
    let nodes = cluster(2, first);
    let s = PipeServer::start(&nodes[0], name, small(100)).unwrap();
    let w = writer.then(|| PipeWriter::open(&nodes[1], name).unwrap());
    let mut r = PipeReader::open(&nodes[1], name).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(r.read(&mut [0u8; 10]).map_err(|e| e.raw_os_error()));
    });
    let p = nodes[0].attach().unwrap();
    wait_until("the read to be held", 10, || stat(&p, name).unwrap().held_reads == 1);
    s.stop();
    let got = rx.recv_timeout(Duration::from_secs(5)).unwrap();
    drop(w);
    (nodes, got)
}

#[test]
fn stopping_the_server_releases_held_readers_and_removes_the_name() {
    let (nodes, got) = read_held_at_stop(0x191, "stop", false);
    assert_eq!(got, Ok(0), "EOF: no writer was open");
    assert!(matches!(PipeReader::open(&nodes[0], "stop"), Err(PipeError::NotFound(_))));
}

#[test]
fn a_read_cut_by_the_servers_stop_while_a_writer_is_open_is_an_error_not_eof() {
    let (_nodes, got) = read_held_at_stop(0x1e1, "cut", true);
    assert_eq!(got, Err(Some(i32::from(proto::ESHUTDOWN))));
}

/// Opens an end of pipe `name` in `mode` by the protocol itself (no
/// heartbeat process, unlike the client library): the server and the end id.
fn open_raw(p: &vipc::Process, name: &str, mode: u32) -> (vipc::Pid, u32) {
    let server = vipc_pipe::lookup(p, name).unwrap();
    let mut open = proto::request(proto::OP_OPEN, 0, mode);
    p.send(&mut open, server).unwrap();
    assert_eq!(open[0], proto::OK);
    (server, proto::get(&open, 4))
}

#[test]
fn a_request_given_up_by_its_sender_is_forgotten_by_the_server() {
    let nodes = cluster(2, 0x1a1);
    let cfg = PipeConfig { lease: Duration::from_secs(60), ..small(10) };
    let _s = PipeServer::start(&nodes[0], "given-up", cfg).unwrap();
    let p = nodes[1].attach().unwrap();
    let (server, end) = open_raw(&p, "given-up", proto::MODE_WRITE);
    let write = |data: &[u8]| {
        let mut m = proto::request(proto::OP_WRITE, end, 0);
        p.send_with(&mut m, server, Some(SegmentRef::Read(data)), SendOptions::default()).map(|_| m[0])
    };
    assert_eq!(write(&[1; 10]).unwrap(), proto::OK, "fills the pipe");
    // The next write waits for room; its sender gives up after 100 ms.
    let r = vipc::within(Duration::from_millis(100), || write(&[2; 5]));
    assert!(r.unwrap_err().is_deadline());
    // Its next request tells the server the held write is over: it is dropped, not answered into the new exchange.
    let st = stat(&p, "given-up").unwrap();
    assert_eq!((st.held_writes, st.buffered), (0, 10));
}

#[test]
fn requests_beyond_what_the_server_holds_are_answered_eagain() {
    let nodes = cluster(2, 0x1b1);
    // A long lease: the raw end below has no heartbeat.
    let cfg = PipeConfig { max_ends: 3, lease: Duration::from_secs(60), ..small(100) };
    let s = PipeServer::start(&nodes[0], "crowded", cfg).unwrap();
    let p = nodes[1].attach().unwrap();
    let (server, end) = open_raw(&p, "crowded", proto::MODE_READ);
    // Three readers of the empty pipe wait (one end, three processes); a fourth is refused.
    let read = move |node: &Node| {
        let q = node.attach().unwrap();
        let mut buf = [0u8; 8];
        let mut m = proto::request(proto::OP_READ, end, 0);
        q.send_with(&mut m, server, Some(SegmentRef::Write(&mut buf)), SendOptions::default()).unwrap();
        m[0]
    };
    let waiting: Vec<_> = (0..3)
        .map(|_| {
            let n = nodes[1].clone();
            std::thread::spawn(move || read(&n))
        })
        .collect();
    wait_until("three held reads", 5, || stat(&p, "crowded").unwrap().held_reads == 3);
    assert_eq!(
        within(5, {
            let n = nodes[1].clone();
            move || read(&n)
        }),
        proto::EAGAIN
    );
    assert_eq!(stat(&p, "crowded").unwrap().held_reads, 3, "the refused one is not held");
    // A writer is not refused: its write is served at once, and frees a reader.
    let mut w = PipeWriter::open(&nodes[1], "crowded").unwrap();
    w.write_all(b"hi").unwrap();
    drop(w);
    s.stop();
    let mut got: Vec<u8> = waiting.into_iter().map(|t| t.join().unwrap()).collect();
    got.sort();
    assert_eq!(got, vec![proto::OK, proto::EOF, proto::EOF]);
}

#[test]
fn a_reader_that_gives_up_a_read_keeps_its_end_and_loses_no_bytes() {
    let nodes = cluster(2, 0x1c1);
    let _s = PipeServer::start(&nodes[0], "patient", small(100)).unwrap();
    let mut r = PipeReader::open(&nodes[1], "patient").unwrap();
    let mut buf = [0u8; 16];
    assert!(vipc::within(Duration::from_millis(100), || r.read(&mut buf)).is_err(), "nothing to read yet");
    // The write wakes the read the reader gave up: its answer fails, the bytes stay.
    let mut w = PipeWriter::open(&nodes[1], "patient").unwrap();
    w.write_all(b"abc").unwrap();
    wait_until("the stale read answered", 5, || stat(&nodes[1].attach().unwrap(), "patient").unwrap().held_reads == 0);
    let got = within(5, move || {
        let n = r.read(&mut buf).unwrap();
        buf[..n].to_vec()
    });
    assert_eq!(got, b"abc");
}

/// A READ whose MoveTo fails (here: the server's node loses half its
/// datagrams with T_t of 30 ms and a stream cap of about T_t) is answered
/// EIO, its end closed; the reader used to wait for ever.
#[test]
fn a_read_whose_transfer_fails_is_answered_eio() {
    let nodes = vipc::loopback_cluster(2, 0x171, |k, cfg| {
        cfg.engine.timeout = Duration::from_millis(if k == 0 { 30 } else { 500 });
        if k == 0 {
            cfg.engine.min_stream_rate = u64::MAX;
            cfg.faults = vipc::FaultConfig { loss: 0.5, seed: 7, ..vipc::FaultConfig::default() };
        }
    })
    .unwrap();
    let _s = PipeServer::start(&nodes[0], "lossy", small(4 << 20)).unwrap();
    let mut w = PipeWriter::open(&nodes[0], "lossy").unwrap(); // local: no datagrams
    w.write_all(&pattern(2 << 20, 1)).unwrap();
    let reader_node = nodes[1].clone();
    let r = within(30, move || {
        let mut r = PipeReader::open(&reader_node, "lossy")?;
        let mut buf = vec![0; 2 << 20];
        r.read_chunk(&mut buf)
    });
    match r {
        Err(PipeError::Errno(proto::EIO)) => {}
        Ok(n) => panic!("read {n} bytes through a node losing half its datagrams"),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn settings_a_pipe_cannot_run_with_are_refused() {
    let nodes = cluster(1, 0x1d1);
    let before = nodes[0].stats().processes;
    for (what, cfg) in [
        ("a lease under a millisecond", PipeConfig { lease: Duration::from_micros(500), ..small(10) }),
        // Heartbeats come at most every 10 ms: live ends would expire.
        ("a lease under MIN_LEASE", PipeConfig { lease: vipc_pipe::MIN_LEASE / 2, ..small(10) }),
        ("no ends", PipeConfig { max_ends: 0, ..small(10) }),
        ("no room", small(0)),
        // Leases are checked at ticks: dead ends outlived a tick longer than the lease.
        ("a tick longer than the lease", PipeConfig { tick: Duration::from_secs(3600), ..small(10) }),
        ("a tick under MIN_TICK", PipeConfig { tick: Duration::from_nanos(1), ..small(10) }),
    ] {
        assert!(PipeServer::start(&nodes[0], "bad-cfg", cfg).is_err(), "{what}");
    }
    assert_eq!(nodes[0].stats().processes, before, "nothing left running");
}

/// A second server of one pipe on a node is refused, and leaves nothing
/// running: it took the name over (the first still ran, unreachable).
#[test]
fn a_pipe_is_served_once_per_node() {
    let nodes = cluster(1, 0x1d2);
    let first = PipeServer::start(&nodes[0], "once", small(10)).unwrap();
    let running = nodes[0].stats().processes;
    match PipeServer::start(&nodes[0], "once", small(10)) {
        Err(PipeError::Taken(name, by)) => assert_eq!((name.as_str(), by), ("once", first.pid())),
        other => panic!("{:?}", other.map(|s| s.pid())),
    }
    assert_eq!(nodes[0].stats().processes, running, "the refused server left no process");
    first.stop();
    let again = PipeServer::start(&nodes[0], "once", small(10)).expect("free once the first stopped");
    drop(again);
}
