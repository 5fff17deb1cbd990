//! The client: claims a stack with a CAS-II, writes each call in one remote
//! write, spins then blocks on its own result segment, and writes the same
//! call again when the result is late.

use super::{result_check, Call, RapidParams, ARGS_AT, HEADER, MAGIC, RESULT_AT};
use crate::common::{get32, import_retrying, nonzero_random, probe, Error, Probe, Result};
use std::time::{Duration, Instant};
use vipc::{
    Access, AnonSegment, CasAnswer, ExportedSegment, MemOutcome, Node, Notify, ProtectionGroup, RemoteSegment,
    SegmentName, SegmentOptions,
};

/// Default time before a call is written again (after a liveness read of the claim cell).
pub const RTO: Duration = Duration::from_millis(20);
/// Default spin on the result segment before blocking.
pub const SPIN: Duration = Duration::from_micros(100);
/// Liveness reads in a row that may go unanswered before the server is declared gone.
const SILENT_PROBES: u32 = 10;

/// What a client did, for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Calls that returned a result.
    pub calls: u64,
    /// Calls written again after a timeout.
    pub retransmitted: u64,
    /// Liveness reads of the claim cell.
    pub probes: u64,
}

/// A client bound to one argument stack of a [`super::RapidServer`].
pub struct RapidClient {
    server: RemoteSegment,
    /// Where answers to CAS-IIs and reads land.
    anon: AnonSegment,
    results: ExportedSegment,
    params: RapidParams,
    slot: usize,
    nonce: u32,
    seq: u32,
    rto: Duration,
    spin: Duration,
    buf: Vec<u8>,
    stats: ClientStats,
}

impl std::fmt::Debug for RapidClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RapidClient").field("slot", &self.slot).field("seq", &self.seq).finish()
    }
}

impl RapidClient {
    /// Imports the server's segment, reads its layout, exports a result
    /// segment and claims a free stack: CAS-II of its cell from 0 to 1 with
    /// a fresh nonce (retried with the same nonce when the answer is lost).
    pub fn bind(node: &Node, server: SegmentName, timeout: Duration) -> Result<RapidClient> {
        let deadline = vipc::deadline_after(Instant::now(), timeout);
        let seg = import_retrying(node, server, Access::READ_WRITE, timeout)?;
        let anon = node.anonymous_segment(HEADER)?;
        let head = loop {
            if let Probe::Bytes(b) = probe(&seg, &anon, 0, HEADER as u32, RTO * 5)? {
                break b;
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout);
            }
        };
        let params = RapidParams {
            slots: get32(&head, 4) as usize,
            max_args: get32(&head, 8) as usize,
            max_result: get32(&head, 12) as usize,
        };
        if get32(&head, 0) != MAGIC || !params.valid() || seg.size() as usize != params.size() {
            return Err(Error::Layout(format!("{head:02x?}")));
        }
        let nonce = nonzero_random();
        let slot = claim(&seg, &anon, params.slots, nonce, deadline)?;
        let opts =
            SegmentOptions { access: Access::WRITE, notify: Notify::Conditional, protection: ProtectionGroup::Any };
        let results = node.export_segment(RESULT_AT + params.max_result, opts)?;
        let buf = Vec::with_capacity(ARGS_AT + params.max_args);
        let stats = ClientStats::default();
        Ok(RapidClient { server: seg, anon, results, params, slot, nonce, seq: 0, rto: RTO, spin: SPIN, buf, stats })
    }

    /// Sets the time before a call is written again and the spin before blocking.
    pub fn set_timing(&mut self, rto: Duration, spin: Duration) {
        (self.rto, self.spin) = (rto.max(Duration::from_micros(100)), spin);
    }

    /// The stack this client holds.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// What this client did so far.
    pub fn stats(&self) -> ClientStats {
        self.stats
    }

    /// Calls procedure `proc` with `args` and returns its result.
    /// [`Error::Status`] if it answered a non-zero status, [`Error::PeerGone`]
    /// if the server's segment refuses the liveness read (unexported), its
    /// node stops answering, or the stack was taken from this client,
    /// [`Error::Timeout`] after `timeout` (the call may still run once).
    pub fn call(&mut self, proc: u32, args: &[u8], timeout: Duration) -> Result<Vec<u8>> {
        if args.len() > self.params.max_args {
            return Err(Error::TooLarge { what: "arguments", len: args.len(), max: self.params.max_args });
        }
        let deadline = vipc::deadline_after(Instant::now(), timeout);
        self.seq = self.seq.wrapping_add(1).max(1);
        let reply_to = self.results.name();
        let mut call = Call { seq: self.seq, nonce: self.nonce, proc, len: args.len() as u32, check: 0, reply_to };
        call.check = call.check_of(args);
        self.buf.clear();
        self.buf.resize(ARGS_AT, 0);
        call.put(&mut self.buf);
        self.buf.extend_from_slice(args);
        let at = self.params.stack(self.slot) as u32;
        let mut silent = 0;
        loop {
            self.server.write(at, &self.buf, true)?;
            if let Some(r) = self.wait_result(deadline)? {
                self.stats.calls += 1;
                return r;
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout);
            }
            self.check_alive(&mut silent, deadline)?;
            self.stats.retransmitted += 1;
        }
    }

    /// Spins on the result segment, then blocks on it, until this call's
    /// result is there or the retransmission timeout passes (`None`).
    fn wait_result(&mut self, deadline: Instant) -> Result<Option<Result<Vec<u8>>>> {
        let start = Instant::now();
        let end = vipc::deadline_after(start, self.rto).min(deadline);
        loop {
            if let Some(r) = self.result()? {
                return Ok(Some(r));
            }
            let now = Instant::now();
            if now >= end {
                return Ok(None);
            }
            if now - start < self.spin {
                std::thread::yield_now(); // let the node's reader thread run: it brings the result
                continue;
            }
            self.results.wait_record(end - now)?;
            while self.results.poll_control()?.is_some() {}
        }
    }

    /// This call's result, if it is in the result segment whole.
    fn result(&self) -> Result<Option<Result<Vec<u8>>>> {
        let mut head = [0u8; RESULT_AT];
        self.results.read(0, &mut head)?;
        let (seq, status, len) = (get32(&head, 0), get32(&head, 4), get32(&head, 8) as usize);
        if seq != self.seq || len > self.params.max_result {
            return Ok(None);
        }
        let all = self.results.to_vec(0, RESULT_AT + len)?;
        let bytes = &all[RESULT_AT..];
        if all[..RESULT_AT] != head || result_check(self.nonce, seq, status, bytes) != get32(&head, 12) {
            return Ok(None); // torn, or overwritten since the first read
        }
        Ok(Some(if status == 0 { Ok(bytes.to_vec()) } else { Err(Error::Status(status)) }))
    }

    /// Before writing a call again: reads the claim cell. Refused means the
    /// server's segment is gone; another nonce, that the stack is no longer ours.
    fn check_alive(&mut self, silent: &mut u32, deadline: Instant) -> Result<()> {
        self.stats.probes += 1;
        let wait = self.rto.min(deadline.saturating_duration_since(Instant::now()));
        match probe(&self.server, &self.anon, RapidParams::claim(self.slot) as u32, 8, wait)? {
            Probe::Silent => {
                *silent += 1;
                if *silent >= SILENT_PROBES {
                    return Err(Error::PeerGone(format!("{silent} liveness reads in a row unanswered")));
                }
            }
            Probe::Bytes(b) => {
                *silent = 0;
                let cell = CasAnswer::from_bytes(&b).unwrap_or_default();
                if cell.value != self.nonce || cell.nonce != self.nonce {
                    return Err(Error::PeerGone("the argument stack is no longer this client's".into()));
                }
            }
        }
        Ok(())
    }
}

/// How many times a release is asked before the client gives up on it.
const RELEASE_TRIES: u32 = 10;

impl Drop for RapidClient {
    /// Gives the stack back (CAS-II nonce → 0: only this client's claim,
    /// so a late duplicate never frees another client's), asked again until
    /// answered — the engine never retries a CAS-II, and a lost release
    /// would keep the stack taken for ever — for at most [`RELEASE_TRIES`]
    /// waits of 5 × RTO.
    fn drop(&mut self) {
        let at = RapidParams::claim(self.slot) as u32;
        for _ in 0..RELEASE_TRIES {
            let Ok(op) = self.server.cas(at, self.nonce, 0, self.nonce, (&self.anon, 0)) else { return };
            match op.wait(RTO * 5) {
                Err(e) if is_lost(&e) => continue,
                _ => return,
            }
        }
    }
}

/// Claims the first free stack: CAS-II 0 → `nonce` with `nonce` on each
/// cell in turn (the claim's value is the claimer's own, so that only its
/// release can free it).
fn claim(seg: &RemoteSegment, anon: &AnonSegment, slots: usize, nonce: u32, deadline: Instant) -> Result<usize> {
    for i in 0..slots {
        loop {
            // Every stack taken by others still ends at the deadline.
            if Instant::now() >= deadline {
                return Err(Error::Timeout);
            }
            let op = seg.cas(RapidParams::claim(i) as u32, 0, nonce, nonce, (anon, 0))?;
            match op.wait(RTO * 5) {
                Ok(MemOutcome::Cas(a)) if a.nonce == nonce => return Ok(i),
                Ok(_) => break,                                                 // taken by another client
                Err(e) if Instant::now() < deadline && is_lost(&e) => continue, // same nonce again (003 §4.2.3)
                Err(e) if is_lost(&e) => return Err(Error::Timeout),
                Err(e) => return Err(e.into()),
            }
        }
    }
    Err(Error::NoFreeSlot)
}

/// An answer lost (the wait ended, or the engine's deadline passed).
fn is_lost(e: &vipc::Error) -> bool {
    matches!(e, vipc::Error::StillPending) || matches!(e.protocol(), Some(vipc::ProtocolError::Timeout(_)))
}
