//! `vipc cp SRC DST`: copy a file between this machine and an export, or
//! between two exports, without a mount. Either side is `NAME:PATH` or a
//! local path. Long copies show a progress bar; `--resume` continues a
//! partial copy from the size the destination already has. A local
//! destination's blocks are reserved before the copy, its size untouched.
//! A sparse source (fewer blocks than its size needs) copied to a regular
//! file keeps its holes, as with cp(1)'s `--sparse=auto`: the holes it
//! reports are neither read nor written, other runs of zero pages not written.
//! A source that grows during the copy is copied to its end, as by cp(1);
//! one that shrinks is an error. A symlink as the source is followed. A
//! destination that is the source under another name (a symlink, a hard
//! link, this machine's own file behind the export) is refused before
//! anything is written: the copy would have emptied it first.

use crate::error::{CliError, CliResult};
use crate::fsremote::{connect, fs_error, Spec};
use crate::opts::NodeArgs;
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Instant;
use vipc::Node;
use vipc_fs::{FileKind, FsClient, Handle};

/// Bytes per read/write step: one MoveTo of 2 MiB (the file server's unit
/// for this client). Measured with the server reading run by run (256 MB
/// to a local file, three rounds of 6 copies each, medians): two readers of
/// 2 MiB 3.2–3.6 GB/s, of 1 MiB 2.9–3.2, of 4 MiB 3.0–3.2, one of 4 MiB
/// 3.0–3.2; earlier three readers were slower still.
const CHUNK: usize = 2 << 20;
/// Local files are written this much at a time: on this machine's ext4 a
/// `dd` of 256 MB in 2 or 4 MiB writes ran at 0.4–2.6 GB/s in one run of
/// three or so, in 1 MiB writes at 4.9–5.1 GB/s every time.
const WRITE_PIECE: usize = 1 << 20;
/// Chunks read at once (the server reads one while another travels).
const READERS: usize = 2;
/// How many chunks past the written prefix a reader may read (the chunks
/// held until the one before them is written).
const AHEAD: usize = 4;
/// Copies at least this large show a progress bar (on a terminal).
const BAR_MIN: u64 = 16 << 20;

/// A chunk's bytes, starting on a page boundary ([`vipc::page_aligned`]:
/// reading a local source into them ran 3 × faster; `vipc cp` of 256 MB to
/// an export 831 → 991 MB/s, medians of 8 runs each in alternating order).
struct Chunk {
    raw: Vec<u8>,
    /// Where the page-aligned bytes start in `raw`.
    at: usize,
    len: usize,
    /// A hole of a sparse source: `len` zeros, not read (and not written).
    hole: bool,
}

impl Chunk {
    fn new() -> Chunk {
        Chunk { raw: Vec::new(), at: 0, len: 0, hole: false }
    }

    /// Makes it `len` bytes long (their contents unspecified).
    fn set_len(&mut self, len: usize) {
        if self.raw.len() < self.at + len {
            (self.raw, self.at) = vipc::page_aligned(len);
        }
        self.len = len;
    }

    fn bytes(&self) -> &[u8] {
        &self.raw[self.at..self.at + self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.at..self.at + self.len]
    }
}

/// One open end of the copy, and how errors name it.
enum End<'a> {
    Local(File, String),
    Remote(&'a FsClient, Handle, String),
}

impl End<'_> {
    fn read_at(&self, off: u64, buf: &mut [u8]) -> CliResult<usize> {
        match self {
            End::Local(f, what) => {
                let mut got = 0;
                while got < buf.len() {
                    match f.read_at(&mut buf[got..], off + got as u64).map_err(|e| local_error(what, e))? {
                        0 => break,
                        n => got += n,
                    }
                }
                Ok(got)
            }
            End::Remote(c, h, what) => c.read(*h, off, buf).map_err(|e| fs_error(what, e)),
        }
    }

    fn write_at(&self, off: u64, data: &[u8]) -> CliResult<()> {
        match self {
            End::Local(f, what) => {
                for (k, piece) in data.chunks(WRITE_PIECE).enumerate() {
                    let at = off + (k * WRITE_PIECE) as u64;
                    f.write_all_at(piece, at).map_err(|e| local_error(what, e))?;
                }
                Ok(())
            }
            End::Remote(c, h, what) => c.write(*h, off, data).map(|_| ()).map_err(|e| fs_error(what, e)),
        }
    }

    /// What the open file is (symlinks followed: it is the file itself).
    fn found(&self) -> CliResult<Found> {
        match self {
            End::Local(f, what) => f.metadata().map(|m| Found::local(&m)).map_err(|e| local_error(what, e)),
            End::Remote(c, h, what) => {
                c.fstat(*h).map(|a| Found::remote(c.export_name(), &a)).map_err(|e| fs_error(what, e))
            }
        }
    }

    /// Sets the open file's size: cuts it, or extends it with a hole.
    fn set_len(&self, size: u64) -> CliResult<()> {
        match self {
            End::Local(f, what) => f.set_len(size).map_err(|e| local_error(what, e)),
            End::Remote(c, h, what) => {
                let set = vipc_fs::SetAttr { size: Some(size), ..Default::default() };
                c.setattr("", Some(*h), &set).map(drop).map_err(|e| fs_error(what, e))
            }
        }
    }

    /// Whether `off..off + len` is all hole: no data at or after `off`
    /// before its end (SEEK_DATA), so that a sparse copy need not read it.
    /// `false` when that cannot be told (an export too old to answer).
    fn is_hole(&self, off: u64, len: usize) -> bool {
        let next_data = match self {
            End::Local(f, _) => match rustix::fs::seek(f, rustix::fs::SeekFrom::Data(off)) {
                Err(rustix::io::Errno::NXIO) => None,
                r => Some(r.ok()),
            },
            End::Remote(c, h, _) => match c.seek(*h, off, false) {
                Err(vipc_fs::FsError::Errno(libc::ENXIO)) => None,
                r => Some(r.ok()),
            },
        };
        match next_data {
            None => true,                             // only a hole from here to the end
            Some(Some(at)) => at >= off + len as u64, // data, but past this range
            Some(None) => false,                      // unknown: read it
        }
    }

    /// The shortest run of zeros a sparse copy leaves a hole: a page
    /// locally; 64 KiB on an export, where each write is a round trip.
    fn shortest_hole(&self) -> usize {
        match self {
            End::Local(..) => PAGE,
            End::Remote(..) => 64 << 10,
        }
    }

    fn close(self) {
        if let End::Remote(c, h, _) = self {
            let _ = c.close(h);
        }
    }

    fn finish(self) -> CliResult<()> {
        match self {
            // Like cp(1): written, not forced to the disk.
            End::Local(..) => Ok(()),
            End::Remote(c, h, what) => c.close(h).map_err(|e| fs_error(&what, e)),
        }
    }
}

/// `what: error`.
fn local_error(what: &str, e: std::io::Error) -> CliError {
    CliError(format!("{what}: {e}"))
}

/// What a copy needs to know of an existing end.
#[derive(Clone, Debug, PartialEq)]
struct Found {
    kind: FileKind,
    size: u64,
    /// Where `ino` names one file: the local device, or the export.
    place: String,
    ino: u64,
    /// Last modification (seconds, nanoseconds).
    mtime: (i64, u32),
    /// Fewer bytes allocated than its size: it has holes.
    sparse: bool,
}

impl Found {
    fn local(m: &std::fs::Metadata) -> Found {
        use std::os::unix::fs::MetadataExt;
        let t = m.file_type();
        let kind = if t.is_dir() {
            FileKind::Dir
        } else if t.is_file() {
            FileKind::File
        } else {
            FileKind::Other // a device, FIFO or socket has no size to copy
        };
        let mtime = (m.mtime(), m.mtime_nsec() as u32);
        let sparse = m.blocks().saturating_mul(512) < m.len();
        Found { kind, size: m.len(), place: format!("dev {}", m.dev()), ino: m.ino(), mtime, sparse }
    }

    fn remote(export: &str, a: &vipc_fs::Attr) -> Found {
        let mtime = (a.mtime.secs, a.mtime.nanos);
        let sparse = a.blocks.saturating_mul(512) < a.size;
        Found { kind: a.kind, size: a.size, place: format!("{export}:"), ino: a.ino, mtime, sparse }
    }

    /// Surely or most likely the same file: the same inode in one place, or
    /// — in two places, such as an export and this machine's directory it
    /// may be — the same inode number, size and modification time to the
    /// nanosecond. Copying a file onto itself would empty it first.
    fn same_file(&self, other: &Found) -> bool {
        self.ino == other.ino && (self.place == other.place || (self.size == other.size && self.mtime == other.mtime))
    }
}

/// What `spec` is (a symlink here followed, there not), or `None` if it does not exist.
fn stat(spec: &Spec, clients: &HashMap<String, FsClient>) -> CliResult<Option<Found>> {
    match spec {
        Spec::Local(p) => match std::fs::metadata(p) {
            Ok(m) => Ok(Some(Found::local(&m))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(local_error(&p.display().to_string(), e)),
        },
        Spec::Remote { export, path } => match clients[export].lookup(path) {
            Ok(a) => Ok(Some(Found::remote(export, &a))),
            Err(e) if e.errno() == libc::ENOENT => Ok(None),
            Err(e) => Err(fs_error(&spec.show(), e)),
        },
    }
}

/// `dst/NAME` when `dst` is a directory and `src` ends in NAME.
fn into_dir(dst: &Spec, src: &Spec) -> Spec {
    let name = match src {
        Spec::Local(p) => p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        Spec::Remote { path, .. } => path.rsplit('/').next().unwrap_or(path).to_string(),
    };
    match dst {
        Spec::Local(p) => Spec::Local(p.join(name)),
        Spec::Remote { export, path } => {
            let base = path.trim_end_matches('/');
            let path = if base.is_empty() { name } else { format!("{base}/{name}") };
            Spec::Remote { export: export.clone(), path }
        }
    }
}

fn open_src<'a>(spec: &Spec, clients: &'a HashMap<String, FsClient>) -> CliResult<End<'a>> {
    match spec {
        Spec::Local(p) => {
            let what = p.display().to_string();
            // O_NONBLOCK: a FIFO is refused as not a regular file, not waited on for a writer.
            let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(p);
            Ok(End::Local(f.map_err(|e| local_error(&what, e))?, what))
        }
        Spec::Remote { export, path } => {
            let c = &clients[export];
            let (h, _) = c.open(path, libc::O_RDONLY, 0).map_err(|e| fs_error(&spec.show(), e))?;
            Ok(End::Remote(c, h, spec.show()))
        }
    }
}

/// Opens (or creates) the destination, never cutting it short: it may yet
/// turn out to be the source under another name.
fn open_dst<'a>(spec: &Spec, clients: &'a HashMap<String, FsClient>) -> CliResult<End<'a>> {
    match spec {
        Spec::Local(p) => {
            let what = p.display().to_string();
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o644)
                .open(p)
                .map_err(|e| local_error(&what, e))?;
            Ok(End::Local(f, what))
        }
        Spec::Remote { export, path } => {
            let c = &clients[export];
            let flags = libc::O_WRONLY | libc::O_CREAT;
            let (h, _) = c.open(path, flags, 0o644).map_err(|e| fs_error(&spec.show(), e))?;
            Ok(End::Remote(c, h, spec.show()))
        }
    }
}

/// Copies `src` to `dst`.
pub fn run(src: &str, dst: &str, resume: bool, quiet: bool, args: &NodeArgs) -> CliResult<()> {
    let src = Spec::parse(src)?;
    let mut dst = Spec::parse(dst)?;
    if matches!((&src, &dst), (Spec::Local(_), Spec::Local(_))) {
        return Err("both SRC and DST are local paths: one side must be NAME:PATH".into());
    }
    let node = Node::start(args.build()?)?;
    let mut clients = HashMap::new();
    for s in [&src, &dst] {
        if let Spec::Remote { export, .. } = s {
            if !clients.contains_key(export) {
                // Whole chunks in one MoveTo/MoveFrom each: fewer, longer streams.
                let mut client = connect(&node, export, &args.peers)?;
                client.set_unit(CHUNK);
                clients.insert(export.clone(), client);
            }
        }
    }
    // Opened first: a symlink is followed to the file it names, as by cp(1).
    let from = open_src(&src, &clients)?;
    let source = from.found()?;
    if source.kind != FileKind::File {
        return Err(CliError(format!("{}: not a regular file", src.show())));
    }
    let size = source.size;
    let mut existing = stat(&dst, &clients)?;
    if existing.as_ref().is_some_and(|f| f.kind == FileKind::Dir) {
        dst = into_dir(&dst, &src);
        existing = stat(&dst, &clients)?;
    }
    if existing.is_none() && dst.names_a_directory() {
        return Err(CliError(format!("{}: no such directory", dst.show())));
    }
    let same = || CliError(format!("{} and {} are the same file", src.show(), dst.show()));
    if existing.as_ref().is_some_and(|f| f.same_file(&source)) {
        return Err(same());
    }
    let start = match (resume, existing.map(|f| (f.kind, f.size))) {
        (true, Some((FileKind::File, have))) if have <= size => have,
        (true, Some((FileKind::File, have))) => {
            return Err(CliError(format!(
                "cannot resume: {} ({have} bytes) is larger than {} ({size} bytes)",
                dst.show(),
                src.show()
            )))
        }
        (_, Some((FileKind::Dir, _))) => return Err(CliError(format!("{}: is a directory", dst.show()))),
        // Resuming goes on from the destination's size: only a regular file has one to trust.
        (true, Some(_)) => return Err(CliError(format!("cannot resume: {} is not a regular file", dst.show()))),
        _ => 0,
    };
    if let Spec::Local(p) = &dst {
        use std::os::unix::fs::FileTypeExt;
        let kind = std::fs::metadata(p).map(|m| m.file_type());
        if kind.is_ok_and(|k| k.is_fifo() || k.is_socket()) {
            return Err(CliError(format!(
                "{}: a FIFO or socket has no offsets to write at (use vipc cat)",
                dst.show()
            )));
        }
    }
    // The destination named another way (a symlink to the source, a hard
    // link): known only once it is open.
    let to = open_dst(&dst, &clients)?;
    let opened = to.found()?;
    if opened.same_file(&source) {
        to.close();
        return Err(same());
    }
    if !resume && opened.kind == FileKind::File && opened.size > 0 {
        to.set_len(0)?;
    }
    if start > 0 {
        check_resumable(&from, (&src, &dst), &clients, start)?;
    }
    let bar = if quiet || size - start < BAR_MIN {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::new(size);
        b.set_style(
            ProgressStyle::with_template(
                "{decimal_bytes}/{decimal_total_bytes} [{wide_bar}] {decimal_bytes_per_sec} eta {eta}",
            )
            .map_err(|e| CliError(e.to_string()))?
            .progress_chars("=> "),
        );
        b.set_position(start);
        b
    };
    let t = Instant::now();
    // Holes only in a regular file, cut to nothing or resumed from its end
    // (GNU cp's rule): a device would keep its old bytes where zeros were
    // skipped, a FIFO would lose them.
    let holes = source.sparse && opened.kind == FileKind::File;
    match &to {
        End::Local(f, _) if !holes => preallocate(f, start, size),
        _ => {}
    }
    let mut copied = pump(&from, &to, start, size, holes, &bar)?;
    copied += copy_growth(&from, &to, start + copied, &bar)?;
    if holes {
        // A hole at the end was not written: the size says where the file ends.
        to.set_len(start + copied)?;
    }
    bar.finish_and_clear();
    to.finish()?;
    from.close();
    let secs = t.elapsed().as_secs_f64();
    if !quiet {
        say!(
            "vipc cp: {} -> {}: {copied} bytes{} in {secs:.2} s ({:.1} MB/s)",
            src.show(),
            dst.show(),
            if start > 0 { format!(" (resumed at {start})") } else { String::new() },
            copied as f64 / secs.max(1e-9) / 1e6
        );
    }
    drop(clients);
    node.shutdown();
    Ok(())
}

/// Bytes before the resume point that must be the same at both ends.
const RESUME_CHECK: usize = 64 << 10;

/// A resumed copy takes the destination's first `start` bytes for the
/// source's: their last [`RESUME_CHECK`] must match, so that a file that only
/// shares a name is refused rather than finished into a mix of two.
fn check_resumable(
    from: &End<'_>,
    (src, dst): (&Spec, &Spec),
    clients: &HashMap<String, FsClient>,
    start: u64,
) -> CliResult<()> {
    let n = start.min(RESUME_CHECK as u64) as usize;
    let at = start - n as u64;
    let (mut theirs, mut ours) = (vec![0u8; n], vec![0u8; n]);
    let read = from.read_at(at, &mut theirs)?;
    let have = open_src(dst, clients)?;
    let got = have.read_at(at, &mut ours);
    have.close();
    if read == n && got? == n && theirs == ours {
        return Ok(());
    }
    Err(CliError(format!(
        "cannot resume: bytes {at}..{start} of {} differ from those of {}: copy without --resume",
        dst.show(),
        src.show()
    )))
}

/// Reserves the blocks of `start..size` of a local destination before the
/// copy writes them, leaving the file's size alone (so a copy cut short
/// still resumes where it stopped): writes into reserved blocks skip the
/// file system's allocation page by page (ext4 here: 256 MiB of 1 MiB
/// pwrites 2.5–3.0 → 3.0–4.0 GB/s). A file system that cannot reserve is
/// written as before.
fn preallocate(f: &File, start: u64, size: u64) {
    if size > start {
        let _ = rustix::fs::fallocate(f, rustix::fs::FallocateFlags::KEEP_SIZE, start, size - start);
    }
}

/// Reads `from` with [`READERS`] threads (each takes the next chunk) and
/// writes `to` on this one, from `start` to `size`; returns the bytes copied.
/// Chunks may arrive out of order, but are written in order: a copy cut
/// short at any moment leaves a destination whose size is what it holds,
/// which `--resume` goes on from (written out of order, a later chunk
/// could land before an earlier one, and the hole would be kept).
/// With `holes`, runs of zero pages are not written ([`write_keeping_holes`]).
fn pump(from: &End<'_>, to: &End<'_>, start: u64, size: u64, holes: bool, bar: &ProgressBar) -> CliResult<u64> {
    let (tx, rx) = mpsc::sync_channel::<CliResult<(u64, Chunk)>>(READERS);
    let next = AtomicU64::new(start);
    // Written up to here: readers stay within AHEAD chunks of it.
    let written = AtomicU64::new(start);
    let stop = AtomicBool::new(false);
    // Chunk buffers go round (reader → writer → reader): fresh 4 MiB
    // buffers would cost page faults on every chunk.
    let pool = Mutex::new(Vec::<Chunk>::new());
    std::thread::scope(|s| {
        for _ in 0..READERS {
            let tx = tx.clone();
            let (next, written, stop, pool) = (&next, &written, &stop, &pool);
            s.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let off = next.fetch_add(CHUNK as u64, Ordering::Relaxed);
                    if off >= size {
                        return;
                    }
                    // A chunk far ahead of the writer waits (memory stays bounded).
                    while off >= written.load(Ordering::Relaxed) + (AHEAD * CHUNK) as u64 {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    let mut buf = pool.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_else(Chunk::new);
                    buf.set_len(CHUNK.min((size - off) as usize));
                    buf.hole = holes && from.is_hole(off, buf.len);
                    let read = if buf.hole { Ok(buf.len) } else { from.read_at(off, buf.bytes_mut()) };
                    let r = read.and_then(|n| {
                        if n < buf.len {
                            Err(CliError("the source shrank during the copy".into()))
                        } else {
                            Ok((off, buf))
                        }
                    });
                    let failed = r.is_err();
                    if tx.send(r).is_err() || failed {
                        return;
                    }
                }
            });
        }
        drop(tx);
        let (mut at, mut result) = (start, Ok(()));
        let mut early = std::collections::BTreeMap::new();
        for r in rx {
            let r = r.and_then(|(off, buf)| {
                early.insert(off, buf);
                // Every chunk that now continues the written prefix.
                while let Some(buf) = early.remove(&at) {
                    if buf.hole {
                        // Nothing to write: the destination holds nothing here.
                    } else if holes {
                        write_keeping_holes(to, at, buf.bytes(), to.shortest_hole())?;
                    } else {
                        to.write_at(at, buf.bytes())?;
                    }
                    at += buf.len as u64;
                    written.store(at, Ordering::Relaxed);
                    bar.inc(buf.len as u64);
                    pool.lock().unwrap_or_else(|e| e.into_inner()).push(buf);
                }
                Ok(())
            });
            if let Err(e) = r {
                stop.store(true, Ordering::Relaxed);
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
        result.map(|()| at - start)
    })
}

/// Pages of a sparse copy: the file systems' block size here, and where
/// chunks start (a multiple of it).
const PAGE: usize = 4096;

/// Writes `data` at `off` (a multiple of [`PAGE`]) but its runs of zero
/// pages at least `shortest` long, which stay holes: the destination holds
/// nothing past its size, having been cut to nothing or being resumed from
/// its end. Shorter runs between data are written with it (one write).
fn write_keeping_holes(to: &End<'_>, off: u64, data: &[u8], shortest: usize) -> CliResult<()> {
    let mut run: Option<usize> = None; // where the bytes still to write begin
    let mut zeros: Option<usize> = None; // where the zero pages after them begin
    for (i, page) in data.chunks(PAGE).enumerate() {
        let at = i * PAGE;
        if page.iter().all(|&b| b == 0) {
            zeros.get_or_insert(at);
            continue;
        }
        match (run, zeros.take()) {
            (Some(begin), Some(z)) if at - z >= shortest => {
                to.write_at(off + begin as u64, &data[begin..z])?;
                run = Some(at);
            }
            (None, _) => run = Some(at),
            _ => {} // more data, or a short run of zeros written with it
        }
    }
    match run {
        Some(begin) => to.write_at(off + begin as u64, &data[begin..zeros.unwrap_or(data.len())]),
        None => Ok(()),
    }
}

/// Copies what the source gained past `at` while it was copied, reading on
/// until it ends, as cp(1) does: a file still being written is copied as
/// far as it goes, not cut at the size it had when the copy began.
/// Returns the bytes copied.
fn copy_growth(from: &End<'_>, to: &End<'_>, mut at: u64, bar: &ProgressBar) -> CliResult<u64> {
    let begin = at;
    let mut buf = Chunk::new();
    buf.set_len(CHUNK);
    loop {
        let n = from.read_at(at, buf.bytes_mut())?;
        if n == 0 {
            return Ok(at - begin);
        }
        to.write_at(at, &buf.bytes()[..n])?;
        at += n as u64;
        bar.inc_length(n as u64);
        bar.inc(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn a_chunk_starts_on_a_page_boundary_whatever_its_length() {
        let mut c = super::Chunk::new();
        for len in [1 << 20, 1, 4096, 3 << 20, 100, 0, 1 << 20] {
            c.set_len(len);
            assert_eq!(c.bytes().len(), len);
            assert_eq!(c.bytes().as_ptr() as usize % 4096, 0, "{len} bytes");
            c.bytes_mut().fill(7);
            assert!(c.bytes().iter().all(|&b| b == 7));
        }
    }

    #[test]
    fn a_source_that_grew_during_the_copy_is_copied_to_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
        let data: Vec<u8> = (0..(2 * super::CHUNK + 12_345)).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&src, &data).unwrap();
        let from = super::End::Local(std::fs::File::open(&src).unwrap(), "src".into());
        let to = super::End::Local(std::fs::File::create(&dst).unwrap(), "dst".into());
        let bar = indicatif::ProgressBar::hidden();
        // The size the copy began with: a chunk and a bit; the rest came later.
        let first = super::pump(&from, &to, 0, super::CHUNK as u64 + 10, false, &bar).unwrap();
        assert_eq!(first, super::CHUNK as u64 + 10);
        let rest = super::copy_growth(&from, &to, first, &bar).unwrap();
        assert_eq!(first + rest, data.len() as u64);
        assert!(std::fs::read(&dst).unwrap() == data, "the copy differs from the source");
        assert_eq!(super::copy_growth(&from, &to, data.len() as u64, &bar).unwrap(), 0, "nothing more at the end");
    }

    /// Data pages are written, runs of zero pages left holes, a partly zero
    /// page written whole.
    #[test]
    fn a_sparse_copy_writes_only_pages_with_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dst");
        let to = super::End::Local(std::fs::File::create(&path).unwrap(), "dst".into());
        const P: usize = super::PAGE;
        let mut data = vec![0u8; 300 * P + 100];
        data[5] = 1; // page 0
        data[P] = 2; // page 1: one run with page 0
        data[150 * P + P - 1] = 3; // page 150 alone
        data[300 * P + 99] = 4; // the last, partial page
        super::write_keeping_holes(&to, 4 * P as u64, &data, P).unwrap();
        to.set_len(4 * P as u64 + data.len() as u64).unwrap();
        let got = std::fs::read(&path).unwrap();
        assert!(got[..4 * P].iter().all(|&b| b == 0) && got[4 * P..] == data[..], "the copy differs");
        let m = std::fs::metadata(&path).unwrap();
        // 4 data pages among 305: allocation far below the size (ext4, xfs, tmpfs keep holes).
        assert!(m.blocks() * 512 <= 16 * P as u64, "{} blocks of 512 bytes for 4 data pages", m.blocks());
        let to_all_zero = dir.path().join("zero");
        let z = super::End::Local(std::fs::File::create(&to_all_zero).unwrap(), "zero".into());
        super::write_keeping_holes(&z, 0, &vec![0; 10 * P], P).unwrap();
        assert_eq!(std::fs::metadata(&to_all_zero).unwrap().len(), 0, "nothing written for zeros only");
    }

    /// With a longer shortest hole, short runs of zeros go with the data
    /// around them: fewer writes (each a round trip to an export).
    #[test]
    fn short_runs_of_zeros_are_written_with_their_data() {
        const P: usize = super::PAGE;
        let mut data = vec![0u8; 64 * P];
        for p in [0, 3, 5, 40] {
            data[p * P] = 1; // zero runs: 1-2 (2 pages), 4 (1), 6-39 (34), 41-63 (23)
        }
        let writes = |shortest: usize| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("dst");
            let f = std::fs::File::create(&path).unwrap();
            let to = super::End::Local(f, "dst".into());
            super::write_keeping_holes(&to, 0, &data, shortest).unwrap();
            to.set_len(data.len() as u64).unwrap();
            assert!(std::fs::read(&path).unwrap() == data, "the copy differs ({shortest})");
            std::fs::metadata(&path).unwrap().blocks() * 512
        };
        // Allocation tells which ranges were written: each data page alone
        // with 1-page holes; pages 0-5 and 40 with 4-page holes.
        let alone = writes(P);
        assert!(alone <= 6 * P as u64, "{alone} bytes allocated");
        let merged = writes(4 * P);
        assert!((7 * P as u64..=12 * P as u64).contains(&merged), "{merged} bytes allocated");
    }

    #[test]
    fn preallocation_reserves_blocks_but_keeps_the_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dst");
        let f = std::fs::File::create(&path).unwrap();
        std::fs::write(&path, b"have").unwrap();
        super::preallocate(&f, 4, 4 + (1 << 20));
        let m = std::fs::metadata(&path).unwrap();
        assert_eq!(m.len(), 4, "the size tells --resume where to go on: untouched");
        // Where the file system reserves at all (ext4, xfs, tmpfs), the MiB is there.
        if rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::KEEP_SIZE, 0, 1).is_ok() {
            assert!(m.blocks() * 512 >= 1 << 20, "{} blocks of 512 bytes", m.blocks());
        }
        super::preallocate(&f, 10, 10); // nothing to reserve: no error either
    }
}
