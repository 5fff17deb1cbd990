//! The serving side of a lookup by notification: a thread that sleeps on
//! the control channel of the clerk's request segment, and for each
//! notified write reads the slots it touched, looks each request up in the
//! clerk's own table and writes the answer into the asker's answer segment
//! with one remote write (with notify). The slots are written by other
//! hosts: a slot that does not parse is counted and ignored, never trusted.

use crate::entry::ParseError;
use crate::error::Result;
use crate::layout::well_known_requests;
use crate::local::LocalTable;
use crate::lock;
use crate::message::{Answer, Request, ANSWER_SIZE, REQUEST_SIZE};
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use vipc::{
    Access, ExportedSegment, HostId, MemOp, Node, Notify, ProtectionGroup, RemoteSegment, SegmentName, SegmentOptions,
};
use vipc_rmem_layers::FailedImports;

/// How often the sleeping thread looks at its stop flag (records of its
/// request segment wake it besides).
const TICK: Duration = Duration::from_millis(50);
/// Answer segments kept imported; past this the map is emptied (a bound on
/// what garbage requests naming ever new segments can make it hold).
const MAX_ANSWER_IMPORTS: usize = 256;
/// How long an answer segment that did not import is not tried again.
const FAILED_FOR: Duration = Duration::from_secs(5);

/// What a clerk's serving thread has done, counted since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServeStats {
    /// Requests answered (found or not).
    pub answered: u64,
    /// Slots that did not parse as a request of their slot: ignored.
    pub bad_requests: u64,
    /// Requests whose answer segment could not be imported or does not hold
    /// the answer area: not answered.
    pub unreachable: u64,
}

#[derive(Default)]
struct Counters {
    answered: AtomicU64,
    bad_requests: AtomicU64,
    unreachable: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The running thread; dropping it stops the thread and unexports the request segment.
pub(crate) struct Serving {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
}

/// How the server is set up.
pub(crate) struct ServeParams {
    pub slots: u32,
    pub protection: ProtectionGroup,
    pub window: u32,
    /// How long importing an asker's answer segment may take.
    pub import_wait: Duration,
}

impl Serving {
    /// Exports the request segment at the node's well-known name (writable
    /// by `protection`, notified of writes that ask) and starts the thread.
    pub fn start(node: &Node, table: Arc<Mutex<LocalTable>>, p: ServeParams) -> Result<Serving> {
        let opts = SegmentOptions { access: Access::WRITE, notify: Notify::Conditional, protection: p.protection };
        let slots = p.slots.clamp(1, 1 << 16);
        let requests =
            node.export_segment_named(well_known_requests(node.host_id()), slots as usize * REQUEST_SIZE, opts)?;
        let (stop, counters) = (Arc::new(AtomicBool::new(false)), Arc::new(Counters::default()));
        let server = Server {
            node: node.clone(),
            requests,
            slots,
            table,
            window: p.window,
            import_wait: p.import_wait,
            answers: HashMap::new(),
            failed: FailedImports::new(FAILED_FOR),
            counters: counters.clone(),
        };
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("names-serve-{}", node.host_id()))
            .spawn(move || server.run(&flag))
            .map_err(|e| vipc::Error::Internal(format!("starting the serving thread: {e}")))?;
        Ok(Serving { stop, thread: Some(thread), counters })
    }

    pub fn stats(&self) -> ServeStats {
        let c = &self.counters;
        ServeStats {
            answered: c.answered.load(Ordering::Relaxed),
            bad_requests: c.bad_requests.load(Ordering::Relaxed),
            unreachable: c.unreachable.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The slots a write of `len` bytes at `offset` touched (within `slots`).
pub(crate) fn slots_touched(offset: u32, len: u32, slots: u32) -> Range<u32> {
    let size = REQUEST_SIZE as u64;
    let first = u64::from(offset) / size;
    let end = (u64::from(offset) + u64::from(len)).div_ceil(size);
    (first.min(u64::from(slots)) as u32)..(end.min(u64::from(slots)) as u32)
}

/// Parses slot `slot` of `slots`: a request, and one its host may write
/// there (host mod slots).
pub(crate) fn parse_slot(bytes: &[u8], slot: u32, slots: u32) -> Result<Request, ParseError> {
    let r = Request::parse(bytes)?;
    if u32::from(r.host) % slots.max(1) != slot {
        return Err(ParseError::Field("host"));
    }
    Ok(r)
}

struct Server {
    node: Node,
    requests: ExportedSegment,
    slots: u32,
    table: Arc<Mutex<LocalTable>>,
    window: u32,
    import_wait: Duration,
    /// Askers' answer segments, imported once.
    answers: HashMap<SegmentName, RemoteSegment>,
    /// Answer segments that did not import (or not from their asker's host).
    failed: FailedImports,
    counters: Arc<Counters>,
}

impl Server {
    /// Sleeps on the control channel and serves what it announces, until
    /// told to stop or the node stops.
    fn run(mut self, stop: &AtomicBool) {
        while !stop.load(Ordering::SeqCst) {
            // Only the node stopping can fail these on the clerk's own segment.
            if self.requests.wait_record(TICK).is_err() || self.drain().is_err() {
                return;
            }
        }
    }

    /// Serves every slot the waiting records name, each once: copies of a
    /// request written again while this thread was busy need one answer.
    fn drain(&mut self) -> Result<(), vipc::Error> {
        // Each slot with the host that last wrote it.
        let mut touched = BTreeMap::new();
        while let Some(rec) = self.requests.poll_control()? {
            if rec.op == MemOp::Write {
                touched.extend(slots_touched(rec.offset, rec.len, self.slots).map(|slot| (slot, rec.from)));
            }
        }
        for (slot, writer) in touched {
            self.serve_slot(slot, writer)?;
        }
        Ok(())
    }

    fn serve_slot(&mut self, slot: u32, writer: HostId) -> Result<(), vipc::Error> {
        let bytes = self.requests.to_vec(slot * REQUEST_SIZE as u32, REQUEST_SIZE)?;
        // A host asks in its own name only: its slot, written by itself.
        let req = match parse_slot(&bytes, slot, self.slots) {
            Ok(r) if r.host == writer => r,
            _ => {
                bump(&self.counters.bad_requests);
                return Ok(());
            }
        };
        let found = match lock(&self.table).find(&req.name, self.window) {
            Ok(found) => found,
            // Our own table failed its check: answer nothing rather than a guess.
            Err(_) => return Ok(()),
        };
        let answer = Answer { seq: req.seq, host: self.node.host_id(), found }.encode();
        match self.answer_segment(&req).map(|seg| seg.write(req.answer_at, &answer, true)) {
            Some(Ok(())) => bump(&self.counters.answered),
            Some(Err(_)) | None => bump(&self.counters.unreachable),
        }
        Ok(())
    }

    /// The asker's answer segment — one of its own host's — if it imports
    /// and holds the answer area. A name that failed to import is not tried
    /// again for [`FAILED_FOR`]: each try holds this thread for `import_wait`.
    fn answer_segment(&mut self, req: &Request) -> Option<RemoteSegment> {
        if !self.answers.contains_key(&req.answer) {
            let seg = self.failed.import(&self.node, req.answer, Access::WRITE, self.import_wait)?;
            if seg.host() != req.host {
                self.failed.failed(req.answer);
                return None;
            }
            if self.answers.len() >= MAX_ANSWER_IMPORTS {
                self.answers.clear();
            }
            self.answers.insert(req.answer, seg);
        }
        let seg = self.answers.get(&req.answer)?;
        let fits = u64::from(req.answer_at) + ANSWER_SIZE as u64 <= u64::from(seg.size());
        fits.then(|| seg.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_touches_the_slots_it_spans_and_no_slot_past_the_end() {
        let r = REQUEST_SIZE as u32;
        assert_eq!(slots_touched(0, r, 4), 0..1);
        assert_eq!(slots_touched(r - 8, 16, 4), 0..2);
        assert_eq!(slots_touched(3 * r, 5 * r, 4), 3..4);
        assert_eq!(slots_touched(u32::MAX, u32::MAX, 4), 4..4);
        assert_eq!(slots_touched(0, 0, 4), 0..0);
    }

    #[test]
    fn garbage_slots_never_parse_and_never_panic() {
        let good = Request { seq: 1, host: 6, name: "n".into(), answer: [0; 16], answer_at: 0 };
        assert_eq!(parse_slot(&good.encode(), 2, 4), Ok(good.clone()), "host 6 writes slot 6 mod 4");
        assert_eq!(parse_slot(&good.encode(), 1, 4), Err(ParseError::Field("host")));
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..300 {
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            assert!(parse_slot(&bytes, 0, 1).is_err(), "{len} random bytes parsed");
        }
    }
}
