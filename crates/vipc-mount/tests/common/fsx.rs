//! An fsx-style random operation run: the same seeded sequence of writes, reads, truncates, appends,
//! reopens and fsyncs on a file under test and on a local reference file, comparing size and contents
//! after every step. A failure names the seed and the step so that the run can be replayed
//! (`VIPC_FSX_SEED=... cargo test -p vipc-mount --test fsx`).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Largest file the run grows.
const MAX_LEN: u64 = 300_000;

/// The operations, with a short description for the log of the last steps.
#[derive(Debug, Clone)]
enum Op {
    Write {
        off: u64,
        len: usize,
    },
    Read {
        off: u64,
        len: usize,
    },
    Truncate {
        len: u64,
    },
    Append {
        len: usize,
    },
    Reopen,
    Fsync,
    /// A second descriptor writes, the first must see it.
    OtherWrite {
        off: u64,
        len: usize,
    },
}

fn pick(rng: &mut ChaCha8Rng, size: u64) -> Op {
    let off = |rng: &mut ChaCha8Rng| rng.gen_range(0..=size.max(1) + 4096).min(MAX_LEN - 1);
    let len = |rng: &mut ChaCha8Rng| {
        // Mostly small, sometimes crossing several pages.
        if rng.gen_bool(0.7) {
            rng.gen_range(1..=4096)
        } else {
            rng.gen_range(1..=70_000)
        }
    };
    match rng.gen_range(0..100) {
        0..=29 => Op::Write { off: off(rng), len: len(rng) },
        30..=54 => Op::Read { off: off(rng), len: len(rng) },
        55..=64 => Op::Truncate { len: rng.gen_range(0..=MAX_LEN) },
        65..=79 => Op::Append { len: len(rng) },
        80..=86 => Op::Reopen,
        87..=91 => Op::Fsync,
        _ => Op::OtherWrite { off: off(rng), len: len(rng) },
    }
}

struct Pair {
    test: File,
    reference: File,
}

fn open_pair(test: &Path, reference: &Path) -> Pair {
    let o = |p: &Path| OpenOptions::new().read(true).write(true).create(true).truncate(false).open(p).unwrap();
    Pair { test: o(test), reference: o(reference) }
}

fn read_all(f: &File) -> Vec<u8> {
    let len = f.metadata().unwrap().len() as usize;
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let n = f.read_at(&mut buf[done..], done as u64).unwrap();
        if n == 0 {
            break;
        }
        done += n;
    }
    buf.truncate(done);
    buf
}

/// Runs `ops` seeded operations on `dir/fsx.test`, against a reference file in `local_dir`. Panics with the
/// seed, the step and the last operations on the first difference.
pub fn run(dir: &Path, local_dir: &Path, seed: u64, ops: usize) {
    let tp = dir.join("fsx.test");
    let rp = local_dir.join("fsx.ref");
    let _ = std::fs::remove_file(&tp);
    let _ = std::fs::remove_file(&rp);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut pair = open_pair(&tp, &rp);
    let mut size = 0u64;
    let mut history: Vec<Op> = Vec::new();
    let fail = |step: usize, history: &[Op], what: String| -> ! {
        let tail: Vec<String> = history.iter().rev().take(8).rev().map(|o| format!("{o:?}")).collect();
        panic!("fsx: seed {seed} step {step}: {what}\n  last operations: {}", tail.join(", "));
    };
    for step in 0..ops {
        let op = pick(&mut rng, size);
        history.push(op.clone());
        let other = matches!(op, Op::OtherWrite { .. });
        match op {
            Op::Write { off, len } | Op::OtherWrite { off, len } => {
                let len = len.min((MAX_LEN - off) as usize).max(1);
                let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                if other {
                    let other = OpenOptions::new().write(true).open(&tp).unwrap();
                    other.write_all_at(&data, off).unwrap();
                } else {
                    pair.test.write_all_at(&data, off).unwrap();
                }
                pair.reference.write_all_at(&data, off).unwrap();
                size = size.max(off + len as u64);
            }
            Op::Read { off, len } => {
                let mut a = vec![0u8; len];
                let mut b = vec![0u8; len];
                let na = pair.test.read_at(&mut a, off).unwrap();
                let nb = pair.reference.read_at(&mut b, off).unwrap();
                if na != nb || a[..na] != b[..nb] {
                    let first = a.iter().zip(&b).position(|(x, y)| x != y);
                    fail(
                        step,
                        &history,
                        format!("read {len} at {off}: got {na} bytes, want {nb}; first difference at {first:?}"),
                    );
                }
            }
            Op::Truncate { len } => {
                pair.test.set_len(len).unwrap();
                pair.reference.set_len(len).unwrap();
                size = len;
            }
            Op::Append { len } => {
                let len = len.min(MAX_LEN.saturating_sub(size) as usize);
                if len > 0 {
                    let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                    let mut a = OpenOptions::new().append(true).open(&tp).unwrap();
                    a.write_all(&data).unwrap();
                    let mut b = OpenOptions::new().append(true).open(&rp).unwrap();
                    b.write_all(&data).unwrap();
                    size += len as u64;
                }
            }
            Op::Reopen => {
                drop(pair);
                pair = open_pair(&tp, &rp);
            }
            Op::Fsync => {
                pair.test.sync_all().unwrap();
            }
        }
        // After every step: same size, same bytes (through the open descriptor).
        let (ls, rs) = (pair.test.metadata().unwrap().len(), pair.reference.metadata().unwrap().len());
        if ls != rs || rs != size {
            fail(step, &history, format!("size {ls}, reference {rs}, expected {size}"));
        }
        let (a, b) = (read_all(&pair.test), read_all(&pair.reference));
        if a != b {
            let first = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
            fail(step, &history, format!("contents differ at byte {first} (len {} vs {})", a.len(), b.len()));
        }
    }
    // And through a fresh open at the end.
    let a = std::fs::read(&tp).unwrap();
    let b = std::fs::read(&rp).unwrap();
    assert!(a == b, "fsx: seed {seed}: final contents differ through a fresh open");
}

/// The seed of this run: VIPC_FSX_SEED if set, else from the clock (printed by the caller).
pub fn seed() -> u64 {
    std::env::var("VIPC_FSX_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1)
    })
}

/// Number of operations: VIPC_FSX_OPS or `default`.
pub fn ops(default: usize) -> usize {
    std::env::var("VIPC_FSX_OPS").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}
