//! The clerk: one per node, the only writer of the node's table, and the
//! node's way to find names in other nodes' tables (003 §7.3). Programs call
//! it directly — the "kernel calls" of 003 become method calls here.

use crate::ask::{Asker, NotifyStats};
use crate::cache::{Cache, Cached};
use crate::entry::{Binding, Entry};
use crate::error::{Error, Result};
use crate::layout::Header;
use crate::local::{check_name, LocalTable};
use crate::lock;
use crate::peers::{import_retrying, Peers, PullStats};
use crate::probe::{Probed, WHOLE};
use crate::serve::{ServeParams, ServeStats, Serving};
use std::sync::{Arc, Mutex};
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
    /// Taken as at least 1 ms (with none, no answer was ever waited for).
    pub read_wait: Duration,
    /// How long a lookup may spend on one host's table.
    pub timeout: Duration,
    /// How long a pulled name is used without asking its owner again.
    pub cache_ttl: Duration,
    /// Which hosts may read this clerk's table and write its request and
    /// answer segments (the clerks' group).
    pub protection: ProtectionGroup,
    /// Run the serving thread that answers other clerks' lookups by
    /// notification (without it they fail with [`Error::NoClerk`]). Off by
    /// default because it is not quite free: with it, this clerk's own
    /// pulls measured about 4% slower (see docs/RMEM.md), and it costs
    /// `request_slots` × 128 bytes.
    pub serve: bool,
    /// Slots of the request segment: host h writes slot h mod `request_slots`
    /// (1 … 65,536; hosts that share a slot may overwrite each other's
    /// requests, which then count as lost and are written again).
    pub request_slots: u32,
    /// How long a lookup by notification waits for its answer before it
    /// writes the same request again. Taken as at least 1 ms (with none, the
    /// request was written again without pause until the lookup's timeout).
    pub notify_rto: Duration,
    /// How long it spins on its answer area before it sleeps (003's importer
    /// "spin waits (at user level)").
    pub notify_spin: Duration,
    /// How [`Clerk::lookup`] pulls a name from another table.
    pub policy: LookupPolicy,
}

/// How a pull searches another clerk's table (003 §7.3.2's options when the
/// home bucket holds another name).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LookupPolicy {
    /// Option (1), 003's choice: remote reads along the chain until the name,
    /// an empty bucket or the whole table. No thread of the owner runs.
    #[default]
    Probe,
    /// Option (3): at most `reads` remote reads; if every bucket they saw
    /// holds another (or a deleted) name, ask the table's clerk by
    /// notification ([`Clerk::lookup_notify`]). `reads: 0` is option (2):
    /// always ask. Not the default: it answers the same as `Probe`, costs
    /// the same when the name sits near its home bucket, and pays a control
    /// transfer at the owner for long chains only — and it needs every
    /// asked clerk to serve.
    ProbeThenNotify {
        /// Remote reads (of `window` buckets each) before asking.
        reads: u32,
    },
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
            serve: false,
            request_slots: 256,
            notify_rto: Duration::from_millis(20),
            notify_spin: Duration::from_micros(50),
            policy: LookupPolicy::Probe,
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
    /// Answered now by another clerk, asked by notification.
    Notified,
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
    table: Arc<Mutex<LocalTable>>,
    peers: Mutex<Peers>,
    cache: Mutex<Cache>,
    asker: Mutex<Asker>,
    serving: Option<Serving>,
}

impl std::fmt::Debug for Clerk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clerk").field("host", &self.node.host_id()).field("params", &self.params).finish()
    }
}

impl Clerk {
    /// Starts the node's clerk: exports its table at the node's well-known
    /// name, its answer segment, and — if `params.serve` — its request
    /// segment and serving thread. Fails if the node already runs one.
    pub fn start(node: &Node, params: ClerkParams) -> Result<Clerk> {
        let table = Arc::new(Mutex::new(LocalTable::export(node, params.buckets, params.protection.clone())?));
        let peers = Peers::new(node, params.read_wait, params.window)?;
        let cache = Cache::new(params.cache_ttl);
        let asker = Asker::new(node, params.protection.clone(), params.notify_rto, params.notify_spin)?;
        let serving = match params.serve {
            true => Some(Serving::start(
                node,
                table.clone(),
                ServeParams {
                    slots: params.request_slots,
                    protection: params.protection.clone(),
                    window: params.window,
                    import_wait: params.read_wait,
                },
            )?),
            false => None,
        };
        Ok(Clerk {
            node: node.clone(),
            params,
            table,
            peers: Mutex::new(peers),
            cache: Mutex::new(cache),
            asker: Mutex::new(asker),
            serving,
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

    /// What this clerk's lookups by notification cost so far.
    pub fn notify_stats(&self) -> NotifyStats {
        lock(&self.asker).stats
    }

    /// What its serving thread has done (all zero if it does not serve).
    pub fn serve_stats(&self) -> ServeStats {
        self.serving.as_ref().map(Serving::stats).unwrap_or_default()
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
    /// tables of `hint` and of the clerk's peers, in that order, each searched
    /// as `params.policy` says (by reads; or by a few reads, then by
    /// notification). `NotFound`
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

    /// LOOKUP with notification (003 Table 7.3, last row): asks `host`'s
    /// clerk, by a remote write with notify, to look `name` up in its table
    /// and write the answer back; spins briefly, then sleeps until it comes.
    /// Skips this clerk's cache (and caches the answer); a name longer than
    /// [`crate::NAME_MAX`] is [`Error::BadName`]. A lost request or answer is
    /// written again every `notify_rto` with the same sequence number until
    /// `timeout`, then [`Error::Timeout`]; `host` not serving (or not there)
    /// is [`Error::NoClerk`]. Asking this clerk's own host looks locally.
    pub fn lookup_notify(&self, name: &str, host: HostId, timeout: Duration) -> Result<Found> {
        check_name(name)?;
        if host == self.host() {
            return self.lookup_local(name)?.ok_or_else(|| Error::NotFound(name.to_string()));
        }
        match lock(&self.asker).ask(host, name, vipc::deadline_after(Instant::now(), timeout))? {
            Some((slot, e)) => Ok(self.remember(host, slot, e, Source::Notified)),
            None => {
                let mut cache = lock(&self.cache);
                if cache.get(name).is_some_and(|c| c.host == host) {
                    cache.remove(name);
                }
                Err(Error::NotFound(name.to_string()))
            }
        }
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
            let deadline = vipc::deadline_after(Instant::now(), self.params.timeout);
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
        let deadline = vipc::deadline_after(Instant::now(), timeout);
        let mut f = self.lookup(name, None)?;
        if f.source == Source::Cache {
            let quick = vipc::deadline_after(Instant::now(), self.params.read_wait.min(timeout));
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
            match self.pull_from(host, name, vipc::deadline_after(Instant::now(), self.params.timeout)) {
                Ok(Some(f)) => return Ok(f),
                Ok(None) => {}
                Err(e) => failure = failure.or(Some(e)),
            }
        }
        Err(failure.unwrap_or_else(|| Error::NotFound(name.to_string())))
    }

    /// One host's table, searched as the policy says.
    fn pull_from(&self, host: HostId, name: &str, deadline: Instant) -> Result<Option<Found>> {
        let reads = match self.params.policy {
            LookupPolicy::Probe => WHOLE,
            LookupPolicy::ProbeThenNotify { reads } => reads,
        };
        let probed = lock(&self.peers).find(host, name, reads, deadline)?;
        let (slot, e, source) = match probed {
            Probed::Found(slot, e) => (slot, e, Source::Remote),
            Probed::Absent => return Ok(None),
            Probed::Unfinished => match lock(&self.asker).ask(host, name, deadline)? {
                Some((slot, e)) => (slot, e, Source::Notified),
                None => return Ok(None),
            },
        };
        Ok(Some(self.remember(host, slot, e, source)))
    }

    /// Caches an entry just pulled or answered (checked to carry its
    /// table's incarnation) and returns it.
    fn remember(&self, host: HostId, slot: u32, e: Entry, source: Source) -> Found {
        let f = found(&e, host, slot, source);
        let incarnation = e.incarnation;
        lock(&self.cache).put(Cached { host, slot, incarnation, entry: e, at: Instant::now() });
        f
    }
}

fn found(e: &Entry, table: HostId, slot: u32, source: Source) -> Found {
    Found { binding: e.binding, generation: e.generation, table, slot, source }
}
