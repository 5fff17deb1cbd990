//! One node's band of rows, with `depth` ghost rows on each side. After
//! every `depth` half-sweeps the worker writes its `depth` top and bottom
//! rows into its neighbours' inboxes by remote write (with the notify bit)
//! and keeps a copy in its own outbox; before the next half-sweep it waits,
//! asleep on its control channel, until both ghosts of that exchange are in
//! its inbox. In between it updates the ghost rows it holds as well as its
//! own (each half-sweep one ghost row less on each side), which computes
//! exactly what the neighbours compute for those rows (every spin's update
//! is a function of its neighbours and a hash of where and when). Depth d
//! divides the exchanges by d for (d − 1)/2 rows' extra work per side and
//! half-sweep: on an 80×80 grid over 4 nodes sharing 2 CPUs, exchanging
//! after every half-sweep (d = 1) cost 1.3–1.7 × one node's sweep, d = 4
//! 0.92–1.12 ×, d = 8 (the default) 0.86–0.99 × (eight runs each, in
//! alternating order). A ghost still missing after `rto` is read
//! from the neighbour's outbox: the neighbour's node answers, no thread of
//! the neighbour runs.

use super::layout::{decode, encode, inbox, outbox, segment_len, slot_len, Ghost};
use super::model::{Band, IsingParams};
use crate::{Error, Result};
use std::time::{Duration, Instant};
use vipc::{Access, AnonSegment, ExportedSegment, Node, Notify, ProtectionGroup, RemoteSegment};
use vipc::{SegmentName, SegmentOptions};

/// Where a worker sits and how patient it is.
#[derive(Clone, Copy, Debug)]
pub struct WorkerConfig {
    /// This worker's index, 0..workers; it owns rows `rank·L/P .. (rank+1)·L/P`.
    pub rank: usize,
    /// P.
    pub workers: usize,
    /// How long a ghost may be missing before it is read from the neighbour.
    pub rto: Duration,
    /// How long a ghost may be missing before the run fails.
    pub timeout: Duration,
    /// How long to look at the inbox again and again before sleeping on
    /// the control channel (a wake-up costs more than a neighbour's row
    /// usually takes to come).
    pub spin: Duration,
    /// Ghost rows on each side, 1 to 8: the half-sweeps between exchanges
    /// (fewer if a band has fewer rows; every worker must be given the same).
    pub depth: usize,
}

impl WorkerConfig {
    /// Worker `rank` of `workers`, exchanging every fourth sweep (depth 8),
    /// spinning 50 µs, reading a missing ghost after 5 ms, failing after 10 s.
    pub fn new(rank: usize, workers: usize) -> WorkerConfig {
        let (rto, timeout, spin) = (Duration::from_millis(5), Duration::from_secs(10), Duration::from_micros(50));
        WorkerConfig { rank, workers, rto, timeout, spin, depth: 8 }
    }
}

/// What a worker's exchanges cost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Half-sweeps done.
    pub half_sweeps: u64,
    /// Rows remote-written to neighbours.
    pub rows_written: u64,
    /// Ghosts found missing after `rto` and read from the neighbour's outbox.
    pub rows_fetched: u64,
    /// Reads of a neighbour's outbox that found nothing usable (not yet there, or unanswered).
    pub empty_fetches: u64,
}

/// One node's share of the grid: see the module's documentation.
pub struct IsingWorker {
    params: IsingParams,
    cfg: WorkerConfig,
    band: Band,
    seg: ExportedSegment,
    anon: AnonSegment,
    /// The neighbours above and below (none with one worker).
    peers: Option<[RemoteSegment; 2]>,
    stats: WorkerStats,
}

impl std::fmt::Debug for IsingWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IsingWorker").field("cfg", &self.cfg).field("stats", &self.stats).finish()
    }
}

impl IsingWorker {
    /// Exports the worker's segment on `node`, its band in the initial state.
    pub fn export(node: &Node, params: &IsingParams, cfg: WorkerConfig) -> Result<IsingWorker> {
        let (n, p) = (params.size, cfg.workers);
        if n < 2 || n % 2 != 0 || p == 0 || n < p || cfg.rank >= p || !(1..=8).contains(&cfg.depth) {
            return Err(Error::Params(format!(
                "a {n}×{n} grid (even, ≥ 2) over {p} workers, rank {}, depth {} (1 to 8)",
                cfg.rank, cfg.depth
            )));
        }
        // Every band has at least n / p rows: each sends `depth` of them to a side.
        let depth = cfg.depth.min(n / p);
        let first = cfg.rank * n / p;
        let band = Band::new(params, first, (cfg.rank + 1) * n / p - first, depth);
        let opts = SegmentOptions {
            access: Access::READ_WRITE,
            notify: Notify::Conditional,
            protection: ProtectionGroup::Any,
        };
        let seg = node.export_segment(segment_len(depth * n), opts)?;
        let anon = node.anonymous_segment(slot_len(depth * n))?;
        Ok(IsingWorker { params: *params, cfg, band, seg, anon, peers: None, stats: WorkerStats::default() })
    }

    /// The name of its segment, for the neighbours.
    pub fn name(&self) -> SegmentName {
        self.seg.name()
    }

    /// Imports the segments of the neighbours above and below (the same one
    /// with two workers). With one worker there is nothing to connect.
    pub fn connect(&mut self, node: &Node, above: SegmentName, below: SegmentName, timeout: Duration) -> Result<()> {
        if self.cfg.workers > 1 {
            let up = vipc_rmem_layers::import_retrying(node, above, Access::READ_WRITE, timeout)?;
            let down = vipc_rmem_layers::import_retrying(node, below, Access::READ_WRITE, timeout)?;
            self.peers = Some([up, down]);
        }
        Ok(())
    }

    /// Runs `sweeps` more sweeps (two half-sweeps each), going on from where the last call stopped.
    pub fn run(&mut self, sweeps: u64) -> Result<()> {
        let d = self.band.depth() as u64;
        for _ in 0..2 * sweeps {
            let h = self.stats.half_sweeps + 1;
            if self.peers.is_none() {
                self.band.half_sweep(h, 0);
                self.band.wrap_ghosts();
            } else {
                let since = (h - 1) % d; // half-sweeps since the last exchange
                if since == 0 && h > 1 {
                    self.ghosts((h - 1) / d)?;
                }
                self.band.half_sweep(h, (d - 1 - since) as usize);
                if h % d == 0 {
                    self.publish(h / d)?;
                }
            }
            self.stats.half_sweeps = h;
        }
        Ok(())
    }

    /// The first grid row it owns.
    pub fn first_row(&self) -> usize {
        self.band.first()
    }

    /// Its rows, in grid order.
    pub fn rows(&self) -> &[i8] {
        self.band.owned()
    }

    /// What its exchanges have cost so far.
    pub fn stats(&self) -> WorkerStats {
        self.stats
    }

    /// Hands the rows of exchange `e` to the neighbours: the top rows become
    /// the ghost below of the worker above, the bottom rows the ghost above
    /// of the worker below.
    fn publish(&mut self, e: u64) -> Result<()> {
        let Some(peers) = &self.peers else { return Ok(()) };
        let (d, r, width) = (self.band.depth(), self.band.rows(), self.slot_width());
        let (top, bottom) = (self.band.rows_at(d, d), self.band.rows_at(r, d));
        for (g, rows, to) in [(Ghost::Below, top, &peers[0]), (Ghost::Above, bottom, &peers[1])] {
            let slot = encode(g, e, rows);
            self.seg.write(outbox(width, g, e), &slot)?;
            to.write(inbox(width, g, e), &slot, true)?;
            self.stats.rows_written += d as u64;
        }
        Ok(())
    }

    /// Waits until both ghosts of exchange `h` are in, fetching any missing after `rto`.
    fn ghosts(&mut self, h: u64) -> Result<()> {
        if self.peers.is_none() {
            return Ok(());
        }
        let width = self.slot_width();
        let mut missing = Ghost::BOTH.to_vec();
        let start = Instant::now();
        let mut fetch_at = start + self.cfg.rto;
        loop {
            while self.seg.poll_control()?.is_some() {} // every wake-up is looked at below
            let mut still = Vec::new();
            for g in missing {
                match decode(g, h, &self.seg.to_vec(inbox(width, g, h), slot_len(width))?) {
                    Some(row) => self.set_ghost(g, &row),
                    None => still.push(g),
                }
            }
            missing = still;
            if missing.is_empty() {
                return Ok(());
            }
            let now = Instant::now();
            if now >= start + self.cfg.timeout {
                return Err(Error::Timeout(format!("rank {}: the ghost rows of exchange {h}", self.cfg.rank)));
            }
            if now >= fetch_at {
                let mut still = Vec::new();
                for g in missing {
                    match self.fetch(g, h)? {
                        Some(row) => self.set_ghost(g, &row),
                        None => still.push(g),
                    }
                }
                missing = still;
                fetch_at = Instant::now() + self.cfg.rto;
                continue;
            }
            if now < start + self.cfg.spin {
                std::thread::yield_now();
                continue;
            }
            self.seg.wait_record(fetch_at - now)?;
        }
    }

    /// Reads ghost `g` of exchange `h` from the outbox of the neighbour on that side.
    fn fetch(&mut self, g: Ghost, h: u64) -> Result<Option<Vec<i8>>> {
        let Some(peers) = &self.peers else { return Ok(None) };
        let width = self.slot_width();
        let from = &peers[g as usize];
        let op = from.read(outbox(width, g, h), slot_len(width) as u32, (&self.anon, 0), false)?;
        let row = match op.wait(self.cfg.rto) {
            Ok(_) => decode(g, h, &self.anon.to_vec(0, slot_len(width))?),
            Err(e) if crate::error::lost(&e) => None,
            Err(e) => return Err(e.into()),
        };
        match row {
            Some(_) => self.stats.rows_fetched += 1,
            None => self.stats.empty_fetches += 1,
        }
        Ok(row)
    }

    /// The spins one slot carries: the `depth` rows of one exchange to one side.
    fn slot_width(&self) -> usize {
        self.band.depth() * self.params.size
    }

    fn set_ghost(&mut self, g: Ghost, rows: &[i8]) {
        let k = match g {
            Ghost::Above => 0,
            Ghost::Below => self.band.depth() + self.band.rows(),
        };
        self.band.set_rows(k, rows);
    }
}
