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

/// A seeded generator for tests that make up hostile input: the same seed
/// gives the same inputs (the tests print it with a failure).
pub struct Rng(rand::rngs::StdRng);

impl Rng {
    /// The generator of seed `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(rand::SeedableRng::seed_from_u64(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        rand::RngCore::next_u64(&mut self.0)
    }

    /// A number below `n` (0 for `n` = 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// True `pct` times in a hundred.
    pub fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
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
