//! The workloads, each runnable on any of the compared file systems: page
//! reads through a [`PageSource`] (a file opened on the local disk or on a
//! mount, or the vipc library), sequential reads and writes, shell commands
//! over the tree, and the 1985 question's clients with think time.

use crate::error::{BenchError, Result};
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use vipc_fs::{FsClient, Handle};

/// Something pages can be read from at an offset, from many threads.
pub trait PageSource: Sync {
    /// Reads at `off` into `buf`; the bytes read.
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<usize>;
}

/// A file opened through the kernel (local disk or any mount): `pread`.
#[derive(Debug)]
pub struct FileSource(pub File);

impl PageSource for FileSource {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<usize> {
        Ok(self.0.read_at(buf, off)?)
    }
}

/// A file opened through the vipc library ([`FsClient::read`]).
#[derive(Debug)]
pub struct LibSource<'a> {
    /// The client.
    pub client: &'a FsClient,
    /// The open file.
    pub h: Handle,
}

impl PageSource for LibSource<'_> {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> Result<usize> {
        self.client.read(self.h, off, buf).map_err(|e| BenchError::Other(format!("vipc read: {e}")))
    }
}

/// A small deterministic generator of page offsets.
#[derive(Clone, Debug)]
pub struct Offsets {
    x: u64,
    pages: u64,
    size: u64,
}

impl Offsets {
    /// Offsets of `size`-byte pages within a file of `file_size` bytes.
    pub fn new(seed: u64, size: usize, file_size: u64) -> Offsets {
        Offsets { x: seed | 1, pages: (file_size / size as u64).max(1), size: size as u64 }
    }

    /// The next page-aligned offset.
    pub fn next_offset(&mut self) -> u64 {
        self.x ^= self.x << 13;
        self.x ^= self.x >> 7;
        self.x ^= self.x << 17;
        (self.x % self.pages) * self.size
    }
}

/// One page read of `buf.len()` bytes at the next offset; its duration. A short read is an error.
pub fn read_page(src: &dyn PageSource, offs: &mut Offsets, buf: &mut [u8]) -> Result<Duration> {
    let off = offs.next_offset();
    let t = Instant::now();
    let n = src.read_at(off, buf)?;
    let d = t.elapsed();
    if n != buf.len() {
        return Err(format!("page read at {off} returned {n} of {} bytes", buf.len()).into());
    }
    Ok(d)
}

/// Random `size`-byte page reads by `threads` readers at once for `dur`: reads per second.
pub fn reads_per_sec(src: &dyn PageSource, size: usize, file_size: u64, threads: usize, dur: Duration) -> Result<f64> {
    let count = AtomicU64::new(0);
    let start = Instant::now();
    let errors: Vec<Option<BenchError>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|i| {
                let count = &count;
                s.spawn(move || -> Result<()> {
                    let mut offs = Offsets::new(0x1234_5678 + i as u64 * 7919, size, file_size);
                    let mut buf = vec![0u8; size];
                    let mut n = 0;
                    while start.elapsed() < dur {
                        read_page(src, &mut offs, &mut buf)?;
                        n += 1;
                    }
                    count.fetch_add(n, Ordering::Relaxed);
                    Ok(())
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().map_err(|_| BenchError::from("reader panicked")).and_then(|r| r).err())
            .collect()
    });
    let secs = start.elapsed().as_secs_f64();
    if let Some(e) = errors.into_iter().flatten().next() {
        return Err(e);
    }
    Ok(count.load(Ordering::Relaxed) as f64 / secs)
}

/// Reads the whole of `src` (a file of `size` bytes) in `chunk`-byte reads: MB/s.
pub fn seq_read(src: &dyn PageSource, size: u64, chunk: usize) -> Result<f64> {
    let (mut raw, at) = vipc::page_aligned(chunk);
    let buf = &mut raw[at..at + chunk];
    let t = Instant::now();
    let mut off = 0u64;
    while off < size {
        let want = chunk.min((size - off) as usize);
        let n = src.read_at(off, &mut buf[..want])?;
        if n == 0 {
            return Err(format!("sequential read ended at {off} of {size}").into());
        }
        off += n as u64;
    }
    Ok(size as f64 / t.elapsed().as_secs_f64() / 1e6)
}

/// Reads a whole file with `read` into a page-aligned buffer (what `cat`
/// does; [`vipc::page_aligned`] says why the alignment counts): MB/s.
pub fn seq_read_path(path: &Path, chunk: usize) -> Result<f64> {
    let mut f = File::open(path)?;
    let (mut raw, at) = vipc::page_aligned(chunk);
    let buf = &mut raw[at..at + chunk];
    let t = Instant::now();
    let mut total = 0u64;
    loop {
        let n = f.read(buf)?;
        if n == 0 {
            break;
        }
        total += n as u64;
    }
    Ok(total as f64 / t.elapsed().as_secs_f64() / 1e6)
}

fn pattern(chunk: usize) -> Vec<u8> {
    (0..chunk).map(|i| (i * 131 % 251) as u8).collect()
}

/// Writes a new file of `size` bytes at `path` in `chunk`-byte writes and closes it: MB/s.
pub fn seq_write_path(path: &Path, size: u64, chunk: usize) -> Result<f64> {
    let buf = pattern(chunk);
    let t = Instant::now();
    let mut f = File::create(path)?;
    let mut left = size;
    while left > 0 {
        let n = left.min(chunk as u64) as usize;
        f.write_all(&buf[..n])?;
        left -= n as u64;
    }
    drop(f);
    Ok(size as f64 / t.elapsed().as_secs_f64() / 1e6)
}

/// Copies `src` to a new file `dst` on this machine the way `vipc cp` copies
/// (blocks reserved first, `chunk`-byte positioned reads and writes, not
/// forced to the disk): MB/s.
/// The floor a remote copy sits on: the same reads and writes with no network.
pub fn copy_path(src: &Path, dst: &Path, chunk: usize) -> Result<f64> {
    use std::os::unix::fs::FileExt;
    let (mut raw, at) = vipc::page_aligned(chunk);
    let buf = &mut raw[at..at + chunk];
    let t = Instant::now();
    let from = File::open(src)?;
    let to = File::create(dst)?;
    // As `vipc cp` does: the destination's blocks reserved first.
    let _ = rustix::fs::fallocate(&to, rustix::fs::FallocateFlags::KEEP_SIZE, 0, from.metadata()?.len());
    let mut off = 0u64;
    loop {
        let n = from.read_at(buf, off)?;
        if n == 0 {
            break;
        }
        to.write_all_at(&buf[..n], off)?;
        off += n as u64;
    }
    drop(to);
    let rate = off as f64 / t.elapsed().as_secs_f64() / 1e6;
    std::fs::remove_file(dst)?;
    Ok(rate)
}

/// The same through the vipc library: open with O_CREAT|O_TRUNC, write, close.
pub fn seq_write_lib(client: &FsClient, path: &str, size: u64, chunk: usize) -> Result<f64> {
    let e = |e: vipc_fs::FsError| BenchError::Other(format!("vipc write: {e}"));
    let buf = pattern(chunk);
    let t = Instant::now();
    let (h, _) = client.open(path, libc_flags::CREATE_WRITE, 0o644).map_err(e)?;
    let mut off = 0u64;
    while off < size {
        let n = (size - off).min(chunk as u64) as usize;
        let w = client.write(h, off, &buf[..n]).map_err(e)?;
        if w != n {
            return Err(format!("vipc write of {n} bytes wrote {w}").into());
        }
        off += n as u64;
    }
    client.close(h).map_err(e)?;
    Ok(size as f64 / t.elapsed().as_secs_f64() / 1e6)
}

/// Open flags without a libc dependency (Linux values).
pub mod libc_flags {
    /// O_RDONLY.
    pub const READ: i32 = 0;
    /// O_WRONLY | O_CREAT | O_TRUNC.
    pub const CREATE_WRITE: i32 = 0o1 | 0o100 | 0o1000;
}

/// Runs a shell command line `sh -c CMD` (output discarded); its duration in seconds.
pub fn timed_shell(cmd: &str) -> Result<f64> {
    let t = Instant::now();
    let out = Command::new("sh").arg("-c").arg(cmd).stdin(Stdio::null()).stdout(Stdio::null()).output()?;
    let secs = t.elapsed().as_secs_f64();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("`{cmd}` failed ({}): {}", out.status, err.lines().next().unwrap_or("")).into());
    }
    Ok(secs)
}

/// Writes dirty data back and drops the kernel's page, dentry and inode caches (root only): on this
/// machine's ext4, creating a 20,000-file tree right after another was created and deleted takes up to
/// 20 times longer than with clean caches (2.5, 10, 18, 21 s for four untars in a row; 1.2 s after a drop),
/// so whichever system untars later would pay for those before it. Err says why it could not.
pub fn drop_caches() -> std::result::Result<(), String> {
    rustix::fs::sync();
    std::fs::write("/proc/sys/vm/drop_caches", "3").map_err(|e| format!("cannot drop the kernel's caches: {e}"))
}

/// Single-quotes a path for `sh -c`.
pub fn sh_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

/// Walks the tree under `path` through the vipc library (readdir with attributes, recursively): entries seen.
pub fn lib_walk(client: &FsClient, path: &str) -> Result<usize> {
    let mut n = 0;
    let mut stack = vec![path.to_string()];
    while let Some(dir) = stack.pop() {
        let entries = client.readdir(&dir).map_err(|e| BenchError::Other(format!("vipc readdir {dir}: {e}")))?;
        for e in entries {
            n += 1;
            if e.attr.kind == vipc_fs::FileKind::Dir {
                stack.push(if dir.is_empty() { e.name } else { format!("{dir}/{}", e.name) });
            }
        }
    }
    Ok(n)
}

/// The 1985 question's workload: `n` clients, each doing `requests` times
/// "think for `think`, then read 8 KB at a random offset". Returns the mean
/// elapsed time of one think+read cycle (ms) and the reads per second of all clients.
pub fn clients(
    sources: &[Box<dyn PageSource + Send + '_>],
    file_size: u64,
    requests: usize,
    think: Duration,
) -> Result<(f64, f64)> {
    const PAGE: usize = 8192;
    let start = Instant::now();
    let per: Vec<Result<Duration>> = std::thread::scope(|s| {
        let hs: Vec<_> = sources
            .iter()
            .enumerate()
            .map(|(i, src)| {
                s.spawn(move || -> Result<Duration> {
                    let mut offs = Offsets::new(0xabcd + i as u64 * 104_729, PAGE, file_size);
                    let mut buf = vec![0u8; PAGE];
                    let t = Instant::now();
                    for _ in 0..requests {
                        std::thread::sleep(think);
                        read_page(src.as_ref(), &mut offs, &mut buf)?;
                    }
                    Ok(t.elapsed())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("client panicked".into()))).collect()
    });
    let wall = start.elapsed().as_secs_f64();
    let mut total = 0.0;
    for r in per {
        total += r?.as_secs_f64();
    }
    let n = sources.len().max(1) as f64;
    let cycle_ms = total / n / requests.max(1) as f64 * 1e3;
    Ok((cycle_ms, n * requests as f64 / wall))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_aligned_and_inside() {
        let mut o = Offsets::new(7, 4096, 1 << 20);
        for _ in 0..1000 {
            let off = o.next_offset();
            assert_eq!(off % 4096, 0);
            assert!(off + 4096 <= 1 << 20);
        }
    }

    #[test]
    fn file_workloads_on_a_local_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let mbs = seq_write_path(&p, 3 << 20, 1 << 20).unwrap();
        assert!(mbs > 0.0);
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 3 << 20);
        assert!(seq_read_path(&p, 1 << 16).unwrap() > 0.0);
        let src = FileSource(File::open(&p).unwrap());
        assert!(seq_read(&src, 3 << 20, 1 << 20).unwrap() > 0.0);
        assert!(reads_per_sec(&src, 4096, 3 << 20, 2, Duration::from_millis(20)).unwrap() > 0.0);
        let srcs: Vec<Box<dyn PageSource + Send>> =
            (0..2).map(|_| Box::new(FileSource(File::open(&p).unwrap())) as _).collect();
        let (cycle, rate) = clients(&srcs, 3 << 20, 5, Duration::from_millis(1)).unwrap();
        assert!(cycle >= 1.0, "think time counts: {cycle}");
        assert!(rate > 0.0);
        // A read past the end is a short read, reported as an error.
        let mut o = Offsets::new(1, 4096, 8 << 20);
        let mut buf = vec![0u8; 4096];
        let mut failed = false;
        for _ in 0..50 {
            failed |= read_page(&src, &mut o, &mut buf).is_err();
        }
        assert!(failed);
        assert!(timed_shell("true").is_ok());
        assert!(timed_shell("false").is_err());
        assert_eq!(sh_quote(Path::new("/a b/c'd")), r"'/a b/c'\''d'");
    }
}
