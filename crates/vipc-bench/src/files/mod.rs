//! Suite `files` (issue 4 item 7): the vipc file service beside sshfs and the
//! local file system, with the same workloads in one run, reported as ratios.
//!
//! | item | what |
//! |---|---|
//! | `pages` | random 512 B / 4 KB / 8 KB page reads from the large file: median and p99; 4 KB reads/s with 1, 4, 16 readers |
//! | `sequential` | sequential read and write of the large file (and `vipc cp` against the MoveFrom bulk rate) |
//! | `tree` | `find`, `du -s`, `tar c` of the tree, and untarring it into the mount |
//! | `clients` | the 1985 question (000 ch. 4): N = 1…32 clients with think time reading 8 KB; remote/local elapsed ratio; saturation |
//! | `pipe` | a vipc pipe (`vipc-pipe`, 000 §3.7) on one node and across three, against a kernel pipe, a Unix socket pair and TCP |
//!
//! The compared systems: the local file system (the exported directory
//! itself, warm in the page cache); sshfs against an sshd the bench starts on
//! 127.0.0.1 ([`ssh`]), mounted once without caching (`direct_io,dir_cache=no`)
//! and once with its defaults; and vipc ([`vipcside`]): a file server in a
//! separate process, read through the library ([`vipc_fs::FsClient`]) and,
//! when this build of `vipc` has them, through the FUSE mount (`vipc mount`)
//! and `vipc cp`. Whatever cannot run here is reported as `not measured:
//! REASON`, never as a number.
//!
//! Sizes: a 256 MiB file and a tree of 20,000 files; `--quick` uses 16 MiB,
//! 500 files and few samples.

pub mod data;
pub mod pipe;
pub mod ssh;
pub mod vipcside;
pub mod work;

use crate::error::{BenchError, Result};
use crate::ipc::label;
use crate::peer::PeerExe;
use crate::probe::{find, interleave, Probe};
use crate::Output;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Duration;
use vipc_fs::Handle;
use work::{FileSource, LibSource, Offsets, PageSource};

/// The items of the suite, in the order they run.
pub const ITEMS: &[&str] = &["pages", "sequential", "tree", "clients", "pipe"];

const SUITE: &str = "files";

/// How much each workload does.
#[derive(Clone, Debug)]
pub struct Sizes {
    /// Bytes of the large file.
    pub big: u64,
    /// Files in the tree.
    pub tree: usize,
    /// Page reads per round and per system.
    pub per_round: usize,
    /// Rounds of page reads (and of throughput runs).
    pub rounds: usize,
    /// How long each reads/s measurement runs.
    pub rate_for: Duration,
    /// Rounds of the sequential and tree workloads.
    pub big_rounds: usize,
    /// Client counts of the 1985 question.
    pub clients: Vec<usize>,
    /// Requests per client.
    pub requests: usize,
    /// Think time between a client's requests.
    pub think: Duration,
}

impl Sizes {
    /// The full run, or the smoke run's.
    pub fn new(quick: bool) -> Sizes {
        if quick {
            Sizes {
                big: 16 << 20,
                tree: 500,
                per_round: 100,
                rounds: 1,
                rate_for: Duration::from_millis(100),
                big_rounds: 1,
                clients: vec![1, 8],
                requests: 20,
                think: Duration::from_millis(2),
            }
        } else {
            Sizes {
                big: 256 << 20,
                tree: 20_000,
                per_round: 1000,
                rounds: 3,
                rate_for: Duration::from_secs(1),
                big_rounds: 2,
                clients: vec![1, 2, 4, 8, 16, 32],
                requests: 300,
                think: Duration::from_millis(2),
            }
        }
    }
}

/// Everything the workloads run against; built once per run, torn down when dropped.
struct Env {
    // Dropped in this order: the mounts, then the servers, then the files.
    mount: std::result::Result<vipcside::VipcMount, String>,
    nocache: std::result::Result<ssh::Sshfs, String>,
    cached: std::result::Result<ssh::Sshfs, String>,
    _sshd: Option<ssh::Sshd>,
    vipc: std::result::Result<vipcside::VipcSide, String>,
    cp: std::result::Result<(), String>,
    tmp: tempfile::TempDir,
    export: PathBuf,
    tarball: PathBuf,
    sizes: Sizes,
}

fn reason<T>(r: &std::result::Result<T, String>) -> String {
    match r {
        Ok(_) => String::new(),
        Err(e) => e.clone(),
    }
}

impl Env {
    fn setup(exe: &PeerExe, quick: bool, host: u16) -> Result<Env> {
        let sizes = Sizes::new(quick);
        let tmp = tempfile::Builder::new().prefix("vipc-bench-files-").tempdir()?;
        let export = tmp.path().join("export");
        std::fs::create_dir_all(export.join(data::TREE))?;
        eprintln!("bench: files: writing a {} MiB file and a tree of {} files", sizes.big >> 20, sizes.tree);
        data::write_big(&export.join(data::BIG), sizes.big)?;
        data::write_tree(&export.join(data::TREE), sizes.tree)?;
        let tarball = data::tarball(&export, data::TREE, &tmp.path().join("tree.tar"))?;

        let (sshd, nocache, cached) = match ssh::unavailable() {
            Some(why) => (None, Err(why.clone()), Err(why)),
            None => match ssh::Sshd::start(&tmp.path().join("ssh")) {
                Err(e) => (None, Err(format!("sshd: {e}")), Err(format!("sshd: {e}"))),
                Ok(d) => {
                    let m = |dir: &str, caching: bool| {
                        ssh::Sshfs::mount(&d, &export, &tmp.path().join(dir), caching)
                            .map_err(|e| format!("sshfs: {e}"))
                    };
                    let nocache = m("sshfs-nocache", false);
                    let cached = m("sshfs", true);
                    (Some(d), nocache, cached)
                }
            },
        };
        let vipc =
            vipcside::VipcSide::start(exe, &export, host, host + 1).map_err(|e| format!("vipc file server: {e}"));
        let mount = match &vipc {
            Err(e) => Err(e.clone()),
            Ok(_) if !vipcside::has_subcommand(exe, "mount") => {
                Err("this build of vipc has no `mount` subcommand (crates/vipc-mount not wired in yet)".to_string())
            }
            Ok(_) if !ssh::is_root() || !Path::new("/dev/fuse").exists() => {
                Err("FUSE mounts need root and /dev/fuse".to_string())
            }
            Ok(v) => vipcside::VipcMount::start(exe, &v.spec(), &tmp.path().join("vipc"), host + 2)
                .map_err(|e| format!("vipc mount: {e}")),
        };
        let cp = if vipcside::has_subcommand(exe, "cp") {
            Ok(())
        } else {
            Err("this build of vipc has no `cp` subcommand".to_string())
        };
        for (what, r) in [("sshfs (no caching)", reason(&nocache)), ("sshfs", reason(&cached)), ("vipc", reason(&vipc))]
        {
            if !r.is_empty() {
                eprintln!("bench: files: {what} unavailable: {r}");
            }
        }
        Ok(Env { mount, nocache, cached, _sshd: sshd, vipc, cp, tmp, export, tarball, sizes })
    }
}

/// The suite's state across its items: the environment is built by the first item and kept.
pub struct Session {
    exe: PeerExe,
    quick: bool,
    env: Option<std::result::Result<Env, String>>,
    host: u16,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").field("quick", &self.quick).finish()
    }
}

/// One item's view: the environment and where records go.
struct Ctx<'e, 'o> {
    env: &'e Env,
    out: &'o mut Output,
    exe: &'e PeerExe,
    /// A logical host id free for this item's extra nodes (and the next one).
    host: u16,
}

impl Ctx<'_, '_> {
    fn rec(&mut self, name: &str, value: f64, unit: &str, baseline: &str, baseline_value: f64) {
        self.out.record(crate::Record::new(SUITE, name, value, unit, baseline, baseline_value));
    }

    fn not_measured(&mut self, what: &str, why: &str) {
        let line = format!("files: not measured: {what}: {why}");
        eprintln!("bench: {line}");
        self.out.note(line);
    }
}

impl Session {
    /// A session; logical host ids for its nodes start from a per-process base.
    pub fn new(exe: PeerExe, quick: bool) -> Session {
        let host = 0x4000 + (std::process::id() % 0x300) as u16 * 0x10;
        Session { exe, quick, env: None, host }
    }

    /// Runs one item of the suite.
    pub fn run_item(&mut self, out: &mut Output, item: &str) -> Result<()> {
        if !ITEMS.contains(&item) {
            return Err(BenchError::Other(format!("unknown item files/{item} (items: {})", ITEMS.join(", "))));
        }
        if item == "pipe" {
            // Needs no files: nodes of its own.
            let (total, rounds) = if self.quick { (8 << 20, 1) } else { (256 << 20, 3) };
            return pipe::run(out, self.host + 4, total, rounds);
        }
        let (exe, quick, host) = (&self.exe, self.quick, self.host);
        let env = self.env.get_or_insert_with(|| Env::setup(exe, quick, host).map_err(|e| e.to_string()));
        let env = env.as_ref().map_err(|e| BenchError::Other(format!("files: setting up: {e}")))?;
        let mut ctx = Ctx { env, out, exe, host: host + 8 };
        match item {
            "pages" => pages(&mut ctx),
            "sequential" => sequential(&mut ctx),
            "tree" => tree(&mut ctx),
            _ => clients(&mut ctx),
        }
    }
}

/// The big file opened through a mount (or the local directory).
fn open_big(root: &Path) -> Result<FileSource> {
    Ok(FileSource(File::open(root.join(data::BIG))?))
}

fn lib_open(v: &vipcside::VipcSide) -> Result<Handle> {
    v.client
        .open(data::BIG, work::libc_flags::READ, 0)
        .map(|(h, _)| h)
        .map_err(|e| BenchError::Other(format!("vipc open {}: {e}", data::BIG)))
}

fn page_probe<'a>(name: &str, per_round: usize, src: &'a dyn PageSource, size: usize, file: u64) -> Probe<'a> {
    let mut offs = Offsets::new(0x5eed ^ size as u64, size, file);
    let mut buf = vec![0u8; size];
    Probe::micros(name, per_round, move || work::read_page(src, &mut offs, &mut buf))
}

/// Random page reads: latency by page size, then 4 KB reads/s by readers.
fn pages(ctx: &mut Ctx<'_, '_>) -> Result<()> {
    let env = ctx.env;
    let s = &env.sizes;
    let local = open_big(&env.export)?;
    let sshfs = match &env.nocache {
        Ok(m) => Some(open_big(&m.dir)?),
        Err(e) => {
            ctx.not_measured("sshfs page reads", e);
            None
        }
    };
    let mount = match &env.mount {
        Ok(m) => {
            ctx.out.note(
                "files: the vipc mount keeps the kernel's page cache (sshfs `no caching` does not): its repeated \
                 random reads and its sequential read after the page reads can be cache hits, so its ratios against \
                 sshfs without caching are upper bounds"
                    .into(),
            );
            Some(open_big(&m.dir)?)
        }
        Err(e) => {
            ctx.not_measured("page reads through the vipc mount", e);
            None
        }
    };
    let lib = match &env.vipc {
        Ok(v) => Some((v, lib_open(v)?)),
        Err(e) => {
            ctx.not_measured("page reads through the vipc library", e);
            None
        }
    };
    let lib_src = lib.as_ref().map(|(v, h)| LibSource { client: &v.client, h: *h });
    let srr = lib.as_ref().map(|(v, _)| v.node.attach()).transpose()?;
    for size in [512usize, 4096, 8192] {
        let l = label(size);
        let mut probes = vec![page_probe("local", s.per_round, &local, size, s.big)];
        if let Some(f) = &sshfs {
            probes.push(page_probe("sshfs", s.per_round, f, size, s.big));
        }
        if let Some(f) = &mount {
            probes.push(page_probe("mount", s.per_round, f, size, s.big));
        }
        if let Some(src) = &lib_src {
            probes.push(page_probe("lib", s.per_round, src, size, s.big));
        }
        if let (Some(p), Some((v, _)), 4096) = (&srr, &lib, size) {
            let echo = v.echo;
            probes.push(Probe::micros("srr", s.per_round, move || {
                let t = std::time::Instant::now();
                p.send(&mut [0u8; 32], echo)?;
                Ok(t.elapsed())
            }));
        }
        interleave(&mut probes, s.rounds, s.per_round / 10)?;
        let get = |n: &str| find(&probes, n).map(|p| (p.rounds.median(), p.rounds.p99()));
        let (lm, lp) = get("local")?;
        let has = |n: &str| probes.iter().any(|p| p.name == n);
        let base = if has("sshfs") { Some(get("sshfs")?) } else { None };
        if let Some((m, p)) = base {
            ctx.rec(&format!("files_page_read_{l}_sshfs"), m, "us", &format!("local_pread_{l}"), lm);
            ctx.rec(&format!("files_page_read_{l}_sshfs_p99"), p, "us", &format!("local_pread_{l}_p99"), lp);
        }
        for (n, what) in [("lib", "lib"), ("mount", "mount")] {
            if !has(n) {
                continue;
            }
            let (m, p) = get(n)?;
            ctx.rec(&format!("files_page_read_{l}_{what}"), m, "us", &format!("local_pread_{l}"), lm);
            ctx.rec(&format!("files_page_read_{l}_{what}_p99"), p, "us", &format!("local_pread_{l}_p99"), lp);
            if let Some((sm, sp)) = base {
                ctx.rec(&format!("files_page_read_{l}_{what}_vs_sshfs"), m, "us", &format!("sshfs_nocache_{l}"), sm);
                ctx.rec(
                    &format!("files_page_read_{l}_{what}_p99_vs_sshfs"),
                    p,
                    "us",
                    &format!("sshfs_nocache_{l}_p99"),
                    sp,
                );
            }
        }
        if has("srr") && has("lib") {
            let (srr_m, _) = get("srr")?;
            let (lib_m, _) = get("lib")?;
            ctx.rec(
                &format!("files_page_read_{l}_lib_vs_srr_pread"),
                lib_m,
                "us",
                &format!("srr_remote_32B+local_pread_{l}"),
                srr_m + lm,
            );
        }
    }
    // Reads per second with 1, 4 and 16 readers at once, 4 KB pages.
    for k in [1usize, 4, 16] {
        let mut sources: Vec<(&str, &dyn PageSource)> = vec![("local", &local)];
        if let Some(f) = &sshfs {
            sources.push(("sshfs", f));
        }
        if let Some(f) = &mount {
            sources.push(("mount", f));
        }
        if let Some(src) = &lib_src {
            sources.push(("lib", src));
        }
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); sources.len()];
        for _ in 0..s.rounds {
            for (i, (_, src)) in sources.iter().enumerate() {
                rates[i].push(work::reads_per_sec(*src, 4096, s.big, k, s.rate_for)?);
            }
        }
        let rate = |n: &str| sources.iter().position(|(name, _)| *name == n).map(|i| crate::stats::median(&rates[i]));
        let local_rate = rate("local").unwrap_or(0.0);
        let sshfs_rate = rate("sshfs");
        if let Some(r) = sshfs_rate {
            ctx.rec(&format!("files_randread_4KB_{k}r_sshfs"), r, "reads/s", "local_pread", local_rate);
        }
        for n in ["lib", "mount"] {
            if let Some(r) = rate(n) {
                ctx.rec(&format!("files_randread_4KB_{k}r_{n}"), r, "reads/s", "local_pread", local_rate);
                if let Some(b) = sshfs_rate {
                    ctx.rec(&format!("files_randread_4KB_{k}r_{n}_vs_sshfs"), r, "reads/s", "sshfs_nocache", b);
                }
            }
        }
    }
    if let Some((v, h)) = lib {
        let _ = v.client.close(h);
    }
    Ok(())
}

/// Sequential read and write of the large file.
fn sequential(ctx: &mut Ctx<'_, '_>) -> Result<()> {
    let env = ctx.env;
    let s = &env.sizes;
    const CHUNK: usize = 1 << 20;
    let mut reads: Vec<(&str, Vec<f64>)> = Vec::new();
    let mut writes: Vec<(&str, Vec<f64>)> = Vec::new();
    let mut roots: Vec<(&str, PathBuf)> = vec![("local", env.export.clone())];
    for (name, m, what) in [
        ("sshfs", &env.nocache, "sshfs (no caching) sequential I/O"),
        ("sshfs_cached", &env.cached, "sshfs (default caching) sequential I/O"),
    ] {
        match m {
            Ok(m) => roots.push((name, m.dir.clone())),
            Err(e) => ctx.not_measured(what, e),
        }
    }
    match &env.mount {
        Ok(m) => roots.push(("mount", m.dir.clone())),
        Err(e) => ctx.not_measured("sequential I/O through the vipc mount", e),
    }
    let lib = match &env.vipc {
        Ok(v) => Some((v, lib_open(v)?)),
        Err(e) => {
            ctx.not_measured("sequential I/O through the vipc library", e);
            None
        }
    };
    for _ in 0..s.big_rounds {
        for (name, root) in &roots {
            let r = work::seq_read_path(&root.join(data::BIG), CHUNK)?;
            push(&mut reads, name, r);
            let file = format!("w-{name}.bin");
            let w = work::seq_write_path(&root.join(&file), s.big, CHUNK)?;
            std::fs::remove_file(env.export.join(&file))?;
            push(&mut writes, name, w);
        }
        if let Some((v, h)) = &lib {
            let src = LibSource { client: &v.client, h: *h };
            push(&mut reads, "lib", work::seq_read(&src, s.big, CHUNK)?);
            push(&mut writes, "lib", work::seq_write_lib(&v.client, "w-lib.bin", s.big, CHUNK)?);
            std::fs::remove_file(env.export.join("w-lib.bin"))?;
        }
    }
    for (dir, list) in [("read", &reads), ("write", &writes)] {
        let med = |n: &str| list.iter().find(|(k, _)| *k == n).map(|(_, v)| crate::stats::median(v));
        let local = med("local").unwrap_or(0.0);
        let sshfs = med("sshfs");
        for (n, _) in list.iter().filter(|(n, _)| *n != "local") {
            let v = med(n).unwrap_or(0.0);
            ctx.rec(&format!("files_seq{dir}_{n}"), v, "MB/s", "local", local);
            if let (Some(b), true) = (sshfs, matches!(*n, "mount" | "lib")) {
                ctx.rec(&format!("files_seq{dir}_{n}_vs_sshfs"), v, "MB/s", "sshfs_nocache", b);
            }
        }
    }
    if let Some((v, h)) = lib {
        let _ = v.client.close(h);
    }
    // The bulk rate a copy could reach: MoveFrom of 16 MiB (4 MiB with --quick) from a bench server peer.
    if let Some(lib) = reads.iter().find(|(k, _)| *k == "lib").map(|(_, v)| crate::stats::median(v)) {
        let size = if s.big_rounds > 1 { 16 << 20 } else { 4 << 20 };
        // 25 rounds of 16 MiB (about 75 ms, as long as one copy): with 5, a
        // slow moment of the machine decided the median (4.0-7.3 GB/s in eight runs).
        let mf = movefrom_rate(ctx.exe, ctx.host, size, if s.big_rounds > 1 { 25 } else { 1 })?;
        let mf_name = format!("movefrom_remote_{}", label(size));
        ctx.rec("files_seqread_lib_vs_movefrom", lib, "MB/s", &mf_name, mf);
        match (&env.cp, &env.vipc) {
            (Ok(()), Ok(v)) => {
                let (mut rates, mut local) = (Vec::new(), Vec::new());
                let out = env.tmp.path().join("cp.out");
                for _ in 0..s.big_rounds {
                    rates.push(vipcside::cp_rate(ctx.exe, v, data::BIG, &out, ctx.host + 2)?);
                    local.push(work::copy_path(&env.export.join(data::BIG), &out, vipcside::CP_CHUNK)?);
                }
                let cp = crate::stats::median(&rates);
                let local = crate::stats::median(&local);
                ctx.rec("files_cp_vs_movefrom", cp, "MB/s", &mf_name, mf);
                // Beside it, a MoveFrom of the copied file's whole size: the
                // gap is not the size of the bar's 16 MiB baseline (measured:
                // 256 MiB moves as fast, 4.6 against 4.1 GB/s).
                if s.big as usize > size {
                    let same = movefrom_rate(ctx.exe, ctx.host, s.big as usize, 3)?;
                    let name = format!("movefrom_remote_{}", label(s.big as usize));
                    ctx.rec("files_cp_vs_movefrom_same_size", cp, "MB/s", &name, same);
                }
                // The floor: the same copy with both files on this machine.
                ctx.rec("files_cp_local_copy_vs_movefrom", local, "MB/s", &mf_name, mf);
                ctx.rec("files_cp_vs_local_copy", cp, "MB/s", "local_copy", local);
                if let Some(b) = reads.iter().find(|(k, _)| *k == "sshfs").map(|(_, v)| crate::stats::median(v)) {
                    ctx.rec("files_cp_vs_sshfs", cp, "MB/s", "sshfs_nocache_seqread", b);
                }
            }
            (Err(e), _) | (_, Err(e)) => ctx.not_measured("vipc cp against the MoveFrom bulk rate", e),
        }
    }
    Ok(())
}

/// MoveFrom `size` bytes by a bench server in another process from a node of ours: MB/s (median of `rounds`).
fn movefrom_rate(exe: &PeerExe, host: u16, size: usize, rounds: usize) -> Result<f64> {
    use crate::vserver::{call, request, OP_MOVE_FROM};
    let peer = crate::peer::Peer::spawn(exe, "vipc-server", &["--host".to_string(), host.to_string()])?;
    let addr: std::net::SocketAddr = peer.parsed("addr")?;
    let pid = vipc::Pid(peer.parsed("pid")?);
    let node = vipc::Node::start(crate::vserver::node_config(host + 1, vec![addr], None))?;
    let p = node.attach()?;
    let buf = vec![0x33u8; size];
    // Warm-up at full size: allocations and the location cache are not measured.
    call(&p, pid, &mut request(OP_MOVE_FROM, size, 0), Some(vipc::SegmentRef::Read(&buf)))?;
    let mut rates = Vec::new();
    for _ in 0..rounds.max(1) {
        let t = std::time::Instant::now();
        call(&p, pid, &mut request(OP_MOVE_FROM, size, 0), Some(vipc::SegmentRef::Read(&buf)))?;
        rates.push(size as f64 / t.elapsed().as_secs_f64() / 1e6);
    }
    Ok(crate::stats::median(&rates))
}

fn push<'a>(list: &mut Vec<(&'a str, Vec<f64>)>, name: &'a str, v: f64) {
    match list.iter_mut().find(|(k, _)| *k == name) {
        Some((_, l)) => l.push(v),
        None => list.push((name, vec![v])),
    }
}

/// The metadata workloads on the tree.
fn tree(ctx: &mut Ctx<'_, '_>) -> Result<()> {
    use work::{sh_quote, timed_shell};
    let env = ctx.env;
    let s = &env.sizes;
    let mut roots: Vec<(&str, PathBuf)> = vec![("local", env.export.clone())];
    for (name, m, what) in [
        ("sshfs_cached", &env.cached, "tree workloads on sshfs (default caching)"),
        ("sshfs", &env.nocache, "tree workloads on sshfs (no caching)"),
    ] {
        match m {
            Ok(m) => roots.push((name, m.dir.clone())),
            Err(e) => ctx.not_measured(what, e),
        }
    }
    match &env.mount {
        Ok(m) => roots.push(("mount", m.dir.clone())),
        Err(e) => ctx.not_measured("tree workloads through the vipc mount (find, du, tar, untar)", e),
    }
    let ops = ["find", "du", "tar_c", "untar"];
    let mut times: Vec<(String, Vec<f64>)> = Vec::new();
    let mut add = |k: String, v: f64| match times.iter_mut().find(|(n, _)| *n == k) {
        Some((_, l)) => l.push(v),
        None => times.push((k, vec![v])),
    };
    let mut cache_note = false;
    for round in 0..s.big_rounds {
        for op in ops {
            if round > 0 && matches!(op, "tar_c" | "untar") {
                continue; // tens of seconds each on sshfs with the full tree: one round
            }
            for (name, root) in &roots {
                let tree = sh_quote(&root.join(data::TREE));
                let t = match op {
                    "find" => timed_shell(&format!("find {tree}"))?,
                    "du" => timed_shell(&format!("du -s {tree}"))?,
                    "tar_c" => {
                        let out = env.tmp.path().join(format!("out-{name}.tar"));
                        let t =
                            timed_shell(&format!("tar cf {} -C {} {}", sh_quote(&out), sh_quote(root), data::TREE))?;
                        std::fs::remove_file(out)?;
                        t
                    }
                    _ => {
                        let dest = format!("untar-{name}-{round}");
                        // Each untar starts from clean caches (see drop_caches): else the later ones pay
                        // for the trees created and deleted before them.
                        if let Err(why) = work::drop_caches() {
                            if !cache_note {
                                let line = format!("files: untar: {why}; later untars may be slower for that alone");
                                eprintln!("bench: {line}");
                                ctx.out.note(line);
                                cache_note = true;
                            }
                        }
                        let t = timed_shell(&format!(
                            "mkdir {d} && tar xf {} -C {d}",
                            sh_quote(&env.tarball),
                            d = sh_quote(&root.join(&dest))
                        ))?;
                        std::fs::remove_dir_all(env.export.join(&dest))?;
                        t
                    }
                };
                add(format!("{op}/{name}"), t);
            }
            if let (Ok(v), "find") = (&env.vipc, op) {
                let t = std::time::Instant::now();
                let n = work::lib_walk(&v.client, data::TREE)?;
                let want = s.tree + s.tree.div_ceil(data::PER_DIR);
                if n != want {
                    return Err(format!("library walk saw {n} entries, expected {want}").into());
                }
                add("find/lib_walk".into(), t.elapsed().as_secs_f64());
            }
        }
    }
    let med = |k: &str| times.iter().find(|(n, _)| n == k).map(|(_, v)| crate::stats::median(v));
    for op in ops {
        let local = med(&format!("{op}/local")).unwrap_or(0.0);
        let cached = med(&format!("{op}/sshfs_cached"));
        for name in ["sshfs_cached", "sshfs", "mount", "lib_walk"] {
            let Some(v) = med(&format!("{op}/{name}")) else { continue };
            ctx.rec(&format!("files_{op}_{name}"), v, "s", "local", local);
            if let (Some(b), true) = (cached, matches!(name, "mount" | "lib_walk")) {
                ctx.rec(&format!("files_{op}_{name}_vs_sshfs"), v, "s", "sshfs_cached", b);
            }
        }
    }
    Ok(())
}

/// The 1985 question: N clients with think time reading 8 KB, remote against local.
fn clients(ctx: &mut Ctx<'_, '_>) -> Result<()> {
    let env = ctx.env;
    let s = &env.sizes;
    let v = match &env.vipc {
        Ok(v) => v,
        Err(e) => {
            ctx.not_measured("the 1985 question (vipc clients)", e);
            return Ok(());
        }
    };
    let mut first_rate = None;
    let mut saturated = None;
    for &n in &s.clients {
        let local: Vec<Box<dyn PageSource + Send>> =
            (0..n).map(|_| open_big(&env.export).map(|f| Box::new(f) as _)).collect::<Result<_>>()?;
        let (local_cycle, local_rate) = work::clients(&local, s.big, s.requests, s.think)?;
        let clients: Vec<vipc_fs::FsClient> = (0..n).map(|_| v.new_client()).collect::<Result<_>>()?;
        let mut handles = Vec::new();
        for c in &clients {
            handles.push(lib_open_with(c)?);
        }
        let remote: Vec<Box<dyn PageSource + Send>> = clients
            .iter()
            .zip(&handles)
            .map(|(c, h)| Box::new(LibSource { client: c, h: *h }) as Box<dyn PageSource + Send>)
            .collect();
        let (cycle, rate) = work::clients(&remote, s.big, s.requests, s.think)?;
        drop(remote);
        for (c, h) in clients.iter().zip(handles) {
            let _ = c.close(h);
        }
        ctx.rec(&format!("files_clients_{n}_cycle"), cycle, "ms", "local_cycle", local_cycle);
        ctx.rec(&format!("files_clients_{n}_rate"), rate, "reads/s", "local_rate", local_rate);
        let one = *first_rate.get_or_insert(rate / n as f64);
        if saturated.is_none() && rate < 0.8 * one * n as f64 {
            saturated = Some((n, rate));
        }
    }
    let last = *s.clients.last().unwrap_or(&1);
    match saturated {
        Some((n, rate)) => {
            ctx.rec("files_clients_saturation", n as f64, "clients", "clients_tested", last as f64);
            ctx.out.note(format!(
                "files: the server saturates at {n} clients ({rate:.0} reads/s, below 80% of linear scaling from one client)"
            ));
        }
        None => ctx.out.note(format!("files: no saturation up to {last} clients (within 80% of linear scaling)")),
    }
    Ok(())
}

fn lib_open_with(c: &vipc_fs::FsClient) -> Result<Handle> {
    c.open(data::BIG, work::libc_flags::READ, 0)
        .map(|(h, _)| h)
        .map_err(|e| BenchError::Other(format!("vipc open {}: {e}", data::BIG)))
}
