//! The file-service transfer styles of 003 §7.4 over a server's block cache.
//!
//! A [`CacheServer`] exports its cache of file blocks (readable and
//! writable: the clerks know its layout) and a request area. A
//! [`CacheClient`] moves a block in one of four styles:
//!
//! | style | what crosses the network | server thread runs |
//! |---|---|---|
//! | read-only ([`CacheClient::read_direct`]) | a read request, the block as its answer | no |
//! | write-only ([`CacheClient::write_direct`]) | the block, written into the cache, no notification | no |
//! | hybrid-1 ([`CacheClient::read_hybrid`], `notify_last = false`) | one notify-write of the parameters; a completion cell and the block written back in one write; the client polls the cell | yes |
//! | hybrid-2 (`notify_last = true`) | the same, the write back with notify; the client sleeps on its control channel | yes |
//!
//! Read-only and write-only are 003's pure data transfer (DX): the
//! server's node answers them with no server thread running. The hybrids
//! pay a control transfer to the server thread, which is what 003 Fig. 7.3
//! measured: DX put less than half the load of hybrid on the server.
//!
//! Reliability: a hybrid request or its answer may be lost; the completion
//! cell carries the request's sequence number and a check word over the
//! block, and the client writes the request again when no checked answer
//! came within `rto`. A read-only read lost (its request or answer) is
//! sent again every `rto` until the caller's time is up; write-only is
//! unacknowledged by design (003: the source pushes, no notification).

use crate::check::check;
use crate::common::{get32, import_retrying, put32, retryable, Error, FailedImports, Result};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use vipc::{
    Access, AnonSegment, ExportedSegment, MemOp, Node, Notify, ProtectionGroup, RemoteSegment, SegmentName,
    SegmentOptions,
};

/// One request slot: {sequence number, block, length, check word} then the
/// 16-byte name of the client's reply segment.
const REQUEST: usize = 32;
/// The client's reply segment: the completion cell {sequence number,
/// length, check word over the block, 0}, then the block.
const CELL: usize = 16;
/// How long a hybrid client waits by default for a checked answer before writing its request again.
pub const RTO: Duration = Duration::from_millis(20);

/// The shape of a server's cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheParams {
    /// Bytes per block.
    pub block: usize,
    /// Blocks in the cache.
    pub blocks: usize,
    /// Request slots (one per client at a time).
    pub slots: usize,
}

/// A file server's block cache, exported for the four styles.
pub struct CacheServer {
    node: Node,
    cache: ExportedSegment,
    requests: ExportedSegment,
    params: CacheParams,
    /// Clients' reply segments, imported once.
    replies: HashMap<SegmentName, RemoteSegment>,
    /// The block being answered (reused).
    buf: Vec<u8>,
    /// Reply segments that did not import lately.
    failed: FailedImports,
    /// Request slots written and not yet answered.
    written: std::collections::BTreeSet<usize>,
    /// When a slot's reply segment last failed to import.
    import_failed: HashMap<usize, Instant>,
}

impl std::fmt::Debug for CacheServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheServer").field("params", &self.params).finish()
    }
}

impl CacheServer {
    /// Exports a cache of `params.blocks` blocks (filled by [`CacheServer::fill`])
    /// and `params.slots` request slots.
    pub fn export(node: &Node, params: CacheParams) -> Result<CacheServer> {
        let size = params.block.checked_mul(params.blocks).filter(|&s| s <= u32::MAX as usize);
        let size = size.ok_or(Error::TooLarge { what: "cache", len: usize::MAX, max: u32::MAX as usize })?;
        let open = |notify| SegmentOptions { access: Access::READ_WRITE, notify, protection: ProtectionGroup::Any };
        let cache = node.export_segment(size, open(Notify::Never))?;
        let area = params.slots.checked_mul(REQUEST).ok_or(Error::TooLarge {
            what: "request area",
            len: usize::MAX,
            max: u32::MAX as usize,
        })?;
        let requests = node.export_segment(area, open(Notify::Conditional))?;
        let (replies, failed) = (HashMap::new(), FailedImports::default());
        Ok(CacheServer {
            node: node.clone(),
            cache,
            requests,
            params,
            replies,
            buf: Vec::new(),
            failed,
            written: Default::default(),
            import_failed: HashMap::new(),
        })
    }

    /// The names a client needs: the cache's and the request area's.
    pub fn names(&self) -> (SegmentName, SegmentName) {
        (self.cache.name(), self.requests.name())
    }

    /// Stores `data` as block `block` of the cache ([`Error::TooLarge`] for
    /// a block past the cache or more data than a block holds).
    pub fn fill(&self, block: usize, data: &[u8]) -> Result<()> {
        let at = block_offset(&self.params, block, data.len())?;
        Ok(self.cache.write(at, data)?)
    }

    /// Answers the hybrid requests that arrive within `timeout`; returns how
    /// many. Each pass answers every slot written since the last once, with
    /// the request it holds now (a slot written a hundred times is answered
    /// once), and the time is checked between slots: a client writing its
    /// slot faster than it is answered holds the server no longer than `timeout`.
    pub fn serve_for(&mut self, timeout: Duration) -> Result<usize> {
        let deadline = vipc::deadline_after(Instant::now(), timeout);
        let mut served = 0;
        loop {
            while let Some(rec) = self.requests.poll_control()? {
                if rec.op == MemOp::Write && rec.offset as usize % REQUEST == 0 {
                    self.written.insert(rec.offset as usize / REQUEST);
                }
            }
            while Instant::now() < deadline {
                let Some(slot) = self.written.pop_first() else { break };
                served += usize::from(self.answer(slot)?);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !self.requests.wait_record(left)? {
                return Ok(served);
            }
        }
    }

    /// Answers slot `slot`'s request: the completion cell and the block.
    fn answer(&mut self, slot: usize) -> Result<bool> {
        let req = self.requests.to_vec((slot * REQUEST) as u32, REQUEST)?;
        let (seq, block, len, word) =
            (get32(&req, 0), get32(&req, 4) as usize, get32(&req, 8) as usize, get32(&req, 12));
        let name: SegmentName = req[16..32].try_into().expect("16 bytes");
        let notify_last = word & 1 == 1;
        if seq == 0 || block >= self.params.blocks || len > self.params.block {
            return Ok(false); // a torn or foreign request: the client will write it again
        }
        let reply = match self.replies.get(&name) {
            Some(r) => r,
            None => {
                // A reply segment that does not import ends this request, not
                // the server; the slot is not tried again for a while, whatever
                // name it gives next (each try holds the server).
                if self.import_failed.get(&slot).is_some_and(|at| at.elapsed() < IMPORT_PAUSE) {
                    return Ok(false);
                }
                let Some(r) = self.failed.import(&self.node, name, Access::WRITE, RTO * 5) else {
                    self.import_failed.insert(slot, Instant::now());
                    return Ok(false);
                };
                if self.replies.len() >= MAX_REPLY_IMPORTS {
                    self.replies.clear();
                }
                self.replies.entry(name).or_insert(r)
            }
        };
        // The completion cell and the block in one write: one datagram when
        // it fits, and a check word that fails if its datagrams arrive in part.
        self.buf.resize(CELL + len, 0);
        self.cache.read((block * self.params.block) as u32, &mut self.buf[CELL..])?;
        let word = check(u64::from(seq), &[&self.buf[CELL..]]);
        put32(&mut self.buf, 0, seq);
        put32(&mut self.buf, 4, len as u32);
        put32(&mut self.buf, 8, word);
        // A write the client's node refuses (its segment gone) fails this answer only.
        Ok(reply.write(0, &self.buf, notify_last).is_ok())
    }
}

/// A request slot whose reply segment did not import is not tried again for this long.
const IMPORT_PAUSE: Duration = Duration::from_secs(1);

/// Most clients' reply segments a [`CacheServer`] keeps imported (beyond,
/// it forgets them all and imports each again when next needed).
const MAX_REPLY_IMPORTS: usize = 256;

/// A clerk of a [`CacheServer`] on another node.
pub struct CacheClient {
    cache: RemoteSegment,
    requests: RemoteSegment,
    reply: ExportedSegment,
    anon: AnonSegment,
    /// Held by a read-only read from its request to its copy out: every
    /// answer lands at the start of `anon`.
    reading: std::sync::Mutex<()>,
    params: CacheParams,
    slot: usize,
    seq: u32,
    rto: Duration,
    /// Requests written again after `rto`.
    pub retransmitted: u64,
}

impl std::fmt::Debug for CacheClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheClient").field("slot", &self.slot).field("seq", &self.seq).finish()
    }
}

impl CacheClient {
    /// Imports the server's segments (names from [`CacheServer::names`]) and
    /// exports a reply segment; `slot` is this client's request slot.
    pub fn connect(
        node: &Node,
        names: (SegmentName, SegmentName),
        params: CacheParams,
        slot: usize,
        timeout: Duration,
    ) -> Result<CacheClient> {
        if slot >= params.slots {
            return Err(Error::NoFreeSlot);
        }
        let cache = import_retrying(node, names.0, Access::READ_WRITE, timeout)?;
        let requests = import_retrying(node, names.1, Access::WRITE, timeout)?;
        let sizes = (params.block.checked_mul(params.blocks), params.slots.checked_mul(REQUEST));
        if sizes != (Some(cache.size() as usize), Some(requests.size() as usize)) {
            return Err(Error::Layout(format!("cache of {} bytes, request area of {}", cache.size(), requests.size())));
        }
        let opts =
            SegmentOptions { access: Access::WRITE, notify: Notify::Conditional, protection: ProtectionGroup::Any };
        let reply = node.export_segment(CELL + params.block, opts)?;
        let anon = node.anonymous_segment(params.block)?;
        let reading = std::sync::Mutex::new(());
        Ok(CacheClient { cache, requests, reply, anon, reading, params, slot, seq: 0, rto: RTO, retransmitted: 0 })
    }

    /// How long a hybrid request waits for its answer before it is written
    /// again (default [`RTO`]; longer on a loaded machine that is not lossy;
    /// at least 100 µs: with none, no answer was ever looked at before the
    /// request went again, and every call timed out).
    pub fn set_rto(&mut self, rto: Duration) {
        self.rto = rto.max(Duration::from_micros(100));
    }

    /// Read-only style: `len` bytes of block `block` by one remote read; no
    /// server thread runs. The engine never retries a read: one lost is
    /// read again every `rto`, until `timeout` ([`Error::Timeout`]). Reads
    /// from several threads take turns.
    pub fn read_direct(&self, block: usize, len: usize, timeout: Duration) -> Result<Vec<u8>> {
        let at = block_offset(&self.params, block, len)?;
        let _turn = self.reading.lock().unwrap_or_else(|e| e.into_inner());
        let deadline = vipc::deadline_after(Instant::now(), timeout);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.cache.read(at, len as u32, (&self.anon, 0), false)?.wait(self.rto.min(left)) {
                Ok(_) => return Ok(self.anon.to_vec(0, len)?),
                Err(e) if retryable(&e) && left > self.rto => {}
                Err(e) if retryable(&e) => return Err(Error::Timeout),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Write-only style: `data` into block `block` by remote write, no
    /// notification and no acknowledgement (what the source pushes may be lost).
    pub fn write_direct(&self, block: usize, data: &[u8]) -> Result<()> {
        let at = block_offset(&self.params, block, data.len())?;
        Ok(self.cache.write(at, data, false)?)
    }

    /// Hybrid style: writes the parameters with notify, and the server
    /// writes the completion cell and the block back — with notify when
    /// `notify_last` (hybrid-2: this thread sleeps on its control channel),
    /// without (hybrid-1: this thread polls the cell).
    pub fn read_hybrid(&mut self, block: usize, len: usize, notify_last: bool, timeout: Duration) -> Result<Vec<u8>> {
        block_offset(&self.params, block, len)?;
        self.seq = self.seq.wrapping_add(1).max(1);
        let mut req = [0u8; REQUEST];
        put32(&mut req, 0, self.seq);
        put32(&mut req, 4, block as u32);
        put32(&mut req, 8, len as u32);
        put32(&mut req, 12, u32::from(notify_last));
        req[16..].copy_from_slice(&self.reply.name());
        let deadline = vipc::deadline_after(Instant::now(), timeout);
        loop {
            self.requests.write((self.slot * REQUEST) as u32, &req, true)?;
            let resend = vipc::deadline_after(Instant::now(), self.rto).min(deadline);
            while Instant::now() < resend {
                if let Some(data) = self.answered(len)? {
                    return Ok(data);
                }
                if notify_last {
                    self.reply.wait_record(resend.saturating_duration_since(Instant::now()))?;
                    while self.reply.poll_control()?.is_some() {}
                } else {
                    std::hint::spin_loop();
                }
            }
            if Instant::now() >= deadline {
                return Err(Error::Timeout);
            }
            self.retransmitted += 1;
        }
    }

    /// The block, if the completion cell names this request and checks.
    fn answered(&self, len: usize) -> Result<Option<Vec<u8>>> {
        let mut cell = [0u8; CELL];
        self.reply.read(0, &mut cell)?;
        if get32(&cell, 0) != self.seq || get32(&cell, 4) as usize != len {
            return Ok(None);
        }
        let data = self.reply.to_vec(CELL as u32, len)?;
        Ok((check(u64::from(self.seq), &[&data]) == get32(&cell, 8)).then_some(data))
    }
}

/// Where block `block` starts in the cache, if it is one and `len` bytes fit in it.
fn block_offset(params: &CacheParams, block: usize, len: usize) -> Result<u32> {
    if block >= params.blocks || len > params.block {
        return Err(Error::TooLarge { what: "block", len, max: params.block });
    }
    Ok((block * params.block) as u32)
}
