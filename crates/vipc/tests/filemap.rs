//! MoveTo from a file (`Process::move_to_from_file`): the bytes read from
//! the file as they are sent arrive as a plain MoveTo's would, and bytes
//! past the end of the file arrive as zeros.

mod common;

use common::{cluster, cluster_with, pattern};
use std::io::Write;
use vipc::{Node, SegmentRef, SendOptions};

const FILE_LEN: usize = 100_000;
/// Unaligned, so the window starts inside a page.
const AT: u64 = 5;
/// Past the end of the file by several datagrams.
const MOVED: usize = 300_000;

/// Has a server on `server_node` MoveTo `MOVED` bytes of `file` from `AT`
/// into a segment of a client on `client_node`; returns what arrived.
fn moved_from_file(server_node: &Node, client_node: &Node, file: std::fs::File) -> Vec<u8> {
    let (server, t) = server_node
        .spawn(move |p| {
            let mut m = [0u8; 32];
            let info = p.receive_with_segment(&mut m, &mut []).unwrap();
            p.move_to_from_file(info.from, 0, &file, AT, MOVED as u32).unwrap();
            p.reply(&m, info.from).unwrap();
        })
        .unwrap();
    let c = client_node.attach().unwrap();
    let mut buf = vec![0xEEu8; MOVED];
    let mut m = [0u8; 32];
    c.send_with(&mut m, server, Some(SegmentRef::ReadWrite(&mut buf)), SendOptions::default()).unwrap();
    t.join().unwrap();
    buf
}

fn test_file() -> (tempfile::NamedTempFile, Vec<u8>) {
    let data = pattern(FILE_LEN, 3);
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(&data).unwrap();
    (f, data)
}

fn check(got: &[u8], data: &[u8]) {
    let tail = FILE_LEN - AT as usize;
    assert!(got[..tail] == data[AT as usize..], "the file's bytes arrive intact");
    assert!(got[tail..].iter().all(|&b| b == 0), "bytes past the end of the file arrive as zeros");
}

#[test]
fn a_move_from_a_file_sends_its_bytes_and_zeros_past_its_end() {
    let nodes = cluster(2);
    let (f, data) = test_file();
    // Remote: read run by run as the datagrams go, short past the end.
    check(&moved_from_file(&nodes[0], &nodes[1], f.reopen().unwrap()), &data);
    // Local: copied through a buffer.
    check(&moved_from_file(&nodes[0], &nodes[0], f.reopen().unwrap()), &data);
}

#[test]
fn a_move_from_a_file_on_a_keyed_node_is_copied_and_arrives_alike() {
    let key = vipc::AuthKey::from_bytes([9; 32]);
    let nodes = cluster_with(2, 40, |_, c| c.key = Some(key.clone()));
    let (f, data) = test_file();
    check(&moved_from_file(&nodes[0], &nodes[1], f.reopen().unwrap()), &data);
}

#[test]
fn a_move_from_a_file_it_cannot_read_fails_with_an_io_error() {
    let nodes = cluster(2);
    let (f, _) = test_file();
    let write_only = std::fs::OpenOptions::new().write(true).open(f.path()).unwrap();
    let (server, t) = nodes[0]
        .spawn(move |p| {
            let mut m = [0u8; 32];
            let info = p.receive_with_segment(&mut m, &mut []).unwrap();
            let unreadable = p.move_to_from_file(info.from, 0, &write_only, 0, 1000);
            let past_any_offset = p.move_to_from_file(info.from, 0, &f.reopen().unwrap(), u64::MAX - 10, 1000);
            p.reply(&m, info.from).unwrap();
            (unreadable, past_any_offset)
        })
        .unwrap();
    let c = nodes[1].attach().unwrap();
    let mut buf = vec![0u8; 1000];
    let mut m = [0u8; 32];
    c.send_with(&mut m, server, Some(SegmentRef::ReadWrite(&mut buf)), SendOptions::default()).unwrap();
    let (unreadable, past) = t.join().unwrap();
    assert!(matches!(unreadable, Err(vipc::Error::Io(_))), "{unreadable:?}");
    assert!(matches!(past, Err(vipc::Error::Io(_))), "{past:?}");
}

/// The peak resident memory of this process so far, in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb = status.lines().find_map(|l| l.strip_prefix("VmHWM:")).unwrap();
    kb.trim().trim_end_matches("kB").trim().parse::<u64>().unwrap() * 1024
}

/// A move the engine refuses (its receiver awaits no reply from the mover)
/// fails before the file is read: a keyed node and a local receiver, whose
/// bytes are read into memory first, used to read all 1 GiB of it.
#[test]
fn a_refused_move_from_a_file_reads_nothing() {
    let key = vipc::AuthKey::from_bytes([9; 32]);
    let nodes = cluster_with(2, 60, |_, c| c.key = Some(key.clone()));
    let big = tempfile::NamedTempFile::new().unwrap();
    big.as_file().set_len(1 << 30).unwrap();
    let mover = nodes[0].attach().unwrap();
    for stranger in [nodes[1].attach().unwrap(), nodes[0].attach().unwrap()] {
        let before = peak_rss();
        let r = mover.move_to_from_file(stranger.pid(), 0, big.as_file(), 0, 1 << 30);
        assert!(r.is_err(), "a move to {} that awaits nothing", stranger.pid());
        let grown = peak_rss().saturating_sub(before);
        assert!(grown < 256 << 20, "{} MiB read for a refused move", grown >> 20);
    }
}
