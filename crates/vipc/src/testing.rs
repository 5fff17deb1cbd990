//! Support for the project's own tests (not part of the API).

use std::io::Write;
use std::path::Path;

/// Says why a test returns without running its checks: on stderr, and, when
/// `scripts/test` asks with `VIPC_SKIP_LOG`, as a line in that file, so that
/// the summary counts the test as skipped rather than passed.
pub fn skipped(why: &str) {
    eprintln!("skipped: {why}");
    if let Some(path) = std::env::var_os("VIPC_SKIP_LOG") {
        log_skip(Path::new(&path), why);
    }
}

/// Appends `test name: why` to `log`.
fn log_skip(log: &Path, why: &str) {
    let test = std::thread::current().name().unwrap_or("a test").to_string();
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(log) {
        // One write per line: tests of one binary run on parallel threads.
        let _ = f.write_all(format!("{test}: {why}\n").as_bytes());
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_skip_is_logged_with_the_test_name() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("skips");
        super::log_skip(&log, "no such thing");
        super::log_skip(&log, "nor this");
        let text = std::fs::read_to_string(&log).expect("log written");
        let me = "testing::tests::a_skip_is_logged_with_the_test_name";
        assert_eq!(text, format!("{me}: no such thing\n{me}: nor this\n"));
    }
}
