//! Many clients at once, a server that dies and comes back, a client that
//! dies in the middle of a write.

mod common;
use common::*;
use std::fs;
use std::sync::Arc;
use std::time::{Duration, Instant};
use vipc_fs::{FsClient, FsError};

#[test]
fn many_clients_on_many_nodes_are_served_at_once() {
    let addrs = free_addrs(4);
    let server_node = node(1, addrs[0], addrs.clone(), |_| {});
    let dir = tempfile::tempdir().unwrap();
    let name = export_name("many");
    let server = serve(&server_node, &name, dir.path(), false);
    let shared = pattern(256 << 10, 77);
    fs::write(dir.path().join("shared"), &shared).unwrap();
    let shared = Arc::new(shared);
    let client_nodes: Vec<_> = (1..4).map(|i| node(1 + i as u16, addrs[i], addrs.clone(), |_| {})).collect();
    let mut threads = Vec::new();
    for (n, cn) in client_nodes.iter().enumerate() {
        let client = Arc::new(FsClient::connect(cn, &name).unwrap());
        for t in 0..4 {
            let (client, shared) = (client.clone(), shared.clone());
            threads.push(std::thread::spawn(move || {
                let me = format!("f{n}-{t}");
                let mine = pattern(100_000 + n * 1000 + t, (n * 4 + t) as u8);
                for round in 0..5 {
                    let (h, _) = client.open(&me, libc::O_CREAT | libc::O_RDWR | libc::O_TRUNC, 0o644).unwrap();
                    assert_eq!(client.write(h, 0, &mine).unwrap(), mine.len());
                    let mut back = vec![0u8; mine.len()];
                    assert_eq!(client.read(h, 0, &mut back).unwrap(), mine.len());
                    assert!(back == mine, "{me} round {round}");
                    client.close(h).unwrap();
                    let (h, _) = client.open("shared", libc::O_RDONLY, 0).unwrap();
                    let mut page = vec![0u8; 4096];
                    for k in 0..16 {
                        let off = ((k * 7919 + t * 13) % 60) * 4096;
                        assert_eq!(client.read(h, off as u64, &mut page).unwrap(), 4096);
                        assert!(page[..] == shared[off..off + 4096]);
                    }
                    client.close(h).unwrap();
                    assert!(client.readdir("").unwrap().iter().any(|e| e.name == me));
                }
            }));
        }
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(server.open_handles(), 0);
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 13);
}

#[test]
fn a_dead_server_fails_calls_within_the_timeout_and_a_restarted_one_is_used() {
    let (server_node, client_node, addrs) = pair(short);
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("f"), pattern(100_000, 4)).unwrap();
    let name = export_name("restart");
    let server = serve(&server_node, &name, dir.path(), false);
    let c = FsClient::connect(&client_node, &name).unwrap();
    let (h, _) = c.open("f", libc::O_RDWR, 0).unwrap();
    let mut buf = vec![0u8; 4096];
    assert_eq!(c.read(h, 0, &mut buf).unwrap(), 4096);

    // The server's node dies: calls fail with EIO within T_t (300 ms here), never hang.
    drop(server);
    server_node.shutdown();
    drop(server_node);
    for _ in 0..3 {
        let t = Instant::now();
        let e = c.read(h, 4096, &mut buf).unwrap_err();
        let took = t.elapsed();
        assert_eq!(e.errno(), libc::EIO, "{e}");
        assert!(took < Duration::from_millis(900), "failed after {took:?}");
        let t = Instant::now();
        assert_eq!(c.lookup("f").unwrap_err().errno(), libc::EIO);
        assert!(t.elapsed() < Duration::from_millis(900));
    }

    // The node restarts (same address and host id) with a new server: the
    // next calls work, and the handle opened before is reopened by path.
    let server_node = node(1, addrs[0], addrs.clone(), short);
    let server = serve(&server_node, &name, dir.path(), false);
    let t = Instant::now();
    let mut ok = false;
    while t.elapsed() < Duration::from_secs(3) {
        if c.lookup("f").is_ok() {
            ok = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(ok, "the restarted server was not found");
    assert_eq!(c.read(h, 4096, &mut buf).unwrap(), 4096);
    assert_eq!(buf, pattern(100_000, 4)[4096..8192]);
    c.write(h, 0, b"after").unwrap();
    assert_eq!(server.open_handles(), 1);
    c.close(h).unwrap();
    assert_eq!(server.open_handles(), 0);
    assert_eq!(&fs::read(dir.path().join("f")).unwrap()[..5], b"after");

    // A handle whose file vanished while the server was down becomes ESTALE.
    let (h, _) = c.open("f", libc::O_RDONLY, 0).unwrap();
    server.stop();
    fs::remove_file(dir.path().join("f")).unwrap();
    let restarted = serve(&server_node, &name, dir.path(), false);
    let r = c.read(h, 0, &mut buf);
    assert!(matches!(r, Err(FsError::Errno(libc::ESTALE))), "{r:?}");

    // So does one whose name now stands for another file (renamed over it):
    // reopened by path, it would have read the other file's bytes.
    fs::write(dir.path().join("g"), b"first").unwrap();
    let (h, _) = c.open("g", libc::O_RDONLY, 0).unwrap();
    restarted.stop();
    fs::write(dir.path().join("g.new"), b"second").unwrap();
    fs::rename(dir.path().join("g.new"), dir.path().join("g")).unwrap();
    let server = serve(&server_node, &name, dir.path(), false);
    let r = c.read(h, 0, &mut buf);
    assert!(matches!(r, Err(FsError::Errno(libc::ESTALE))), "{r:?}");
    assert_eq!(server.open_handles(), 0, "the file reopened in vain is closed");
}

#[test]
fn a_client_killed_in_the_middle_of_a_write_leaves_no_state_on_the_server() {
    let (server_node, client_node, _) = pair(short);
    let dir = tempfile::tempdir().unwrap();
    let name = export_name("kill");
    let server = serve(&server_node, &name, dir.path(), false);
    let mut c = FsClient::connect(&client_node, &name).unwrap();
    c.set_unit(64 << 10);
    let (idle, _) = c.open("idle", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    let (h, _) = c.open("big", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    assert_eq!(server.open_handles(), 2);
    let c = Arc::new(c);
    let writer = {
        let c = c.clone();
        std::thread::spawn(move || {
            let data = vec![7u8; 64 << 20];
            c.write(h, 0, &data)
        })
    };
    // Kill the client's node once the server is receiving the data.
    let start = server_node.stats().bytes_in;
    let t = Instant::now();
    while server_node.stats().bytes_in < start + (1 << 20) && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_micros(200));
    }
    let got = server_node.stats().bytes_in - start;
    assert!(got >= 1 << 20, "the write never got going: {got} bytes in after {:?}", t.elapsed());
    client_node.shutdown();
    let r = writer.join().unwrap();
    assert!(matches!(r, Err(FsError::Transport(vipc::Error::NodeStopped))), "not ended by the kill: {r:?}");
    let _ = idle;
    // The server notices (its MoveFrom fails, or the reaper's ping finds no
    // owner) and releases both handles.
    let t = Instant::now();
    while server.open_handles() > 0 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(server.open_handles(), 0, "handles still held after {:?}", t.elapsed());
    assert!(fs::metadata(dir.path().join("big")).unwrap().len() < 64 << 20);
}

#[test]
fn a_client_that_vanishes_between_calls_is_reaped() {
    let (server_node, client_node, _) = pair(short);
    let dir = tempfile::tempdir().unwrap();
    let name = export_name("reap");
    let server = serve(&server_node, &name, dir.path(), false);
    let c = FsClient::connect(&client_node, &name).unwrap();
    let (_h, _) = c.open("x", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    // A live, idle client keeps its handle across sweeps.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(server.open_handles(), 1);
    client_node.shutdown();
    let t = Instant::now();
    while server.open_handles() > 0 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(server.open_handles(), 0);
    drop(c);
}

/// Many clients on hosts that all die at once: their pings fail only after
/// T_t each, so one at a time would release them one T_t apart (the soak
/// test's 90 killed `vipc cp` clients: 110 s); pinged together they go in a
/// couple of sweeps.
#[test]
fn many_dead_clients_are_reaped_together() {
    const CLIENTS: usize = 16;
    let addrs = free_addrs(CLIENTS + 1);
    let server_node = node(1, addrs[0], addrs.clone(), short);
    let dir = tempfile::tempdir().unwrap();
    let name = export_name("reapmany");
    let server = serve(&server_node, &name, dir.path(), false);
    let mut clients = Vec::new();
    for (i, addr) in addrs[1..].iter().enumerate() {
        let client_node = node(2 + i as u16, *addr, vec![addrs[0]], short);
        let c = FsClient::connect(&client_node, &name).unwrap();
        c.open(&format!("f{i}"), libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
        clients.push((client_node, c));
    }
    assert_eq!(server.open_handles(), CLIENTS);
    for (client_node, _) in &clients {
        client_node.shutdown();
    }
    // Idle for a sweep (0.5 s), then pinged at the next one; each ping fails
    // after T_t (0.3 s). One at a time took 16 × 0.3 s on top of that.
    let t = Instant::now();
    while server.open_handles() > 0 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(server.open_handles(), 0, "still held after {:?}", t.elapsed());
    assert!(t.elapsed() < Duration::from_millis(3000), "released one by one: {:?}", t.elapsed());
    drop(clients);
}

/// With a T_t longer than the reaper's ping limit, a ping to a dead host
/// never fails with Timeout: pings left unanswered sweep after sweep do it.
#[test]
fn a_vanished_client_is_reaped_even_when_its_timeout_outlasts_the_ping() {
    let (server_node, client_node, _) = pair(|c| c.engine.timeout = Duration::from_secs(30));
    let dir = tempfile::tempdir().unwrap();
    let name = export_name("reaplong");
    let server = serve(&server_node, &name, dir.path(), false);
    let c = FsClient::connect(&client_node, &name).unwrap();
    c.open("x", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    client_node.shutdown();
    let t = Instant::now();
    while server.open_handles() > 0 && t.elapsed() < Duration::from_secs(8) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(server.open_handles(), 0, "still held after {:?}", t.elapsed());
    drop(c);
}

/// The server's node restarts (same host id and address) with its exports
/// started in the other order, so each file server has the pid the other
/// had: the client finds its own again (by name) instead of reading,
/// listing and writing the other export's files.
#[test]
fn a_client_follows_its_export_when_a_restart_gives_its_pid_to_another() {
    let (server_node, client_node, addrs) = pair(short);
    let (mine, other) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    fs::write(mine.path().join("which"), b"mine").unwrap();
    fs::write(other.path().join("which"), b"other").unwrap();
    let (a, b) = (export_name("mine"), export_name("other"));
    let servers = [serve(&server_node, &a, mine.path(), false), serve(&server_node, &b, other.path(), false)];
    let c = FsClient::connect(&client_node, &a).unwrap();
    let (h, _) = c.open("which", libc::O_RDONLY, 0).unwrap();
    let read = |c: &FsClient| {
        let mut buf = [0u8; 16];
        let n = c.read(h, 0, &mut buf).unwrap();
        buf[..n].to_vec()
    };
    assert_eq!(read(&c), b"mine");
    server_node.shutdown();
    drop(servers);
    drop(server_node);
    let again = node_again(1, addrs[0], addrs.clone(), short);
    let _servers = [serve(&again, &b, other.path(), false), serve(&again, &a, mine.path(), false)];
    // A path request, a handle of the old instance, and a change: all in "mine".
    assert_eq!(c.lookup("which").unwrap().size, 4);
    assert_eq!(read(&c), b"mine");
    c.mkdir("made", 0o755).unwrap();
    assert!(mine.path().join("made").is_dir() && !other.path().join("made").exists());
}

/// A server whose reaper does not sweep during a test.
fn serve_unswept(node: &vipc::Node, name: &str, dir: &std::path::Path) -> vipc_fs::FileServer {
    let cfg = vipc_fs::ExportConfig { name: name.to_string(), dir: dir.to_path_buf(), read_only: false, workers: 2 };
    let tuning = vipc_fs::Tuning { sweep: Duration::from_secs(600), ..vipc_fs::Tuning::default() };
    vipc_fs::FileServer::start_tuned(node, cfg, tuning).unwrap()
}

/// A client node restarted with the same host id gives its processes other
/// pids than its previous life's: the reaper's pings to the dead client's
/// owner find no such process, and what it held is released; the new
/// client's files are kept. (Were the owner's pid given again, its answers
/// would keep them for ever; the new client's greeting releases what an
/// owner of its pid held, see the server's handle table tests.)
#[test]
fn a_client_restarted_with_the_same_host_id_does_not_inherit_its_predecessors_files() {
    let (server_node, client_node, addrs) = pair(short);
    let dir = tempfile::tempdir().unwrap();
    let name = export_name("reborn");
    let cfg = vipc_fs::ExportConfig { name: name.clone(), dir: dir.path().to_path_buf(), read_only: false, workers: 2 };
    let tuning = vipc_fs::Tuning { sweep: Duration::from_millis(100), ..vipc_fs::Tuning::default() };
    let server = vipc_fs::FileServer::start_tuned(&server_node, cfg, tuning).unwrap();
    let c = FsClient::connect(&client_node, &name).unwrap();
    for f in ["a", "b"] {
        c.open(f, libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    }
    assert_eq!(server.open_handles(), 2);
    client_node.shutdown();
    drop(c);
    drop(client_node); // frees its address
    assert_eq!(server.open_handles(), 2, "the dead client could not close them");
    let again = node_again(2, addrs[1], addrs.clone(), short);
    let c = FsClient::connect(&again, &name).unwrap();
    let (h, _) = c.open("a", libc::O_RDWR, 0).unwrap();
    c.write(h, 0, b"mine").unwrap();
    let t = Instant::now();
    while server.open_handles() > 1 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(server.open_handles(), 1, "the dead client's released, the new client's own kept");
}

/// A close that cannot reach the server (a partition longer than T_t)
/// fails, and the server's handle is closed at the client's next close: the
/// reaper would keep it, since the client's owner answers again.
#[test]
fn a_close_cut_off_from_the_server_is_done_at_the_next_close() {
    let addrs = free_addrs(2);
    let relay = Relay::new(addrs[0]);
    let server_node = node(1, addrs[0], vec![relay.server_side], short);
    let client_node = node(2, addrs[1], vec![relay.client_side], short);
    let dir = tempfile::tempdir().unwrap();
    let name = export_name("cutclose");
    let server = serve_unswept(&server_node, &name, dir.path());
    let c = FsClient::connect(&client_node, &name).unwrap();
    let (h, _) = c.open("a", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    relay.cut(true);
    let r = c.close(h);
    assert!(matches!(r, Err(FsError::Transport(_))), "{r:?}");
    assert_eq!(c.close(h).unwrap_err().errno(), libc::EBADF, "gone on the client all the same");
    relay.cut(false);
    assert_eq!(server.open_handles(), 1);
    let (h, _) = c.open("b", libc::O_CREAT | libc::O_RDWR, 0o644).unwrap();
    c.close(h).unwrap();
    assert_eq!(server.open_handles(), 0);
}

/// Threads that find one handle stale at once (the server restarted) reopen
/// it once between them: no surplus handle is left open on the server.
#[test]
fn threads_reopening_one_handle_together_leave_one_open() {
    let s = setup_with(false, short);
    fs::write(s.dir.path().join("f"), pattern(64 << 10, 3)).unwrap();
    let c = Arc::new(s.client);
    let (h, _) = c.open("f", libc::O_RDONLY, 0).unwrap();
    s.server.unwrap().stop();
    let server = serve(&s.server_node, &s.name, s.dir.path(), false);
    let t = Instant::now();
    while c.lookup("f").is_err() && t.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let start = Arc::new(std::sync::Barrier::new(8));
    let readers: Vec<_> = (0..8)
        .map(|k| {
            let (c, start) = (c.clone(), start.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 4096];
                start.wait();
                assert_eq!(c.read(h, k * 4096, &mut buf).unwrap(), 4096);
                assert_eq!(buf, pattern(64 << 10, 3)[k as usize * 4096..][..4096]);
            })
        })
        .collect();
    for r in readers {
        r.join().unwrap();
    }
    assert_eq!(server.open_handles(), 1);
}

#[test]
fn dropping_a_client_of_a_dead_server_is_quick_whatever_it_holds_open() {
    let (server_node, client_node, _) = pair(short);
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("f"), b"x").unwrap();
    let name = export_name("dropdead");
    let server = serve(&server_node, &name, dir.path(), false);
    let c = FsClient::connect(&client_node, &name).unwrap();
    for _ in 0..20 {
        c.open("f", libc::O_RDONLY, 0).unwrap();
    }
    drop(server);
    server_node.shutdown();
    let t = Instant::now();
    drop(c);
    // One close fails after T_t (300 ms here); the other 19 are not tried.
    assert!(t.elapsed() < Duration::from_secs(3), "took {:?}", t.elapsed());
}

/// A second server under a live one's name is refused (it took the name
/// over, leaving the first unreachable); once the first stops, a new one
/// takes the name and clients find it.
#[test]
fn a_name_goes_to_a_new_server_only_once_the_old_one_stopped() {
    let (server_node, client_node, _) = pair(|_| {});
    let (old_dir, new_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::write(new_dir.path().join("f"), b"new").unwrap();
    let name = export_name("twice");
    let old = serve(&server_node, &name, old_dir.path(), false);
    let cfg = || vipc_fs::ExportConfig { name: name.clone(), dir: new_dir.path().into(), read_only: false, workers: 2 };
    assert!(vipc_fs::FileServer::start(&server_node, cfg()).is_err(), "refused while the old one serves");
    let c = vipc_fs::FsClient::connect(&client_node, &name).expect("the old server still answers");
    assert!(c.lookup("f").is_err(), "and it is the old one");
    drop(old);
    let _new = vipc_fs::FileServer::start(&server_node, cfg()).expect("free once the old one stopped");
    let c = vipc_fs::FsClient::connect(&client_node, &name).expect("the new server answers");
    assert_eq!(c.lookup("f").unwrap().size, 3, "and it is the new one");
}

/// Requests in flight when the server's node restarts (same host id and
/// address, within T_t): the new node refuses their retransmissions, since
/// its previous life may have carried them out. The client sends a lookup
/// and a write again to the new server (the write through its handle
/// reopened); a mkdir fails (EIO), for done twice it would report EEXIST for
/// a directory it made, and so does a write that appends (done twice it
/// would append the data twice).
#[test]
fn requests_cut_off_by_a_server_restart_are_sent_again_only_if_harmless() {
    let tweak = |c: &mut vipc::NodeConfig| {
        c.engine.retransmit = Duration::from_millis(20);
        c.engine.timeout = Duration::from_secs(3);
    };
    let addrs = free_addrs(2);
    let relay = Relay::new(addrs[0]);
    let server_node = node(1, addrs[0], vec![relay.server_side], tweak);
    let client_node = node(2, addrs[1], vec![relay.client_side], tweak);
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("a"), b"here").unwrap();
    let name = export_name("restartmid");
    let server = serve(&server_node, &name, dir.path(), false);
    let c = Arc::new(FsClient::connect(&client_node, &name).unwrap());
    let (w, _) = c.open("a", libc::O_WRONLY, 0).unwrap();
    let (log, _) = c.open("log", libc::O_CREAT | libc::O_WRONLY | libc::O_APPEND, 0o644).unwrap();
    relay.cut(true);
    let (c1, c2, c3, c4) = (c.clone(), c.clone(), c.clone(), c.clone());
    let lookup = std::thread::spawn(move || c1.lookup("a"));
    let mkdir = std::thread::spawn(move || c2.mkdir("d", 0o755));
    let write = std::thread::spawn(move || c3.write(w, 0, b"HE"));
    let append = std::thread::spawn(move || c4.write(log, 0, b"line\n"));
    std::thread::sleep(Duration::from_millis(100)); // both sent, and sent again
    server.stop();
    server_node.shutdown();
    drop(server_node);
    let again = node_again(1, addrs[0], vec![relay.server_side], tweak);
    let _server = serve(&again, &name, dir.path(), false);
    relay.cut(false);
    assert_eq!(lookup.join().unwrap().unwrap().size, 4, "the lookup was sent again, to the new server");
    assert_eq!(write.join().unwrap().unwrap(), 2, "the write was sent again, through the handle reopened");
    // Answered before its data are written (write-behind): FSYNC waits for them.
    c.fsync(w, true).unwrap();
    assert_eq!(fs::read(dir.path().join("a")).unwrap(), b"HEre");
    for (what, r) in [("mkdir", mkdir.join().unwrap().map(|_| 0)), ("append", append.join().unwrap())] {
        let e = r.unwrap_err();
        assert_eq!(e.errno(), libc::EIO, "{what}: {e}");
        assert!(e.to_string().contains("restarted"), "{what}: {e}");
    }
    assert!(!dir.path().join("d").exists(), "nothing ran it: its first transmission was cut off");
    assert_eq!(fs::read(dir.path().join("log")).unwrap(), b"", "not appended");
    assert!(again.stats().restart_refusals >= 4, "every retransmission was refused");
    // Before the new server goes (the drops below): a handle left open waits T_t at the client's drop.
    c.close(w).unwrap();
    c.close(log).unwrap();
}

/// A server that went away mid-call and comes back a moment later (a
/// restarted node serves its export again only after a short start-up): the
/// client looks for it again for a while instead of failing at once with
/// "no file server registered" (cp, cat and mount writes failed across
/// restarts in a soak).
#[test]
fn a_call_finds_a_server_that_comes_back_a_moment_after_it_went() {
    let (server_node, client_node, _) = pair(short);
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("f"), pattern(100_000, 5)).unwrap();
    let name = export_name("comeback");
    let server = serve(&server_node, &name, dir.path(), false);
    let c = FsClient::connect(&client_node, &name).unwrap();
    let (h, _) = c.open("f", libc::O_RDONLY, 0).unwrap();
    let mut buf = vec![0u8; 4096];
    assert_eq!(c.read(h, 0, &mut buf).unwrap(), 4096);
    server.stop();
    let back = {
        let (node, name, dir) = (server_node.clone(), name.clone(), dir.path().to_path_buf());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(700));
            serve(&node, &name, &dir, false)
        })
    };
    let t = Instant::now();
    assert_eq!(c.read(h, 4096, &mut buf).unwrap(), 4096, "the new server answers, the handle reopened");
    assert_eq!(buf, pattern(100_000, 5)[4096..8192]);
    assert!(t.elapsed() >= Duration::from_millis(600), "answered before the new server existed");
    back.join().unwrap().stop();
}
