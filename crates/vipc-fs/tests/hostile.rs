//! Requests and replies no honest peer sends: the file service refuses them
//! with an errno instead of believing their lengths.

mod common;
use common::*;
use vipc::{SegmentRef, SendOptions};
use vipc_fs::proto::{Rep, Req, MAX_EXTRA, OP_RENAME, OP_SYMLINK};

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
