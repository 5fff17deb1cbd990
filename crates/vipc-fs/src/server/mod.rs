//! The file server: one receiver process registered as `fs:NAME`, which
//! forwards each request to the least busy of a pool of worker processes
//! (the V servers' structure) or, while they are all idle, serves a
//! one-packet request itself, and a reaper that frees the files of dead
//! clients. See docs/PROTOCOL.md, "File service".

mod confine;
mod handles;
mod listings;
mod ops;
mod worker;

use crate::error::{FsError, FsResult};
use crate::proto::{Rep, Req, OP_STOP};
use listings::Listings;
use ops::Service;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use vipc::{Node, Pid, Scope};
use worker::Pool;

/// What the server parses of a request before it touches a file (see
/// [`crate::fuzz_parsers`]): its paths, its SETATTR record, what it needs.
pub(crate) fn fuzz_request(req: Req, seg: &[u8]) {
    let i = ops::Input { req, seg, seg_size: seg.len(), writable: true };
    let _ = ops::path1(&i);
    let _ = ops::path2(&i);
    let _ = ops::setattr_record(seg, req.path_len());
    let _ = ops::needed(&req);
    let _ = ops::lengths_allowed(&req);
}

/// What to export and how.
#[derive(Clone, Debug)]
pub struct ExportConfig {
    /// The export's name: the server registers `fs:NAME`.
    pub name: String,
    /// The exported directory.
    pub dir: PathBuf,
    /// Refuse every mutation with EROFS.
    pub read_only: bool,
    /// Worker processes (requests served at once); at least 1.
    pub workers: usize,
}

/// Tuning knobs of a server beyond [`ExportConfig`] (defaults are the usual choice).
#[derive(Clone, Debug)]
pub struct Tuning {
    /// Prefetch the next block of sequential readers after replying (read-ahead).
    pub read_ahead: bool,
    /// Answer writes before their data are written (write-behind; FSYNC
    /// and O_SYNC/O_DSYNC handles still write first).
    pub write_behind: bool,
    /// How often idle clients holding handles are checked for life.
    pub sweep: Duration,
    /// Most files the clients on one host (counted by their owner
    /// processes' host) may hold open together, and at most a quarter of
    /// the process's open-file limit; an OPEN beyond it fails with EMFILE,
    /// leaving room for the other hosts' clients.
    pub max_handles_per_host: usize,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning { read_ahead: true, write_behind: true, sweep: Duration::from_secs(10), max_handles_per_host: 4096 }
    }
}

/// Most worker processes of one server.
pub const MAX_WORKERS: usize = 1024;
/// Silent clients the reaper pings at once (each from a process of its own).
const REAPER_PINGS: usize = 16;

/// Shortest reaper sweep: a shorter one would ping clients without pause.
pub const MIN_SWEEP: Duration = Duration::from_millis(50);

/// The logical name a server of export `name` registers.
pub fn service_name(export: &str) -> String {
    format!("fs:{export}")
}

/// A running file server; [`FileServer::stop`] (or dropping it) stops it.
pub struct FileServer {
    node: Node,
    name: String,
    receiver: Pid,
    svc: Arc<Service>,
    threads: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl std::fmt::Debug for FileServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileServer").field("name", &self.name).field("receiver", &self.receiver).finish()
    }
}

impl FileServer {
    /// Starts serving `cfg.dir` on `node` under the name `fs:NAME` (scope Any)
    /// (see [`FileServer::start_tuned`] about the umask).
    pub fn start(node: &Node, cfg: ExportConfig) -> FsResult<FileServer> {
        FileServer::start_tuned(node, cfg, Tuning::default())
    }

    /// [`FileServer::start`] with explicit [`Tuning`].
    ///
    /// Sets the process's umask to 0: the modes of OPEN with O_CREAT and of
    /// MKDIR arrive already masked by the client (as a FUSE kernel module
    /// does), so the server must not mask them again.
    pub fn start_tuned(node: &Node, cfg: ExportConfig, tuning: Tuning) -> FsResult<FileServer> {
        let name = service_name(&cfg.name);
        if name.len() > 32 || cfg.name.is_empty() {
            return Err(FsError::Protocol(format!("export name {:?} must be 1 to 29 bytes", cfg.name)));
        }
        if cfg.workers > MAX_WORKERS || tuning.sweep < MIN_SWEEP || tuning.max_handles_per_host == 0 {
            return Err(FsError::Protocol(format!(
                "workers must be at most {MAX_WORKERS}, the sweep at least {MIN_SWEEP:?}, and a client's files at least 1"
            )));
        }
        let root = confine::Root::open(&cfg.dir)
            .map_err(|e| FsError::Protocol(format!("cannot export {}: {e}", cfg.dir.display())))?;
        // Only once the server will start (a refused one leaves the process's umask alone).
        rustix::process::umask(rustix::fs::Mode::empty());
        let per_host = handles_per_host(tuning.max_handles_per_host, raise_open_file_limit());
        let instance = crate::random_nonzero_u32();
        let svc = Arc::new(Service {
            root,
            read_only: cfg.read_only,
            handles: handles::Handles::new(instance, per_host),
            instance,
            epoch: AtomicU64::new(0),
            read_ahead: tuning.read_ahead,
            write_behind: tuning.write_behind,
            pending: AtomicUsize::new(0),
            behind: std::sync::Mutex::new(()),
            settled: std::sync::Condvar::new(),
            listings: Listings::default(),
        });
        let stop = Arc::new(AtomicBool::new(false));
        let n = cfg.workers.max(1);
        let mut procs = Vec::with_capacity(n);
        for _ in 0..n {
            procs.push(node.attach()?);
        }
        let pool = Arc::new(Pool {
            workers: procs.iter().map(|p| p.pid()).collect(),
            load: (0..n).map(|_| AtomicUsize::new(0)).collect(),
        });
        let mut threads = Vec::new();
        for (i, p) in procs.into_iter().enumerate() {
            let (svc, pool) = (svc.clone(), pool.clone());
            threads.push(spawn(format!("fs-{}-w{i}", cfg.name), move || worker::worker(p, svc, pool, i))?);
        }
        let pingers = (0..REAPER_PINGS).map(|_| node.attach()).collect::<Result<Vec<_>, _>>()?;
        let (s, st, sweep) = (svc.clone(), stop.clone(), tuning.sweep);
        threads.push(spawn(format!("fs-{}-reaper", cfg.name), move || worker::reaper(pingers, s, sweep, st))?);
        let receiver = node.attach()?;
        let rpid = receiver.pid();
        let (nm, st, s) = (name.clone(), stop.clone(), svc.clone());
        threads.push(spawn(format!("fs-{}-recv", cfg.name), move || worker::receiver(receiver, s, pool, nm, st))?);
        let server = FileServer { node: node.clone(), name, receiver: rpid, svc, threads, stop };
        // Dropped (stopped) if another live server holds the name.
        node.claim_name(&server.name, rpid, Scope::Any).map_err(|e| match e {
            vipc::Error::Protocol(vipc::ProtocolError::NameTaken(by)) => {
                FsError::Protocol(format!("export {:?} is already served by {by}", cfg.name))
            }
            e => e.into(),
        })?;
        Ok(server)
    }

    /// The receiver's pid (what `fs:NAME` resolves to).
    pub fn pid(&self) -> Pid {
        self.receiver
    }

    /// Files the server holds open for its clients.
    pub fn open_handles(&self) -> usize {
        self.svc.handles.len()
    }

    /// Stops the server: unregisters the name, stops its processes, closes its files.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if self.threads.is_empty() {
            return;
        }
        if let Ok(p) = self.node.attach() {
            let mut m = Req::new(OP_STOP).0;
            if p.send(&mut m, self.receiver).is_err() || Rep(m).error() != 0 {
                tracing::debug!("file server {}: the receiver did not acknowledge the stop", self.name);
            }
        }
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.svc.handles.clear();
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> FsResult<JoinHandle<()>> {
    std::thread::Builder::new().name(name).spawn(f).map_err(FsError::from)
}
/// Raises the process's soft limit on open files to its hard limit (each
/// handle is a descriptor; the soft limit is often 1,024) and returns the
/// limit in force, `None` if unknown.
fn raise_open_file_limit() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    if let (Some(cur), Some(max)) = (lim.current, lim.maximum) {
        if cur < max {
            lim.current = Some(max);
            if setrlimit(Resource::Nofile, lim).is_err() {
                lim.current = Some(cur);
            }
        }
    }
    lim.current.or(lim.maximum)
}

/// Handles the clients of one host may hold: as configured, but at most a
/// quarter of the process's open-file limit, so that one host cannot take
/// the descriptors every other host's requests need (at least 16).
fn handles_per_host(configured: usize, open_file_limit: Option<u64>) -> usize {
    let quarter = open_file_limit.map_or(usize::MAX, |l| usize::try_from(l / 4).unwrap_or(usize::MAX).max(16));
    configured.min(quarter)
}

#[cfg(test)]
mod tests {
    use super::{handles_per_host, raise_open_file_limit};

    #[test]
    fn one_host_may_hold_at_most_a_quarter_of_the_open_file_limit() {
        assert_eq!(handles_per_host(4096, Some(1024)), 256);
        assert_eq!(handles_per_host(4096, Some(1 << 20)), 4096);
        assert_eq!(handles_per_host(4096, Some(20)), 16, "never fewer than 16");
        assert_eq!(handles_per_host(4096, None), 4096);
        assert_eq!(handles_per_host(1, Some(1024)), 1);
    }

    /// The soft limit goes up to the hard one (what the server then counts on).
    #[test]
    fn the_open_file_limit_is_raised_to_the_hard_limit() {
        use rustix::process::{getrlimit, Resource};
        let limit = raise_open_file_limit();
        let now = getrlimit(Resource::Nofile);
        assert_eq!(now.current, now.maximum.or(now.current));
        assert_eq!(limit, now.current.or(now.maximum));
    }
}
