//! Requests and replies no honest peer sends: the file service refuses them
//! with an errno instead of believing their lengths.

mod common;
use common::*;
use vipc::{SegmentRef, SendOptions};
use vipc_fs::proto::{Rep, Req, MAX_EXTRA, OP_RENAME, OP_SYMLINK};

/// An OPEN of file `f`, read-only, by `p` for `owner`, sent raw to `server`.
fn open_f(p: &vipc::Process, server: vipc::Pid, owner: vipc::Pid) -> Rep {
    use vipc_fs::proto::{MAX_PACKET_DATA, OP_OPEN};
    let mut req = Req::new(OP_OPEN);
    req.set_path_len(1);
    req.set_count(libc::O_RDONLY as u32);
    req.set_b(owner.0);
    let mut seg = vec![0u8; MAX_PACKET_DATA];
    seg[0] = b'f';
    let mut m = req.0;
    p.send_with(&mut m, server, Some(SegmentRef::ReadWrite(&mut seg)), SendOptions::default()).unwrap();
    Rep(m)
}

/// A RENAME or SYMLINK whose second path is said to be longer than any
/// client sends is answered ENAMETOOLONG at once: the server does not fetch
/// (nor allocate) the segment it claims. Without the check the worker
/// would MoveFrom the whole megabyte first (dozens of packets).
#[test]
fn a_request_claiming_an_oversized_second_path_is_refused_before_its_segment_is_fetched() {
    let s = setup(false);
    let p = s.client_node.attach().unwrap();
    let server = s.server.as_ref().unwrap().pid();
    let mut seg = vec![b'a'; 1 << 20];
    for op in [OP_RENAME, OP_SYMLINK] {
        let mut req = Req::new(op);
        req.set_path_len(1);
        req.set_a((seg.len() - 1) as u32);
        let before = packets(&s.client_node);
        let mut m = req.0;
        p.send_with(&mut m, server, Some(SegmentRef::ReadWrite(&mut seg)), SendOptions::default()).unwrap();
        assert_eq!(Rep(m).error(), libc::ENAMETOOLONG, "op {op}");
        assert_eq!(packets(&s.client_node) - before, 2, "op {op}: one request, one reply, nothing moved");
    }
    // At the limit the request is served (and the target is refused by the file system, not by size).
    let mut req = Req::new(OP_SYMLINK);
    req.set_path_len(1);
    req.set_a(MAX_EXTRA as u32);
    let mut m = req.0;
    p.send_with(&mut m, server, Some(SegmentRef::ReadWrite(&mut seg)), SendOptions::default()).unwrap();
    assert_ne!(Rep(m).error(), 0, "a 4 KiB run of 'a's is no valid symlink target here");
}

/// A server that answers every READDIR with an empty batch, never EOF, and
/// a cookie one past the last: the client's listing fails at once instead of
/// looping for 2^64 exchanges.
#[test]
fn a_listing_that_never_ends_fails_instead_of_looping() {
    use vipc_fs::proto::{OP_HELLO, OP_READDIR};
    let (server_node, client_node, _) = pair(|_| {});
    let name = export_name("endless");
    let (pid, _t) = server_node
        .spawn(|p| {
            let mut seg = vec![0u8; 1 << 16];
            loop {
                let mut m = [0u8; 32];
                let Ok(info) = p.receive_with_segment(&mut m, &mut seg) else { return };
                let req = Req(m);
                let mut rep = Rep::errno(0);
                if req.op() == OP_READDIR {
                    rep.set_next(req.offset() + 1);
                } else if req.op() != OP_HELLO {
                    rep = Rep::errno(libc::ENOSYS);
                }
                let _ = p.reply(&rep.0, info.from);
            }
        })
        .unwrap();
    server_node.set_pid(&vipc_fs::service_name(&name), pid, vipc::Scope::Any).unwrap();
    let client = vipc_fs::FsClient::connect(&client_node, &name).unwrap();
    let before = packets(&client_node);
    let e = client.readdir("").unwrap_err();
    assert!(e.to_string().contains("no progress"), "{e}");
    assert_eq!(packets(&client_node) - before, 2, "one exchange");
}

/// A client whose owner process takes the reaper's ping and never answers
/// does not stop the reaper: clients that die later are still reaped, and
/// the silent one after three sweeps.
#[test]
fn an_owner_that_never_answers_its_ping_does_not_stop_the_reaper() {
    let s = setup_with(false, short);
    std::fs::write(s.dir.path().join("f"), b"x").unwrap();
    let server = s.server.as_ref().unwrap();
    // A silent owner, and a handle held in its name.
    let (silent, _t) = s
        .client_node
        .spawn(|p| {
            let mut m = [0u8; 32];
            while p.receive(&mut m).is_ok() {}
        })
        .unwrap();
    let p = s.client_node.attach().unwrap();
    assert_eq!(open_f(&p, server.pid(), silent).error(), 0);
    // Twice: a client on a node of its own opens the file, then its node stops.
    let addr = s.server_node.local_addr();
    for host in [3, 4] {
        let n = node(host, free_addrs(1)[0], vec![addr], short);
        let c = vipc_fs::FsClient::connect(&n, &s.name).unwrap();
        c.open("f", libc::O_RDONLY, 0).unwrap();
        assert_eq!(server.open_handles(), 2);
        std::mem::forget(c); // dies without closing (dropping it would close its files)
        n.shutdown();
        let t = std::time::Instant::now();
        while server.open_handles() > 1 {
            assert!(t.elapsed() < std::time::Duration::from_secs(15), "client {host} never reaped");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    // The silent owner's file goes too, after three pings unanswered (it
    // was asserted kept here, which it is only until then: under load the
    // loop above outlasted three sweeps).
    let t = std::time::Instant::now();
    while server.open_handles() > 0 {
        assert!(t.elapsed() < std::time::Duration::from_secs(15), "the silent owner's file never released");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A READ at an offset no file has, right after reads that filled the
/// handle's read-ahead: EINVAL, and the server goes on serving. (The
/// read-ahead's range check summed the offset and the count; at u64::MAX
/// it wrapped, and the copy out of the read-ahead buffer panicked the
/// thread serving the request — the export's receiver, for a read this small.)
#[test]
fn a_read_at_the_largest_offset_is_refused_and_the_server_goes_on() {
    use vipc_fs::proto::{MAX_PACKET_DATA, OP_READ};
    let s = setup(false);
    std::fs::write(s.dir.path().join("f"), b"abcdef").unwrap();
    let server = s.server.as_ref().unwrap().pid();
    let p = s.client_node.attach().unwrap();
    let mut seg = vec![0u8; MAX_PACKET_DATA];
    let call = |req: Req, seg: &mut [u8]| {
        let mut m = req.0;
        p.send_with(&mut m, server, Some(SegmentRef::ReadWrite(seg)), SendOptions::default()).unwrap();
        Rep(m)
    };
    let rep = open_f(&p, server, p.pid());
    assert_eq!(rep.error(), 0);
    let read = |offset: u64| {
        let mut r = Req::new(OP_READ);
        r.set_handle(rep.value());
        r.set_offset(offset);
        r.set_count(1);
        r
    };
    for (offset, byte) in [(0, b'a'), (1, b'b')] {
        let rep = call(read(offset), &mut seg);
        assert_eq!((rep.error(), rep.count(), seg[0]), (0, 1, byte), "sequential read at {offset}");
    }
    for offset in [u64::MAX, i64::MAX as u64] {
        assert_eq!(call(read(offset), &mut seg).error(), libc::EINVAL, "a read at {offset}");
    }
    let rep = call(read(2), &mut seg);
    assert_eq!((rep.error(), rep.count(), seg[0]), (0, 1, b'c'), "the server still serves");
}

/// A remote process that gets a message from a process of the server's node
/// (as a client gets the reaper's ping) forwards it to the server as
/// OP_STOP: the stop looks local by its sender, but it was forwarded, so it
/// is refused and the server goes on serving.
#[test]
fn a_stop_forwarded_from_another_node_is_refused() {
    use vipc_fs::proto::OP_STOP;
    let s = setup(false);
    std::fs::write(s.dir.path().join("f"), b"still here").unwrap();
    let server = s.server.as_ref().unwrap().pid();
    let (remote, _t) = s
        .client_node
        .spawn(move |p| {
            let mut m = [0u8; 32];
            let from = p.receive(&mut m).unwrap();
            p.forward(&Req::new(OP_STOP).0, from, server).unwrap();
        })
        .unwrap();
    let local = s.server_node.attach().unwrap();
    let mut m = [0u8; 32];
    local.send(&mut m, remote).unwrap();
    assert_eq!(Rep(m).error(), libc::EPERM, "answered by the server, refused");
    let c = vipc_fs::FsClient::connect(&s.client_node, &s.name).unwrap();
    let (h, _) = c.open("f", libc::O_RDONLY, 0).unwrap();
    let mut buf = [0u8; 10];
    assert_eq!(c.read(h, 0, &mut buf).unwrap(), 10, "the server still serves");
    assert_eq!(&buf, b"still here");
}

/// An OPEN that names an owner process on another host than its sender's:
/// EINVAL (it would charge the handle to that host's share, and have the
/// reaper ping a process the client does not own).
#[test]
fn an_open_naming_an_owner_on_another_host_is_refused() {
    let s = setup(false);
    std::fs::write(s.dir.path().join("f"), b"x").unwrap();
    let server = s.server.as_ref().unwrap();
    let p = s.client_node.attach().unwrap();
    let elsewhere = s.server_node.attach().unwrap().pid();
    for (owner, want) in [(elsewhere, libc::EINVAL), (p.pid(), 0)] {
        assert_eq!(open_f(&p, server.pid(), owner).error(), want, "owner {owner}");
    }
    assert_eq!(server.open_handles(), 1);
}

/// A handle is used only from its owner's host: handle ids are guessable,
/// and a process on another host could read, write or close a client's
/// file. Such a request is EBADF and leaves the handle alone.
#[test]
fn a_handle_is_refused_to_another_host() {
    use vipc_fs::proto::{OP_CLOSE, OP_FSTAT};
    let s = setup(false);
    std::fs::write(s.dir.path().join("f"), b"x").unwrap();
    let server = s.server.as_ref().unwrap();
    let p = s.client_node.attach().unwrap();
    let handle = open_f(&p, server.pid(), p.pid()).value();
    let stranger = s.server_node.attach().unwrap();
    for op in [OP_FSTAT, OP_CLOSE] {
        let mut req = Req::new(op);
        req.set_handle(handle);
        let mut m = req.0;
        stranger.send(&mut m, server.pid()).unwrap();
        assert_eq!(Rep(m).error(), libc::EBADF, "op {op} from another host");
    }
    assert_eq!(server.open_handles(), 1, "still open");
    let mut req = Req::new(OP_CLOSE);
    req.set_handle(handle);
    let mut m = req.0;
    p.send(&mut m, server.pid()).unwrap();
    assert_eq!(Rep(m).error(), 0, "its owner closes it");
    assert_eq!(server.open_handles(), 0);
}
