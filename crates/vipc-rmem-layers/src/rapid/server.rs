//! The server: polls the flag words of its stacks, runs each new call once
//! with its stack write-protected, and writes the result into the caller's segment.

use super::{newer, result_check, Call, RapidParams, ARGS_AT, HEADER, MAGIC, RESULT_AT, RESULT_TOO_LARGE};
use crate::common::{put32, Error, FailedImports, Result};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use vipc::{Access, ExportedSegment, Node, Notify, ProtectionGroup, RemoteSegment, SegmentName, SegmentOptions};

/// How long the idle server sleeps on its control channel before looking at
/// the flag words again (a call whose notifying datagram was lost still sets its flag).
const TICK: Duration = Duration::from_millis(5);
/// How long an import of a client's result segment may take: it holds the
/// serving loop (a segment that exists answers within a round trip).
const IMPORT_WAIT: Duration = Duration::from_millis(50);
/// A stack whose caller's result segment did not import is not tried again
/// for this long, whatever name its next call gives: each try holds the
/// serving loop, and a caller naming a fresh segment per call would hold it
/// for good.
const IMPORT_PAUSE: Duration = Duration::from_secs(1);

/// What a server did, for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Procedures run.
    pub calls: u64,
    /// Repeats of the last call of a stack answered from the kept result.
    pub resent: u64,
    /// Flags set by a stale call (older than the last run) or by another client's.
    pub ignored: u64,
    /// Writes that arrived while a stack was write-protected, applied after its call.
    pub queued: u64,
}

/// The last call run on a stack, and its result as written.
#[derive(Default)]
struct Slot {
    last: Option<(u32, u32)>,
    reply: Vec<u8>,
    client: Option<(SegmentName, RemoteSegment)>,
    /// When an import for this stack last failed.
    import_failed: Option<Instant>,
}

/// Serves calls on the argument stacks it exports.
pub struct RapidServer {
    node: Node,
    seg: ExportedSegment,
    params: RapidParams,
    slots: Vec<Slot>,
    spin: Duration,
    stats: ServerStats,
    /// Callers' result segments that did not import lately.
    failed: FailedImports,
    /// Stacks to look at in the next pass whatever their notifications say.
    again: BTreeSet<usize>,
}

impl std::fmt::Debug for RapidServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RapidServer").field("params", &self.params).field("stats", &self.stats).finish()
    }
}

impl RapidServer {
    /// Exports the claim cells and `params.slots` argument stacks, writable
    /// by any host, notifying only requests that ask.
    pub fn export(node: &Node, params: RapidParams) -> Result<RapidServer> {
        if !params.valid() {
            return Err(Error::Layout(format!("bad parameters {params:?}")));
        }
        let opts = SegmentOptions {
            access: Access::READ_WRITE,
            notify: Notify::Conditional,
            protection: ProtectionGroup::Any,
        };
        let seg = node.export_segment(params.size(), opts)?;
        let mut head = [0u8; HEADER];
        put32(&mut head, 0, MAGIC);
        put32(&mut head, 4, params.slots as u32);
        put32(&mut head, 8, params.max_args as u32);
        put32(&mut head, 12, params.max_result as u32);
        seg.write(0, &head)?;
        let slots = (0..params.slots).map(|_| Slot::default()).collect();
        let spin = Duration::from_micros(100);
        let (stats, failed) = (ServerStats::default(), FailedImports::default());
        Ok(RapidServer { node: node.clone(), seg, params, slots, spin, stats, failed, again: BTreeSet::new() })
    }

    /// The segment's name: what clients bind to.
    pub fn name(&self) -> SegmentName {
        self.seg.name()
    }

    /// How long [`RapidServer::serve_for`] keeps polling after a call before
    /// it sleeps (003 spun: lower latency, a busy core).
    pub fn set_spin(&mut self, spin: Duration) {
        self.spin = spin;
    }

    /// What this server did so far.
    pub fn stats(&self) -> ServerStats {
        self.stats
    }

    /// Serves calls for `time`: looks at the stacks whose call notified
    /// (every stack each `TICK`, in case a notifying datagram was lost),
    /// keeps polling for the spin time after a call, then sleeps on the
    /// control channel. `handler(proc, args)` returns the result or a
    /// non-zero status. Returns the calls run.
    pub fn serve_for<F>(&mut self, time: Duration, mut handler: F) -> Result<u64>
    where
        F: FnMut(u32, &[u8]) -> Result<Vec<u8>, u32>,
    {
        let (end, before) = (vipc::deadline_after(Instant::now(), time), self.stats.calls);
        let (mut busy_until, mut next_scan) = (Instant::now(), Instant::now());
        loop {
            let now = Instant::now();
            if now >= end {
                return Ok(self.stats.calls - before);
            }
            let mut stacks = self.notified()?;
            if now >= next_scan {
                stacks = (0..self.params.slots).collect();
                next_scan = now + TICK;
            }
            stacks.append(&mut self.again);
            if self.serve_stacks(stacks, &mut handler, end)? > 0 {
                busy_until = vipc::deadline_after(Instant::now(), self.spin);
            } else if now >= busy_until && self.again.is_empty() {
                self.seg.wait_record(TICK.min(end - now))?;
            } else {
                std::thread::yield_now(); // let the node's reader thread run: it brings the calls
            }
        }
    }

    /// Looks at every flag word once and serves what is set; returns how
    /// many flags it served (runs, repeats and ignored ones).
    pub fn poll<F>(&mut self, handler: &mut F) -> Result<usize>
    where
        F: FnMut(u32, &[u8]) -> Result<Vec<u8>, u32>,
    {
        self.notified()?;
        self.again.clear();
        let far = vipc::deadline_after(Instant::now(), Duration::MAX);
        self.serve_stacks((0..self.params.slots).collect(), handler, far)
    }

    /// Drains the control channel: the stacks written with the notify bit.
    fn notified(&self) -> Result<BTreeSet<usize>> {
        let (base, size) = (self.params.stack(0), self.params.stack_size());
        let mut stacks = BTreeSet::new();
        while let Some(r) = self.seg.poll_control()? {
            let i = (r.offset as usize).wrapping_sub(base) / size;
            if i < self.params.slots {
                stacks.insert(i);
            }
        }
        Ok(stacks)
    }

    /// Serves the raised flags among `stacks`, each once, until `end`; a
    /// stack whose queued writes were applied after its call (they may be
    /// its next call), or that `end` left out, is looked at in the next pass:
    /// one busy stack never keeps the others waiting.
    fn serve_stacks<F>(&mut self, stacks: BTreeSet<usize>, handler: &mut F, end: Instant) -> Result<usize>
    where
        F: FnMut(u32, &[u8]) -> Result<Vec<u8>, u32>,
    {
        let mut served = 0;
        for i in stacks {
            if Instant::now() >= end {
                self.again.insert(i);
                continue;
            }
            let mut flag = [0u8; 4];
            self.seg.read(self.params.stack(i) as u32, &mut flag)?;
            if u32::from_le_bytes(flag) == 0 {
                continue;
            }
            let (done, applied) = self.serve_slot(i, handler)?;
            served += usize::from(done);
            if done && applied {
                self.again.insert(i);
            }
        }
        Ok(served)
    }

    /// Serves stack `i` with the stack write-protected: whether the call was
    /// served (false: not whole yet, left for later) and whether writes
    /// queued meanwhile were applied.
    fn serve_slot<F>(&mut self, i: usize, handler: &mut F) -> Result<(bool, bool)>
    where
        F: FnMut(u32, &[u8]) -> Result<Vec<u8>, u32>,
    {
        let (at, size) = (self.params.stack(i) as u32, self.params.stack_size() as u32);
        self.seg.set_protection(at, size, true)?;
        let r = self.serve_protected(i, at, handler);
        // Writes that came meanwhile (a next call, a repeat) are applied now, in order.
        self.seg.set_protection(at, size, false)?;
        let mut applied = false;
        while let Some(w) = self.seg.poll_data()? {
            self.seg.apply(&w)?;
            self.stats.queued += 1;
            applied = true;
        }
        Ok((r?, applied))
    }

    fn serve_protected<F>(&mut self, i: usize, at: u32, handler: &mut F) -> Result<bool>
    where
        F: FnMut(u32, &[u8]) -> Result<Vec<u8>, u32>,
    {
        let call = Call::get(&self.seg.to_vec(at, ARGS_AT)?);
        if call.len as usize > self.params.max_args {
            return Ok(false);
        }
        let args = self.seg.to_vec(at + ARGS_AT as u32, call.len as usize)?;
        if call.check_of(&args) != call.check {
            return Ok(false); // torn: the rest of the call is on its way, or will be written again
        }
        let claim = self.seg.cas_cell(RapidParams::claim(i) as u32)?;
        let slot = &self.slots[i];
        let stale = slot.last.is_some_and(|(n, s)| n == call.nonce && !newer(call.seq, s));
        if claim.value != call.nonce
            || claim.nonce != call.nonce
            || (stale && slot.last != Some((call.nonce, call.seq)))
        {
            self.stats.ignored += 1; // another client's, or older than the last call run
        } else if stale {
            self.stats.resent += 1;
            self.reply(i, call.reply_to)?;
        } else {
            let (status, bytes) = match handler(call.proc, &args) {
                Ok(b) if b.len() > self.params.max_result => (RESULT_TOO_LARGE, Vec::new()),
                Ok(b) => (0, b),
                Err(s) => (s.max(1), Vec::new()),
            };
            self.stats.calls += 1;
            let slot = &mut self.slots[i];
            slot.last = Some((call.nonce, call.seq));
            slot.reply.clear();
            slot.reply.resize(RESULT_AT, 0);
            put32(&mut slot.reply, 0, call.seq);
            put32(&mut slot.reply, 4, status);
            put32(&mut slot.reply, 8, bytes.len() as u32);
            put32(&mut slot.reply, 12, result_check(call.nonce, call.seq, status, &bytes));
            slot.reply.extend_from_slice(&bytes);
            self.reply(i, call.reply_to)?;
        }
        self.seg.write(at, &[0; 4])?; // the flag word: taken
        Ok(true)
    }

    /// Writes stack `i`'s kept result into the caller's result segment. A
    /// caller that cannot be reached (its segment unknown or refusing) is
    /// its own problem, not the server's: it calls again or gives up.
    fn reply(&mut self, i: usize, to: SegmentName) -> Result<()> {
        let slot = &mut self.slots[i];
        if slot.client.as_ref().is_none_or(|(name, _)| *name != to) {
            let paused = slot.import_failed.is_some_and(|at| at.elapsed() < IMPORT_PAUSE);
            slot.client = if paused {
                None // no reply now: the caller writes its call again
            } else {
                self.failed.import(&self.node, to, Access::WRITE, IMPORT_WAIT).map(|seg| (to, seg))
            };
            if !paused {
                slot.import_failed = slot.client.is_none().then(Instant::now);
            }
        }
        if let Some((_, seg)) = &slot.client {
            if seg.write(0, &slot.reply, true).is_err() {
                slot.client = None;
            }
        }
        Ok(())
    }
}
