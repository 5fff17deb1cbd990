//! Remote memory (003, PROTOCOL §4.15): segments a node exports, handles
//! to other nodes' segments, and the operations on them.
//!
//! The node's runtime serves remote reads, writes and CAS-IIs on the
//! segments it exports by itself — no thread of the exporting program runs
//! — and only tells the program about them if the segment's notification
//! policy says so, on the segment's control channel.
//!
//! ```
//! use vipc::{Access, Node, NodeConfig, SegmentOptions};
//! use std::time::Duration;
//! # fn main() -> Result<(), vipc::Error> {
//! let a = Node::start(NodeConfig::fixed(1, "127.0.0.1:0".parse().unwrap(), vec![]))?;
//! let b = Node::start(NodeConfig::fixed(2, "127.0.0.1:0".parse().unwrap(), vec![a.local_addr()]))?;
//! let seg = a.export_segment(4096, SegmentOptions { access: Access::READ_WRITE, ..Default::default() })?;
//! let remote = b.import_segment(seg.name(), Access::READ_WRITE, Duration::from_secs(2))?;
//! remote.write(100, b"hello", false)?;                 // fire-and-forget
//! let local = b.anonymous_segment(64)?;
//! let op = remote.read(100, 5, (&local, 0), false)?;   // answered into `local`
//! op.wait(Duration::from_secs(2))?;
//! assert_eq!(local.to_vec(0, 5)?, b"hello");
//! # Ok(()) }
//! ```

use crate::runtime::Shared;
use crate::{Error, Node, Result};
use std::sync::{Arc, Condvar};
use std::time::{Duration, Instant};
use vipc_engine::{
    Access, Cas, CasAnswer, ControlRecord, DataRecord, HostId, Imported, MemOpId, MemOutcome, SegmentId, SegmentName,
    SegmentOptions, Strided,
};

impl Node {
    /// Exports `size` zeroed bytes under a fresh 128-bit name read from the
    /// operating system's random source (getrandom): unguessable (003
    /// §3.4.2). The segment is unexported when the handle is dropped.
    pub fn export_segment(&self, size: usize, opts: SegmentOptions) -> Result<ExportedSegment> {
        let mut name: SegmentName = [0; 16];
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut name);
        self.export_segment_named(name, size, opts)
    }

    /// Exports `size` zeroed bytes under a name the caller chose: for
    /// well-known segments that services bootstrap from (003 §4.2.6 reserves
    /// such segments for the name server's clerks). Such a name is guessable
    /// by design — restrict the segment with its protection group and access,
    /// not its name. Fails if this node already exports a segment of that name.
    pub fn export_segment_named(
        &self,
        name: SegmentName,
        size: usize,
        opts: SegmentOptions,
    ) -> Result<ExportedSegment> {
        let shared = self.shared().clone();
        let id = shared.call(None, |e, _| e.export_segment(Some(name), size, opts))?;
        Ok(ExportedSegment { seg: Local { shared, id, size: size as u32 }, name })
    }

    /// A segment no other host can import or write except with the answers
    /// to this node's reads and CAS-IIs: their destination. Freed on drop.
    pub fn anonymous_segment(&self, size: usize) -> Result<AnonSegment> {
        let shared = self.shared().clone();
        let id = shared.call(None, |e, _| e.export_segment(None, size, SegmentOptions::default()))?;
        Ok(AnonSegment { seg: Local { shared, id, size: size as u32 } })
    }

    /// Looks `name` up (this node, then a broadcast) and returns a handle to
    /// the segment if its owner grants `access` to this host. Maps nothing.
    /// Fails with `Refused(UnknownName)` if nobody answers within the node's
    /// `rmem_timeout`, [`Error::StillPending`] if `timeout` ends first.
    pub fn import_segment(&self, name: SegmentName, access: Access, timeout: Duration) -> Result<RemoteSegment> {
        let shared = self.shared().clone();
        let op = shared.call(None, |e, now| e.mem_import(now, name, access))?;
        let op = PendingOp { shared: shared.clone(), op: Some(op) };
        match op.wait(timeout)? {
            MemOutcome::Import(target) => Ok(RemoteSegment { shared, target }),
            other => Err(Error::Internal(format!("an import finished with {other:?}"))),
        }
    }
}

/// A segment of this node's descriptor table, freed when dropped.
struct Local {
    shared: Arc<Shared>,
    id: SegmentId,
    size: u32,
}

impl Local {
    fn read(&self, offset: u32, buf: &mut [u8]) -> Result<()> {
        self.shared.call_on_segment(self.id, |e, _| e.segment_read(self.id, offset, buf))
    }

    fn to_vec(&self, offset: u32, len: usize) -> Result<Vec<u8>> {
        // Checked before allocating: `len` may be anything the caller passed.
        let (offset64, len64, size) = (u64::from(offset), len as u64, u64::from(self.size));
        if offset64 + len64 > size {
            return Err(vipc_engine::Error::OutOfSegment { offset: offset64, len: len64, size }.into());
        }
        let mut v = vec![0; len];
        self.read(offset, &mut v)?;
        Ok(v)
    }
}

impl std::fmt::Debug for Local {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment").field("id", &self.id).field("size", &self.size).finish()
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        let id = self.id;
        if let Err(e) = self.shared.call(None, |e, _| e.unexport_segment(id)) {
            tracing::debug!("freeing segment {id:?}: {e}");
        }
    }
}

/// A segment this node exports: other hosts operate on it through the
/// node's runtime; the program reads and writes its bytes here, decides
/// which ranges remote hosts may write (write-inhibition), and drains the
/// control (notifications) and data (inhibited writes) channels.
pub struct ExportedSegment {
    seg: Local,
    name: SegmentName,
}

/// Without the name: it is the segment's secret.
impl std::fmt::Debug for ExportedSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ExportedSegment").field(&self.seg).finish()
    }
}

impl ExportedSegment {
    /// The 128-bit name importers look it up by: hand it only to whoever should import it.
    pub fn name(&self) -> SegmentName {
        self.name
    }

    /// Its size in bytes.
    pub fn size(&self) -> u32 {
        self.seg.size
    }

    /// Copies bytes out, atomically with respect to every remote operation.
    pub fn read(&self, offset: u32, buf: &mut [u8]) -> Result<()> {
        self.seg.read(offset, buf)
    }

    /// `len` bytes at `offset`, as a vector.
    pub fn to_vec(&self, offset: u32, len: usize) -> Result<Vec<u8>> {
        self.seg.to_vec(offset, len)
    }

    /// Writes bytes, atomically with respect to every remote operation (no
    /// access, protection or inhibition applies to the owner).
    pub fn write(&self, offset: u32, data: &[u8]) -> Result<()> {
        let id = self.seg.id;
        self.seg.shared.call(None, |e, _| e.segment_write(id, offset, data))
    }

    /// The CAS-II cell at `offset`: {value, nonce of the last successful swapper}.
    pub fn cas_cell(&self, offset: u32) -> Result<CasAnswer> {
        let mut b = [0; vipc_engine::CAS_CELL];
        self.read(offset, &mut b)?;
        Ok(CasAnswer::from_bytes(&b).unwrap_or_default())
    }

    /// Write-inhibits `[offset, offset + len)` (`inhibit`), or lifts it
    /// (003 MPROT / MUNPROT): remote writes touching it are queued on the
    /// data channel instead of applied, CAS-IIs there are refused.
    pub fn set_protection(&self, offset: u32, len: u32, inhibit: bool) -> Result<()> {
        let id = self.seg.id;
        self.seg.shared.call(None, |e, _| e.segment_set_inhibit(id, offset, len, inhibit))
    }

    /// The next notification, if any.
    pub fn poll_control(&self) -> Result<Option<ControlRecord>> {
        let id = self.seg.id;
        self.seg.shared.call(None, |e, _| e.segment_poll_control(id))
    }

    /// The next write queued because it hit a write-inhibited range, if any.
    pub fn poll_data(&self) -> Result<Option<DataRecord>> {
        let id = self.seg.id;
        self.seg.shared.call(None, |e, _| e.segment_poll_data(id))
    }

    /// Applies a queued write to the segment (the exporter decides when):
    /// all of it, or nothing if any piece falls outside the segment.
    pub fn apply(&self, record: &DataRecord) -> Result<()> {
        let size = self.size() as u64;
        for (offset, piece) in record.pieces() {
            if offset.checked_add(piece.len() as u64).is_none_or(|end| end > size) {
                return Err(vipc_engine::Error::OutOfSegment { offset, len: piece.len() as u64, size }.into());
            }
        }
        for (offset, piece) in record.pieces() {
            self.write(offset as u32, piece)?;
        }
        Ok(())
    }

    /// Blocks until the control or data channel holds a record (true) or
    /// `timeout` passes (false): the one place the exporter's thread runs
    /// because of remote operations, and only if it asks to. A deadline of
    /// [`crate::within()`] that ends first fails the wait with its error.
    pub fn wait_record(&self, timeout: Duration) -> Result<bool> {
        let (shared, id) = (&self.seg.shared, self.seg.id);
        let left = crate::within::cap(timeout)?;
        let cut = left < timeout;
        let deadline = crate::within::deadline_after(Instant::now(), left);
        let mut st = shared.lock();
        let entry = st.record_waiters.entry(id).or_insert_with(|| (Arc::new(Condvar::new()), 0));
        entry.1 += 1;
        let cv = entry.0.clone();
        let result = loop {
            if st.stopped {
                break Err(Error::NodeStopped);
            }
            let (control, data) = match st.engine.segment_has_records(id) {
                Ok(has) => has,
                Err(e) => break Err(e.into()),
            };
            let now = Instant::now();
            if control || data {
                break Ok(true);
            }
            if now >= deadline {
                break if cut { Err(vipc_engine::Error::Deadline.into()) } else { Ok(false) };
            }
            // Unlike an operation's waiter, this one does not read the socket
            // itself: a server waiting here for long would become the node's
            // reader, and every other process's datagrams would reach it
            // through one more thread (measured: twice the server CPU of a
            // Send–Receive–Reply on the same node).
            st = cv.wait_timeout(st, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        };
        if let Some(entry) = st.record_waiters.get_mut(&id) {
            entry.1 -= 1;
            if entry.1 == 0 {
                st.record_waiters.remove(&id);
            }
        }
        result
    }

    /// A handle to this segment as importers see it (for the owner's own
    /// CAS-IIs, which must go through the node to stay atomic).
    pub fn handle(&self) -> RemoteSegment {
        let shared = self.seg.shared.clone();
        let host = shared.lock().engine.host().unwrap_or(0);
        let access = Access::READ_WRITE;
        RemoteSegment { shared, target: Imported { host, desc: self.seg.id, size: self.seg.size, access } }
    }

    /// Unexports now (also done on drop): requests naming it are refused from now on.
    pub fn unexport(self) {}
}

/// An anonymous segment: the destination of this node's reads and CAS-IIs.
#[derive(Debug)]
pub struct AnonSegment {
    seg: Local,
}

impl AnonSegment {
    /// Its size in bytes.
    pub fn size(&self) -> u32 {
        self.seg.size
    }

    /// Copies bytes out (what answers have written so far).
    pub fn read(&self, offset: u32, buf: &mut [u8]) -> Result<()> {
        self.seg.read(offset, buf)
    }

    /// `len` bytes at `offset`, as a vector.
    pub fn to_vec(&self, offset: u32, len: usize) -> Result<Vec<u8>> {
        self.seg.to_vec(offset, len)
    }
}

/// Writes of at least this many bytes are sent by the writer straight from
/// its buffer: copying them into queued packets costs more than the hand-off
/// to the sender thread saves (a 1 MiB write: 3.8–4.1 → 4.3–5.5 GB/s).
pub const DIRECT_WRITE: usize = 64 << 10;

/// How long a thread whose remote read's answer has partly arrived polls
/// the socket after the last datagram that came before it sleeps. The
/// owner's node sent the answer back to back, so the rest is microseconds
/// behind unless a datagram was lost (then the read times out, and its
/// caller reads again); a sleep and a wake-up per datagram cost more (a 64
/// KiB read on loopback, two datagrams, both ends on one CPU: 20.2 → 17.0
/// µs). Polling the same way for the next chunk of a MoveTo or MoveFrom
/// into a lent buffer made single moves 15–25% faster but `vipc cp` over
/// a 1,500-byte-MTU link 8–15% slower (two streams and both ends sharing
/// two cores), so it is not done.
const ARRIVING_SPIN: Duration = Duration::from_micros(50);

/// A handle to another host's segment (or this node's, by import): no
/// memory is mapped; addresses are offsets. Every operation returns at once.
#[derive(Clone)]
pub struct RemoteSegment {
    shared: Arc<Shared>,
    target: Imported,
}

impl std::fmt::Debug for RemoteSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteSegment").field("target", &self.target).finish()
    }
}

impl RemoteSegment {
    /// The owner's logical host.
    pub fn host(&self) -> HostId {
        self.target.host
    }

    /// The segment's size.
    pub fn size(&self) -> u32 {
        self.target.size
    }

    /// The access its owner grants.
    pub fn access(&self) -> Access {
        self.target.access
    }

    /// Writes `data` at `offset`; `notify` asks for a notification under the
    /// Conditional policy. Returns once the packets are handed to the
    /// network: nothing says they arrived (003 §3.3). A plain write is
    /// queued for the node's sender thread (the writer pays for the engine
    /// and a queue); a notifying one is sent by the writer itself — it
    /// exists to wake someone, and the hand-off would delay that by a thread
    /// switch. A write of [`DIRECT_WRITE`] bytes or more is sent by the
    /// writer straight from `data`, without copying it into queued packets.
    /// Order is kept either way.
    pub fn write(&self, offset: u32, data: &[u8], notify: bool) -> Result<()> {
        if data.len() >= DIRECT_WRITE
            && self.shared.send_from_buffer(data, |e| e.mem_write_headers(&self.target, offset, data.len(), notify))?
        {
            return Ok(());
        }
        self.send(notify, |e| e.mem_write(&self.target, offset, data, notify))
    }

    /// Writes `data`, elements of `elem` bytes, at `base`, `base + stride`, …
    pub fn writev(&self, base: u32, stride: u32, elem: u32, data: &[u8], notify: bool) -> Result<()> {
        let shape = Strided { stride, elem };
        self.send(notify, |e| e.mem_writev(&self.target, base, shape, data, notify))
    }

    fn send(
        &self,
        now: bool,
        f: impl FnOnce(&mut vipc_engine::Engine) -> Result<(), vipc_engine::Error>,
    ) -> Result<()> {
        if now {
            self.shared.call(None, |e, _| f(e))
        } else {
            self.shared.call_deferred(|e, _| f(e))
        }
    }

    /// [`Error::OtherNode`] unless `dest` is a segment of this import's node.
    fn same_node(&self, dest: &AnonSegment) -> Result<()> {
        if Arc::ptr_eq(&self.shared, &dest.seg.shared) {
            Ok(())
        } else {
            Err(Error::OtherNode("the destination segment"))
        }
    }

    /// Reads `len` bytes at `offset` into `into.1` of the anonymous segment
    /// `into.0` (of the same node); the returned operation finishes when they have all arrived.
    pub fn read(&self, offset: u32, len: u32, into: (&AnonSegment, u32), notify: bool) -> Result<PendingOp> {
        self.same_node(into.0)?;
        let dest = (into.0.seg.id, into.1);
        let op =
            self.shared.call_on_segment(dest.0, |e, now| e.mem_read(now, &self.target, offset, len, dest, notify))?;
        Ok(PendingOp { shared: self.shared.clone(), op: Some(op) })
    }

    /// CAS-II on the 8-byte cell at `offset`: if its value is `expect`, it
    /// becomes {`new`, `nonce`}. The operation returns the value found and
    /// the nonce now in the cell (also written at `into.1` of `into.0`): the
    /// swap was this caller's if the nonce is its own. After a timeout, retry
    /// with the same nonce (003 §4.2.3).
    pub fn cas(&self, offset: u32, expect: u32, new: u32, nonce: u32, into: (&AnonSegment, u32)) -> Result<PendingOp> {
        self.same_node(into.0)?;
        let (cas, dest) = (Cas { expect, new, nonce }, (into.0.seg.id, into.1));
        let op =
            self.shared.call_on_segment(dest.0, |e, now| e.mem_cas(now, &self.target, offset, cas, dest, false))?;
        Ok(PendingOp { shared: self.shared.clone(), op: Some(op) })
    }
}

/// A read, CAS-II or import in progress. Poll it, or wait for it; dropping
/// it forgets the operation (a late answer is then dropped).
pub struct PendingOp {
    shared: Arc<Shared>,
    op: Option<MemOpId>,
}

impl std::fmt::Debug for PendingOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingOp").field("op", &self.op).finish()
    }
}

impl PendingOp {
    /// The result once finished (`Ok(None)` while pending). Collected once:
    /// polling again after a result is an error.
    pub fn poll(&mut self) -> Result<Option<MemOutcome>> {
        let Some(op) = self.op else { return Err(Error::Internal("operation already collected".into())) };
        let mut st = self.shared.lock();
        if st.stopped {
            return Err(Error::NodeStopped);
        }
        match st.engine.mem_poll(op) {
            Some(r) => {
                self.op = None;
                Ok(Some(r?))
            }
            None if st.engine.mem_pending(op) => Ok(None),
            None => Err(Error::Internal("operation unknown to the engine".into())),
        }
    }

    /// Blocks until the operation finishes, or fails with
    /// [`Error::StillPending`] after `timeout` (the operation is then forgotten).
    pub fn wait(mut self, timeout: Duration) -> Result<MemOutcome> {
        let within = crate::within::remaining()?;
        let start = Instant::now();
        let deadline = crate::within::deadline_after(start, within.map_or(timeout, |left| left.min(timeout)));
        let shared = self.shared.clone();
        // With the node's `poll_spin`, the waiter first spins on the socket
        // (002's processor-synchronous wait), then blocks.
        let polling = shared.poll_spin.map(|d| crate::within::deadline_after(start, d));
        let mut st = shared.lock();
        loop {
            let Some(op) = self.op else { return Err(Error::Internal("operation already collected".into())) };
            if st.stopped {
                return Err(Error::NodeStopped);
            }
            if let Some(r) = st.engine.mem_poll(op) {
                self.op = None;
                return r.map_err(Error::from);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                let cut = within.is_some_and(|left| left < timeout);
                return Err(if cut { vipc_engine::Error::Deadline.into() } else { Error::StillPending });
            }
            // The rest of a read's answer follows the part that came, back
            // to back: while it comes, spinning costs less than sleeping and
            // being woken for each datagram.
            let tail =
                st.engine.mem_answer_arriving(op).then(|| crate::within::deadline_after(Instant::now(), ARRIVING_SPIN));
            let spin_until = polling.max(tail);
            // Read the answer ourselves (see Shared::wait_mem), else sleep until it is in.
            st = shared.wait_mem(st, left, spin_until);
        }
    }

    /// [`PendingOp::wait`] for a CAS-II: its answer.
    pub fn wait_cas(self, timeout: Duration) -> Result<CasAnswer> {
        match self.wait(timeout)? {
            MemOutcome::Cas(a) => Ok(a),
            other => Err(Error::Internal(format!("not a CAS-II: {other:?}"))),
        }
    }
}

impl Drop for PendingOp {
    fn drop(&mut self) {
        if let Some(op) = self.op.take() {
            let _ = self.shared.call(None, |e, _| {
                e.mem_forget(op);
                Ok(())
            });
        }
    }
}
