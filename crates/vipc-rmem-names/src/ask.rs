//! The asking side of a lookup by notification (003 Table 7.3, last row):
//! one remote write with notify of the request into this host's slot of the
//! other clerk's request segment, then a short spin and a sleep on this
//! clerk's answer segment until the answer with the request's sequence
//! number arrives. The request or its answer may be lost and the engine
//! retries nothing, so the same request (same sequence number) is written
//! again every `rto` until the deadline: a lookup is idempotent, the asked
//! clerk answers every copy, and answers to older requests are ignored.

use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::layout::well_known_requests;
use crate::message::{Answer, Request, ANSWER_SIZE, REQUEST_SIZE};
use crate::peers::import_well_known;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use vipc::{Access, ExportedSegment, HostId, Node, Notify, ProtectionGroup, RemoteSegment, SegmentOptions};

/// After this many copies of one request go unanswered the request segment
/// is imported again: its clerk may have restarted, and writes to the old
/// segment are dropped without a word.
const REIMPORT_AFTER: u32 = 3;

/// The shortest wait before a request is written again ([`crate::ClerkParams::notify_rto`]).
const MIN_RTO: Duration = Duration::from_millis(1);

/// What this clerk's lookups by notification cost, counted since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NotifyStats {
    /// Requests (first copies).
    pub requests: u64,
    /// Copies written again because no answer came within `notify_rto`.
    pub resent: u64,
    /// Request segments imported (again after unanswered copies).
    pub imports: u64,
}

/// The asker: its answer segment and the request segments it has imported.
pub(crate) struct Asker {
    node: Node,
    /// Where answers land (other clerks write it; exported with a random name
    /// that travels in each request).
    answer: ExportedSegment,
    requests: HashMap<HostId, RemoteSegment>,
    /// The last request's sequence number (never 0 once used).
    seq: u32,
    rto: Duration,
    spin: Duration,
    pub stats: NotifyStats,
}

/// What is in the answer area now: `Some(answer)` if it answers the request
/// `seq` for `name` by `host`, `None` for anything else (an older request's
/// answer, nothing yet, a torn or foreign one). The entry must be the live
/// entry of `name`, as a pulled one must.
pub(crate) fn accept(bytes: &[u8], seq: u32, host: HostId, name: &str) -> Option<Option<(u32, Entry)>> {
    let a = Answer::parse(bytes).ok()?;
    if a.seq != seq || a.host != host {
        return None;
    }
    match a.found {
        Some((_, ref e)) if e.name != name => None,
        found => Some(found),
    }
}

impl Asker {
    /// Exports the answer segment, writable by `protection`.
    pub fn new(node: &Node, protection: ProtectionGroup, rto: Duration, spin: Duration) -> Result<Asker> {
        let opts = SegmentOptions { access: Access::WRITE, notify: Notify::Conditional, protection };
        let answer = node.export_segment(ANSWER_SIZE, opts)?;
        Ok(Asker {
            node: node.clone(),
            answer,
            requests: HashMap::new(),
            seq: 0,
            rto: rto.max(MIN_RTO),
            spin,
            stats: NotifyStats::default(),
        })
    }

    /// Asks `host`'s clerk for the live entry of `name` (checked by the
    /// caller). `Ok(None)`: its table does not hold it.
    pub fn ask(&mut self, host: HostId, name: &str, deadline: Instant) -> Result<Option<(u32, Entry)>> {
        self.seq = self.seq.wrapping_add(1).max(1);
        let me = self.node.host_id();
        let req = Request { seq: self.seq, host: me, name: name.to_string(), answer: self.answer.name(), answer_at: 0 };
        let bytes = req.encode();
        self.stats.requests += 1;
        let mut unanswered = 0;
        loop {
            let seg = self.request_segment(host, deadline)?;
            let slots = seg.size() / REQUEST_SIZE as u32;
            if slots == 0 {
                return Err(Error::Layout { host, why: format!("a request segment of {} bytes", seg.size()) });
            }
            seg.write(u32::from(me) % slots * REQUEST_SIZE as u32, &bytes, true)?;
            let resend = vipc::deadline_after(Instant::now(), self.rto).min(deadline);
            if let Some(found) = self.await_answer(host, name, resend)? {
                return Ok(found);
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout);
            }
            self.stats.resent += 1;
            unanswered += 1;
            if unanswered == REIMPORT_AFTER {
                self.requests.remove(&host);
            }
        }
    }

    /// Spins for `spin` on the answer area, then sleeps on its control
    /// channel (the answer is written with notify) until `until`.
    fn await_answer(&mut self, host: HostId, name: &str, until: Instant) -> Result<Option<Option<(u32, Entry)>>> {
        let spin_until = vipc::deadline_after(Instant::now(), self.spin);
        loop {
            if let Some(found) = self.answered(host, name)? {
                return Ok(Some(found));
            }
            let now = Instant::now();
            if now >= until {
                return Ok(None);
            }
            if now < spin_until {
                std::thread::yield_now();
                continue;
            }
            // Drain first, look again, then sleep: an answer that lands after
            // the look leaves a record that ends the sleep.
            while self.answer.poll_control()?.is_some() {}
            if let Some(found) = self.answered(host, name)? {
                return Ok(Some(found));
            }
            self.answer.wait_record(until - now)?;
        }
    }

    fn answered(&self, host: HostId, name: &str) -> Result<Option<Option<(u32, Entry)>>> {
        let mut b = [0u8; ANSWER_SIZE];
        self.answer.read(0, &mut b)?;
        Ok(accept(&b, self.seq, host, name))
    }

    /// `host`'s request segment, imported the first time (and again after
    /// unanswered copies).
    fn request_segment(&mut self, host: HostId, deadline: Instant) -> Result<RemoteSegment> {
        if let Some(seg) = self.requests.get(&host) {
            return Ok(seg.clone());
        }
        let seg = import_well_known(&self.node, host, well_known_requests(host), Access::WRITE, deadline)?;
        self.stats.imports += 1;
        self.requests.insert(host, seg.clone());
        Ok(seg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::{Binding, EntryState};

    fn entry(name: &str) -> Entry {
        let binding = Binding { segment: [1; 16], host: 4, size: 8, access: Access::READ, meta: 0 };
        Entry { state: EntryState::Live, incarnation: 3, generation: 9, name: name.into(), binding }
    }

    #[test]
    fn only_the_answer_to_this_request_is_taken() {
        let a = Answer { seq: 5, host: 4, found: Some((2, entry("svc"))) };
        assert_eq!(accept(&a.encode(), 5, 4, "svc"), Some(Some((2, entry("svc")))));
        assert_eq!(accept(&a.encode(), 6, 4, "svc"), None, "an older request's answer");
        assert_eq!(accept(&a.encode(), 5, 3, "svc"), None, "another host's");
        assert_eq!(accept(&a.encode(), 5, 4, "other"), None, "another name's");
        assert_eq!(accept(&[0u8; ANSWER_SIZE], 5, 4, "svc"), None, "nothing yet");
        let mut torn = a.encode();
        torn[100] ^= 1;
        assert_eq!(accept(&torn, 5, 4, "svc"), None);
        let miss = Answer { seq: 5, host: 4, found: None };
        assert_eq!(accept(&miss.encode(), 5, 4, "svc"), Some(None));
    }
}
