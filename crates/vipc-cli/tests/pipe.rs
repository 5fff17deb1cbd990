//! `vipc pipe` from the shell: a pipe server, a writer and a reader as three
//! separate OS processes (each its own node) on loopback, and `vipc node --pipe`.

mod common;

use common::*;
use std::io::Write;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

fn spawn(args: &[&str]) -> Child {
    Command::new(VIPC)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn vipc")
}

/// Runs `vipc pipe write NAME` with `data` on its standard input.
fn write(name: &str, g: &str, data: &[u8]) -> Output {
    let mut w = spawn(&["pipe", "write", name, "--group", g]);
    let mut stdin = w.stdin.take().unwrap();
    let data = data.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = stdin.write_all(&data);
    });
    let o = finish(w, 60);
    feeder.join().unwrap();
    o
}

#[test]
fn shell_writer_and_reader_on_three_nodes() {
    let g = random_group();
    let _server = start(&["pipe", "serve", "shellpipe", "--capacity", "65536", "--group", &g], "vipc pipe: serving");
    // Reader first: it waits for the writer rather than seeing end of file.
    let reader = spawn(&["pipe", "read", "shellpipe", "--group", &g]);
    // Drain the reader's stdout meanwhile (a full OS pipe would stop it, and then the writer).
    let reader = std::thread::spawn(move || finish(reader, 60));
    std::thread::sleep(Duration::from_millis(800));
    let data: Vec<u8> = (0..40_000u32).flat_map(|i| format!("line {i}\n").into_bytes()).collect();
    assert!(data.len() > 4 * 65536, "more than the pipe holds");
    let wo = write("shellpipe", &g, &data);
    assert!(wo.status.success(), "writer failed: {}", String::from_utf8_lossy(&wo.stderr));
    let ro = reader.join().unwrap();
    assert!(ro.status.success(), "reader failed: {}", String::from_utf8_lossy(&ro.stderr));
    assert_eq!(ro.stdout.len(), data.len());
    assert!(ro.stdout == data, "bytes differ");

    // Writer first: its data wait in the pipe for the next reader.
    let wo = write("shellpipe", &g, b"hi\n");
    assert!(wo.status.success(), "{}", String::from_utf8_lossy(&wo.stderr));
    let ro = finish(spawn(&["pipe", "read", "shellpipe", "--group", &g]), 60);
    assert_eq!(String::from_utf8_lossy(&ro.stdout), "hi\n");

    let so = finish(spawn(&["pipe", "stat", "shellpipe", "--group", &g]), 60);
    let text = String::from_utf8_lossy(&so.stdout);
    assert!(text.contains("0 of 65536 bytes buffered, 0 reader(s), 0 writer(s)"), "{text}");
}

#[test]
fn node_hosts_pipes_and_errors_are_one_line() {
    let g = random_group();
    let _node = start(&["node", "--pipe", "np1", "--pipe", "np2", "--group", &g], "vipc node: host");
    let wo = write("np2", &g, b"via vipc node\n");
    assert!(wo.status.success(), "{}", String::from_utf8_lossy(&wo.stderr));
    let ro = finish(spawn(&["pipe", "read", "np2", "--group", &g]), 60);
    assert_eq!(String::from_utf8_lossy(&ro.stdout), "via vipc node\n");

    let o = write("no-such-pipe", &g, b"x");
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err:?}");
    assert!(lines[0].starts_with("vipc: error: no pipe named \"no-such-pipe\""), "{err:?}");
    let o = finish(spawn(&["pipe", "read", &"x".repeat(40), "--group", &g]), 60);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.starts_with("vipc: error: invalid pipe name \"xxxx"), "{err:?}");
    let o = finish(spawn(&["pipe", "serve", "", "--group", &g]), 60);
    assert_eq!(String::from_utf8_lossy(&o.stderr), "vipc: error: invalid pipe name \"\": 1 to 27 bytes\n");
}
