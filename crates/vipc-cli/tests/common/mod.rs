//! What the `vipc` binary's tests share: children killed when a test ends,
//! commands run with a time limit, one-line error checks, multicast groups
//! of a test's own. Each test file uses a part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub const VIPC: &str = env!("CARGO_BIN_EXE_vipc");

/// A child process killed when dropped (also on panic).
pub struct Guard(pub Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A multicast group of this test's own (random address and port).
pub fn random_group() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos());
    let r = h.finish();
    format!("239.255.{}.{}:{}", (r >> 8) as u8, r as u8 | 1, 20_000 + (r >> 16) as u16 % 40_000)
}

/// Starts a long-running `vipc ARGS` and waits (20 s at most) for its first
/// line, which must start with `prefix`; returns the child and that line.
pub fn start(args: &[&str], prefix: &str) -> (Guard, String) {
    let mut child =
        Command::new(VIPC).args(args).stdout(Stdio::piped()).stderr(Stdio::inherit()).spawn().expect("spawn vipc");
    let stdout = child.stdout.take().unwrap();
    let guard = Guard(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|_| panic!("vipc {args:?} printed nothing"));
    assert!(line.starts_with(prefix), "unexpected first line {line:?}");
    (guard, line)
}

/// Waits for a child with a time limit and returns its output.
pub fn finish(child: Child, secs: u64) -> Output {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(o) => o.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("vipc did not finish within {secs} s");
        }
    }
}

/// Runs `vipc ARGS` to completion (120 s at most).
pub fn run(args: &[&str]) -> Output {
    let child =
        Command::new(VIPC).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn vipc");
    finish(child, 120)
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Asserts the command failed with exactly one `vipc: error:` line containing `want`.
pub fn assert_one_line_error(o: &Output, want: &str) {
    let err = stderr(o);
    assert!(!o.status.success(), "expected failure, got success; stdout {}", stdout(o));
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected, got {err:?}");
    assert!(lines[0].starts_with("vipc: error: "), "{err:?}");
    assert!(lines[0].contains(want), "{err:?} lacks {want:?}");
}

/// Runs `vipc bench --quick --json ITEMS`, checks that it succeeded and that
/// every stdout line is a record of `suite` with every field, positive values
/// and ratio = value / baseline_value; returns the records' names and stderr
/// (where the bars and the "not measured" reasons go in JSON mode).
pub fn quick_bench(suite: &str, items: &[&str]) -> (Vec<String>, String) {
    let out = Command::new(VIPC).args(["bench", "--quick", "--json"]).args(items).output().expect("run vipc bench");
    let (out_text, err_text) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "vipc bench failed: {err_text}\n{out_text}");
    let mut names = Vec::new();
    for line in out_text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        let o = v.as_object().unwrap_or_else(|| panic!("not an object: {line}"));
        let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["baseline", "baseline_value", "name", "ratio", "suite", "unit", "value"], "{line}");
        assert_eq!(o["suite"], suite, "{line}");
        let (value, base, ratio) =
            (o["value"].as_f64().unwrap(), o["baseline_value"].as_f64().unwrap(), o["ratio"].as_f64().unwrap());
        assert!(value > 0.0 && base > 0.0 && ratio > 0.0 && ratio.is_finite(), "{line}");
        assert!((ratio - value / base).abs() <= 1e-9 * ratio.max(1.0), "{line}");
        names.push(o["name"].as_str().unwrap().to_string());
    }
    (names, err_text)
}
