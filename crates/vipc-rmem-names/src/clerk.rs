//! The clerk: one per node, the only writer of the node's table, and the
//! node's way to find names in other nodes' tables (003 §7.3). Programs call
//! it directly — the "kernel calls" of 003 become method calls here.

use crate::cache::{Cache, Cached};
use crate::entry::{Binding, Entry};
use crate::error::{Error, Result};
use crate::layout::Header;
use crate::local::{check_name, LocalTable};
use crate::peers::{import_retrying, Peers, PullStats};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use vipc::{Access, ExportedSegment, HostId, Node, ProtectionGroup, RemoteSegment, SegmentOptions};

/// How a clerk is set up.
#[derive(Clone, Debug)]
pub struct ClerkParams {
    /// Buckets in this clerk's table (each [`crate::ENTRY_SIZE`] bytes).
    /// Clerks need not agree: each reads a peer's bucket count from its header.
    pub buckets: u32,
    /// The hosts whose tables a lookup without a hint asks, in order (003:
    /// the nodes a clerk "expects to do lookup operations on").
    pub peers: Vec<HostId>,
    /// Buckets read per remote read while probing (003 read one).
    pub window: u32,
    /// How long a remote read or import waits for its answer before it is
    /// sent again. At least 100 ms keeps the fast path: a shorter wait does
    /// not read the answer off the socket itself (vipc's receive poll is
    /// 100 ms) but sleeps until the node's reader hands it over (~2 ms).
    pub read_wait: Duration,
    /// How long a lookup may spend on one host's table.
    pub timeout: Duration,
    /// How long a pulled name is used without asking its owner again.
    pub cache_ttl: Duration,
    /// Which hosts may read this clerk's table.
    pub protection: ProtectionGroup,
}

impl Default for ClerkParams {
    fn default() -> Self {
        ClerkParams {
            buckets: 1024,
            peers: Vec::new(),
            window: 1,
            read_wait: Duration::from_millis(200),
            timeout: Duration::from_secs(2),
            cache_ttl: Duration::from_secs(30),
            protection: ProtectionGroup::Any,
        }
    }
}

/// Where a lookup found its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// This clerk's own table.
    Local,
    /// A name pulled before (a hint: see [`Clerk::refresh`]).
    Cache,
    /// Pulled now from another clerk's table.
    Remote,
}

/// A lookup's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// What the name is bound to.
    pub binding: Binding,
    /// The registration's generation in the table that holds it.
    pub generation: u32,
    /// Whose table holds it.
    pub table: HostId,
    /// Its bucket there.
    pub slot: u32,
    /// Where the answer came from.
    pub source: Source,
}

/// One node's clerk of the name service.
pub struct Clerk {
    node: Node,
    params: ClerkParams,
    table: Mutex<LocalTable>,
    peers: Mutex<Peers>,
    cache: Mutex<Cache>,
}

impl std::fmt::Debug for Clerk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clerk").field("host", &self.node.host_id()).field("params", &self.params).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Clerk {
    /// Starts the node's clerk: exports its table at the node's well-known
    /// name. Fails if the node already runs one.
    pub fn start(node: &Node, params: ClerkParams) -> Result<Clerk> {
        let table = LocalTable::export(node, params.buckets, params.protection.clone())?;
        let peers = Peers::new(node, params.read_wait, params.window)?;
        let cache = Cache::new(params.cache_ttl);
        Ok(Clerk {
            node: node.clone(),
            params,
            table: Mutex::new(table),
            peers: Mutex::new(peers),
            cache: Mutex::new(cache),
        })
    }

    /// The clerk's host.
    pub fn host(&self) -> HostId {
        self.node.host_id()
    }

    /// Its table's header.
    pub fn header(&self) -> Header {
        lock(&self.table).header()
    }

    /// What this clerk's pulls cost so far.
    pub fn stats(&self) -> PullStats {
        lock(&self.peers).stats
    }

    /// Names pulled and cached.
    pub fn cached(&self) -> usize {
        lock(&self.cache).len()
    }

    /// ADDNAME: binds `name` in this clerk's table (one local write). Returns
    /// the registration's generation, new for every registration.
    pub fn register(&self, name: &str, binding: Binding) -> Result<u32> {
        let e = lock(&self.table).register(name, binding)?;
        lock(&self.cache).remove(name);
        Ok(e.generation)
    }

    /// Exports a segment (a random 128-bit name, as `Node::export_segment`)
    /// and registers it under `name`; if the name is taken the segment is
    /// unexported again.
    pub fn export_segment(&self, name: &str, size: usize, opts: SegmentOptions) -> Result<ExportedSegment> {
        check_name(name)?;
        let access = opts.access;
        let seg = self.node.export_segment(size, opts)?;
        let binding = Binding { segment: seg.name(), host: self.host(), size: seg.size(), access, meta: 0 };
        self.register(name, binding)?;
        Ok(seg)
    }

    /// DELETENAME: marks the local entry deleted and returns its generation.
    /// Lazy: no other clerk is told; their cached copies go at their next
    /// refresh, or when a cached binding fails to import.
    pub fn delete(&self, name: &str) -> Result<u32> {
        lock(&self.table).delete(name)
    }

    /// LOOKUPNAME: the local table, then the cache, then a pull from the
    /// tables of `hint` and of the clerk's peers, in that order. `NotFound`
    /// only if every table asked answered that it does not hold the name;
    /// if a table could not be asked, that error.
    pub fn lookup(&self, name: &str, hint: Option<HostId>) -> Result<Found> {
        if let Some(f) = self.lookup_local(name)? {
            return Ok(f);
        }
        if let Some(c) = lock(&self.cache).get(name) {
            return Ok(found(&c.entry, c.host, c.slot, Source::Cache));
        }
        self.pull(name, hint)
    }

    /// A lookup that does not trust the cache: the local table, then a pull
    /// (003: "users can force a specific import to do an explicit remote lookup").
    pub fn lookup_fresh(&self, name: &str, hint: Option<HostId>) -> Result<Found> {
        lock(&self.cache).remove(name);
        if let Some(f) = self.lookup_local(name)? {
            return Ok(f);
        }
        self.pull(name, hint)
    }

    /// Drops a cached name.
    pub fn forget(&self, name: &str) {
        lock(&self.cache).remove(name);
    }

    /// Re-reads the bucket of every cached name at its owner and purges
    /// those no longer live under the same generation (or whose owner does
    /// not answer). Returns how many were purged.
    pub fn refresh(&self) -> Result<usize> {
        let snapshot = lock(&self.cache).snapshot();
        let mut purged = 0;
        for c in snapshot {
            let deadline = Instant::now() + self.params.timeout;
            let still = match lock(&self.peers).entry(c.host, c.slot, deadline) {
                Ok((inc, Some(e))) => inc == c.incarnation && e == c.entry,
                Ok((_, None)) | Err(_) => false,
            };
            if !still {
                lock(&self.cache).remove(&c.entry.name);
                purged += 1;
            }
        }
        Ok(purged)
    }

    /// Imports the segment bound to `name` (003's `rr_import` by name). A
    /// cached binding that no longer imports (its segment unexported) is
    /// dropped and the name pulled again, once.
    pub fn import(&self, name: &str, access: Access, timeout: Duration) -> Result<RemoteSegment> {
        let deadline = Instant::now() + timeout;
        let mut f = self.lookup(name, None)?;
        if f.source == Source::Cache {
            let quick = Instant::now() + self.params.read_wait.min(timeout);
            match import_retrying(&self.node, f.binding.segment, access, quick) {
                Ok(seg) => return Ok(seg),
                Err(_) => f = self.lookup_fresh(name, None)?,
            }
        }
        import_retrying(&self.node, f.binding.segment, access, deadline)
    }

    fn lookup_local(&self, name: &str) -> Result<Option<Found>> {
        check_name(name)?;
        let t = lock(&self.table);
        Ok(t.find(name, self.params.window)?.map(|(slot, e)| found(&e, self.host(), slot, Source::Local)))
    }

    /// Pulls `name` from the hinted host's table, then the peers'.
    fn pull(&self, name: &str, hint: Option<HostId>) -> Result<Found> {
        let me = self.host();
        let mut hosts: Vec<HostId> = hint.into_iter().collect();
        hosts.extend(self.params.peers.iter().copied().filter(|h| Some(*h) != hint));
        let mut failure = None;
        for host in hosts.into_iter().filter(|&h| h != me) {
            let deadline = Instant::now() + self.params.timeout;
            let mut peers = lock(&self.peers);
            match peers.find(host, name, deadline) {
                Ok(Some((slot, e))) => {
                    drop(peers);
                    let f = found(&e, host, slot, Source::Remote);
                    // The walk checked that the entry carries its table's incarnation.
                    let incarnation = e.incarnation;
                    lock(&self.cache).put(Cached { host, slot, incarnation, entry: e, at: Instant::now() });
                    return Ok(f);
                }
                Ok(None) => {}
                Err(e) => failure = failure.or(Some(e)),
            }
        }
        Err(failure.unwrap_or_else(|| Error::NotFound(name.to_string())))
    }
}

fn found(e: &Entry, table: HostId, slot: u32, source: Source) -> Found {
    Found { binding: e.binding, generation: e.generation, table, slot, source }
}
