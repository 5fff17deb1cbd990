//! Other clerks' tables, imported by their well-known names and read with
//! remote reads only: no thread of the other node runs for a lookup. Reads
//! are retried until the caller's deadline, since a request or its answer
//! may be lost and the engine never retries (003 §3.7).

use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::layout::{slot_offset, well_known_name, Header, ENTRY_SIZE, HEADER_SIZE};
use crate::probe::{self, Probed, Walk};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use vipc::{Access, AnonSegment, HostId, MemOutcome, Node, ProtocolError, RemoteSegment, SegmentName};

/// An imported table and its header.
struct PeerTable {
    seg: RemoteSegment,
    header: Header,
}

/// The clerk's view of the other clerks' tables.
pub(crate) struct Peers {
    node: Node,
    /// Where read answers land: one read at a time.
    anon: AnonSegment,
    tables: HashMap<HostId, PeerTable>,
    /// How long one read waits for its answer before it is sent again.
    read_wait: Duration,
    /// Buckets per read.
    window: u32,
    /// What the pulls cost.
    pub stats: PullStats,
}

/// What a clerk's pulls cost, counted since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PullStats {
    /// Remote reads of other clerks' tables (headers and buckets), first sends.
    pub reads: u64,
    /// Reads sent again because no answer came within `read_wait`.
    pub resent: u64,
    /// Other clerks' tables imported (again after a clerk restarted).
    pub imports: u64,
}

/// A lost datagram, not a refusal.
fn lost(e: &vipc::Error) -> bool {
    matches!(e, vipc::Error::StillPending)
        || matches!(e.protocol(), Some(ProtocolError::Timeout(_) | ProtocolError::Refused(vipc::Refusal::UnknownName)))
}

/// A refusal from the table's owner: the segment is gone (the clerk stopped or restarted).
fn refused(e: &vipc::Error) -> bool {
    matches!(e.protocol(), Some(ProtocolError::Refused(_)))
}

impl Peers {
    pub fn new(node: &Node, read_wait: Duration, window: u32) -> Result<Peers> {
        let window = window.max(1);
        let anon = node.anonymous_segment(HEADER_SIZE.max(window as usize * ENTRY_SIZE))?;
        let read_wait = read_wait.max(Duration::from_millis(1));
        Ok(Peers { node: node.clone(), anon, tables: HashMap::new(), read_wait, window, stats: PullStats::default() })
    }

    /// Walks the chain of `name` in `host`'s table, at most `reads` remote
    /// reads. A table whose segment refuses (its clerk restarted) is
    /// imported again, once; so is one whose entries all fail their checks
    /// (`Corrupt`): a clerk restarted with its node gets the same
    /// descriptor again, so the old handle is not refused, but its entries
    /// carry an incarnation the cached header does not.
    pub fn find(&mut self, host: HostId, name: &str, reads: u32, deadline: Instant) -> Result<Probed> {
        let had = self.tables.contains_key(&host);
        match self.find_once(host, name, reads, deadline) {
            Err(Error::NoClerk(_)) if had => self.find_once(host, name, reads, deadline),
            Err(Error::Corrupt { .. }) if had => {
                self.tables.remove(&host);
                self.find_once(host, name, reads, deadline)
            }
            other => other,
        }
    }

    /// The entry in bucket `slot` of `host`'s table, with the table's
    /// incarnation (to tell a restarted clerk's table from the one cached).
    pub fn entry(&mut self, host: HostId, slot: u32, deadline: Instant) -> Result<(u32, Option<Entry>)> {
        let header = self.table(host, deadline)?.header;
        if slot >= header.buckets {
            return Ok((header.incarnation, None));
        }
        let bytes = self.read(host, slot_offset(slot), ENTRY_SIZE as u32, deadline)?;
        Ok((header.incarnation, Entry::parse(&bytes).ok().flatten()))
    }

    fn find_once(&mut self, host: HostId, name: &str, reads: u32, deadline: Instant) -> Result<Probed> {
        let h = self.table(host, deadline)?.header;
        let walk = Walk { host, buckets: h.buckets, incarnation: h.incarnation, window: self.window, reads };
        probe::find(&walk, name, |first, count| {
            self.read(host, slot_offset(first), count * ENTRY_SIZE as u32, deadline)
        })
    }

    /// `host`'s table, imported and its header read the first time (003:
    /// a clerk imports the tables of the nodes it expects to query).
    fn table(&mut self, host: HostId, deadline: Instant) -> Result<&PeerTable> {
        if !self.tables.contains_key(&host) {
            let seg = self.import(host, deadline)?;
            self.stats.imports += 1;
            let bytes = self.read_from(&seg, host, 0, HEADER_SIZE as u32, deadline)?;
            let header = Header::parse(&bytes, seg.size()).map_err(|why| Error::Layout { host, why })?;
            if header.host != host {
                return Err(Error::Layout { host, why: format!("the header says host {}", header.host) });
            }
            self.tables.insert(host, PeerTable { seg, header });
        }
        self.tables.get(&host).ok_or(Error::NoClerk(host))
    }

    fn import(&self, host: HostId, deadline: Instant) -> Result<RemoteSegment> {
        import_well_known(&self.node, host, well_known_name(host), Access::READ, deadline)
    }

    /// Reads `len` bytes at `offset` of `host`'s table; a refusal forgets the table.
    fn read(&mut self, host: HostId, offset: u32, len: u32, deadline: Instant) -> Result<Vec<u8>> {
        let seg = self.tables.get(&host).map(|t| t.seg.clone()).ok_or(Error::NoClerk(host))?;
        let r = self.read_from(&seg, host, offset, len, deadline);
        if matches!(r, Err(Error::NoClerk(_))) {
            self.tables.remove(&host);
        }
        r
    }

    /// One remote read, sent again after each `read_wait` without an answer.
    fn read_from(
        &mut self,
        seg: &RemoteSegment,
        host: HostId,
        offset: u32,
        len: u32,
        deadline: Instant,
    ) -> Result<Vec<u8>> {
        self.stats.reads += 1;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let op = seg.read(offset, len, (&self.anon, 0), false)?;
            match op.wait(self.read_wait.min(left)) {
                Ok(MemOutcome::Read) => return Ok(self.anon.to_vec(0, len as usize)?),
                Ok(other) => return Err(vipc::Error::Internal(format!("a read finished with {other:?}")).into()),
                Err(e) if lost(&e) && left > self.read_wait => self.stats.resent += 1,
                Err(e) if lost(&e) => return Err(Error::Timeout),
                Err(e) if refused(&e) => return Err(Error::NoClerk(host)),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// Imports one of `host`'s clerk's well-known segments; nobody answering or
/// a refusal is [`Error::NoClerk`].
pub(crate) fn import_well_known(
    node: &Node,
    host: HostId,
    name: SegmentName,
    access: Access,
    deadline: Instant,
) -> Result<RemoteSegment> {
    match import_retrying(node, name, access, deadline) {
        Err(Error::Timeout) => Err(Error::NoClerk(host)),
        Err(Error::Vipc(e)) if refused(&e) => Err(Error::NoClerk(host)),
        other => other,
    }
}

/// Imports `name` with vipc-rmem-layers' [`vipc_rmem_layers::import_retrying`]
/// (sent again every 150 ms: the import is a broadcast, its answer a
/// datagram, either may be lost). Still unanswered at `deadline`: [`Error::Timeout`].
pub(crate) fn import_retrying(
    node: &Node,
    name: SegmentName,
    access: Access,
    deadline: Instant,
) -> Result<RemoteSegment> {
    let left = deadline.saturating_duration_since(Instant::now());
    vipc_rmem_layers::import_retrying(node, name, access, left).map_err(|e| match e {
        vipc_rmem_layers::Error::Vipc(e) => Error::Vipc(e),
        vipc_rmem_layers::Error::Timeout => Error::Timeout,
        other => Error::Vipc(vipc::Error::Internal(format!("an import failed with {other}"))),
    })
}
