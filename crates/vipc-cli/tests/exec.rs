//! `vipc node --team` and `vipc exec` as separate processes on loopback:
//! output, exit status, Ctrl-C, and the error without a team server.

mod common;

use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn exec(args: &[&str]) -> Command {
    let mut c = Command::new(VIPC);
    c.arg("exec").args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

/// Starts `vipc node --team` in multicast group `g`, once it is up.
fn team_node(g: &str) -> Guard {
    let mut node = Command::new(VIPC)
        .args(["node", "--team", "--group", g])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(node.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.starts_with("vipc node: host "), "{line:?}");
    Guard(node)
}

#[test]
fn exec_runs_remotely_passes_ctrl_c_and_fails_in_one_line_without_a_team() {
    let g = random_group();
    // Without a team server: one clear line, non-zero, soon.
    let t = Instant::now();
    let o = exec(&["--group", &g, "--", "true"]).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(err.starts_with("vipc: error: exec: no team server answered"), "{err:?}");
    assert!(t.elapsed() < Duration::from_secs(10));

    let _node = team_node(&g);

    let o = exec(&["--group", &g, "--", "sh", "-c", "echo out; echo err >&2; exit 3"]).output().unwrap();
    assert_eq!(o.status.code(), Some(3), "{:?}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "out\n");
    assert_eq!(String::from_utf8_lossy(&o.stderr), "err\n");

    // Ctrl-C on the client reaches the remote command: `sleep 30` ends at once.
    let client = exec(&["--group", &g, "--", "sh", "-c", "echo started; exec sleep 30"]).spawn().unwrap();
    let pid = client.id();
    let mut client = Guard(client);
    let mut line = String::new();
    BufReader::new(client.0.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line, "started\n");
    let t = Instant::now();
    assert!(Command::new("kill").args(["-INT", &pid.to_string()]).status().unwrap().success());
    let status = loop {
        if let Some(s) = client.0.try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "vipc exec did not end after Ctrl-C");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(130), "128 + SIGINT");

    // Output nobody reads any more (`vipc exec yes | head -1`) ends the command, and the call
    // quietly with 128 + SIGPIPE, as the command itself would have ended here.
    let mut client = Guard(exec(&["--group", &g, "--", "yes"]).spawn().unwrap());
    let mut err = client.0.stderr.take().unwrap();
    let mut line = String::new();
    let mut out = BufReader::new(client.0.stdout.take().unwrap());
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "y\n");
    drop(out);
    let t = Instant::now();
    let status = loop {
        if let Some(s) = client.0.try_wait().unwrap() {
            break s;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "vipc exec went on with nobody reading");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(141), "128 + SIGPIPE");
    let mut said = String::new();
    std::io::Read::read_to_string(&mut err, &mut said).unwrap();
    assert_eq!(said, "", "nothing said");
}

/// True while `pid` is a process that has not ended (a zombie has).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|(_, rest)| !rest.starts_with('Z')))
}

#[test]
fn a_command_dies_with_its_team_servers_node() {
    let g = random_group();
    let mut node = team_node(&g);
    // The command, and a process it started that writes nothing (no SIGPIPE to end it).
    let script = "sleep 30 >/dev/null 2>&1 & echo $$ $!; exec sleep 30";
    let client = exec(&["--group", &g, "--", "sh", "-c", script]).spawn().unwrap();
    let mut client = Guard(client);
    let mut line = String::new();
    BufReader::new(client.0.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let pids: Vec<u32> = line.split_whitespace().map(|p| p.parse().unwrap_or_else(|_| panic!("{line:?}"))).collect();
    assert_eq!(pids.len(), 2, "{line:?}");
    assert!(pids.iter().all(|&p| running(p)), "the command and its child run");
    node.0.kill().unwrap(); // SIGKILL: the node cannot clean up
    node.0.wait().unwrap();
    let t = Instant::now();
    for (pid, what) in pids.into_iter().zip(["the command", "the command's child"]) {
        while running(pid) {
            assert!(t.elapsed() < Duration::from_secs(5), "{what} outlived its team server's node");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A command's children that outlive the command itself are no longer the
/// node's: they are left running when the node goes, as a shell leaves its
/// background jobs.
#[test]
fn a_finished_commands_background_child_is_left_alone() {
    let g = random_group();
    let mut node = team_node(&g);
    let out = exec(&["--group", &g, "--", "sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let child: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    node.0.kill().unwrap();
    node.0.wait().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let alive = running(child);
    let _ = Command::new("kill").arg(child.to_string()).status();
    assert!(alive, "the finished command's background child was killed with the node");
}
