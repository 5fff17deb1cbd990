//! The engine: one node's protocol state and its entry points.
//!
//! The submodules each add one group of methods to [`Engine`]:
//! `primitives` (Send/Receive/Reply/Forward/GetPid/SetPid), `bulk`
//! (MoveTo/MoveFrom streams), `group` (process groups), `reliable` (004's
//! K/ALL sends), `input` (datagram dispatch), `host_alloc`
//! (announcement–complaint), `alive` (I-Am-Here), `timers` (retransmission
//! and expiry), `rmem` (remote memory, 003).

mod alive;
mod buffers;
mod bulk;
mod group;
mod host_alloc;
mod input;
mod limit;
mod location;
mod primitives;
mod reliable;
mod rmem;
mod state;
mod timers;

use crate::*;
use alive::AliveTable;
pub use alive::{AliveHost, AliveHosts};
use group::Groups;
pub use group::{group_multicast_addr, well_known_group, GROUP_ADDR_BASE, WELL_KNOWN_GROUP_HOST};
use host_alloc::HostAlloc;
use location::LocationCache;
pub use primitives::check_name;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
pub use reliable::{GroupOutcome, Reliable, MAX_K};
pub use rmem::{
    Cas, CasAnswer, ControlRecord, DataRecord, Descriptor, Imported, MemLoan, MemOp, MemOpId, MemOutcome, Notify,
    ProtectionGroup, Refusal, SegmentId, SegmentName, SegmentOptions, Strided, CAS_CELL, TOKENLESS_READ_MAX,
};
pub use state::seq_newer;
use state::*;
use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, VecDeque};
use std::net::SocketAddr;
use std::ops::Range;
use vipc_wire::{Header, PacketType};

pub(crate) use bulk::{StreamIn, StreamOut};

/// Hash maps with a fixed hasher: iteration order, and so every output of the
/// engine, is a function of its inputs (and FxHash is fast on small keys).
type HashMap<K, V> = rustc_hash::FxHashMap<K, V>;
type HashSet<K> = rustc_hash::FxHashSet<K>;

/// Where to send a packet for `pid`: its cached host, or broadcast on a
/// miss (counted). A free function, so that a caller holding a record of
/// the engine need not look it up again.
fn route_in(location: &mut LocationCache, stats: &mut Stats, pid: Pid) -> Destination {
    if pid.is_group() {
        return Destination::Broadcast;
    }
    match location.lookup(pid.host()) {
        Some(a) => Destination::Addr(a),
        None => {
            stats.location_misses += 1;
            Destination::Broadcast
        }
    }
}

/// Before segment `id` (whose bytes are `bytes`) changes or goes: the split
/// answers from it still in `transmits` are joined, so that each carries the
/// bytes of the moment its read was served. A free function, so that the
/// callers that hold the segment need not look it up again.
fn join_queued(transmits: &mut VecDeque<Transmit>, split_queued: &mut usize, id: SegmentId, bytes: &[u8]) {
    if *split_queued == 0 {
        return;
    }
    for t in transmits.iter_mut() {
        if let Some(s) = t.segment.filter(|s| s.id == id) {
            t.segment = None;
            *split_queued -= 1;
            t.bytes.extend_from_slice(bytes.get(s.offset..s.offset + s.len).unwrap_or_default());
        }
    }
}

/// Mixed into [`Config::seed`] for the generator of the address-token key
/// when [`Config::token_key`] is not set.
const TOKEN_SEED: u64 = 0x7a6b_656e_5f6b_6579;

/// One node's protocol state machine. See the crate docs.
pub struct Engine {
    cfg: Config,
    rng: ChaCha8Rng,
    incarnation: u16,
    /// When this life began ([`Engine::new`]): group Sends older than it are not taken (§4.10).
    started: Time,
    host: Option<HostId>,
    alloc: Option<HostAlloc>,
    next_seq: u32,
    next_local: u16,
    procs: HashMap<Pid, Proc>,
    exchanges: HashMap<Pid, Exchange>,
    aliens: HashMap<Pid, Alien>,
    lookups: HashMap<Pid, Lookup>,
    names: HashMap<Vec<u8>, (Pid, Scope)>,
    streams_out: HashMap<(Pid, u32), StreamOut>,
    streams_in: HashMap<(Pid, u32), StreamIn>,
    /// The incoming streams into a lent buffer that are not complete: what
    /// [`Engine::next_placement`] searches (a finished stream stays in
    /// `streams_in` for T_t, and a client reading file after file keeps
    /// hundreds there).
    placing: Vec<(Pid, u32)>,
    location: LocationCache,
    alive: AliveTable,
    groups: Groups,
    rmem: rmem::Rmem,
    timers: BinaryHeap<Reverse<(Time, TimerKey)>>,
    /// The earliest heap entry of each exchange and alien timer (see `arm`).
    pending_timers: HashMap<TimerKey, Time>,
    transmits: VecDeque<Transmit>,
    /// Transmits in `transmits` whose data are still in a segment.
    split_queued: usize,
    events: VecDeque<Event>,
    /// Data of the datagram being handled that belong in a lent buffer.
    placement: Option<(Lent, Range<usize>)>,
    /// Buffers handed back by the runtime ([`Engine::recycle`]) for the next packets.
    buffers: buffers::Buffers,
    stats: Stats,
    buffered: usize,
    version_reported: HashSet<SocketAddr>,
    conflicts_reported: HashSet<SocketAddr>,
}

impl Engine {
    /// A new engine. With `HostIdConfig::Allocate` it starts announcing a
    /// candidate host id at once; [`Event::HostReady`] says when it is done.
    pub fn new(config: Config, now: Time) -> Engine {
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        let incarnation = rng.gen_range(1..=u16::MAX);
        let next_seq = rng.gen();
        let mut e = Engine {
            location: LocationCache::new(config.location_cache),
            alive: AliveTable::default(),
            groups: Groups::default(),
            // Derived with a generator of its own, so that the main one's
            // sequence (and every simulation seed's run) is what it was without tokens.
            rmem: rmem::Rmem {
                token_key: config
                    .token_key
                    .unwrap_or_else(|| ChaCha8Rng::seed_from_u64(config.seed ^ TOKEN_SEED).gen()),
                ..rmem::Rmem::default()
            },
            cfg: config,
            rng,
            incarnation,
            started: now,
            host: None,
            alloc: None,
            next_seq,
            next_local: 1,
            procs: HashMap::default(),
            exchanges: HashMap::default(),
            aliens: HashMap::default(),
            lookups: HashMap::default(),
            names: HashMap::default(),
            streams_out: HashMap::default(),
            streams_in: HashMap::default(),
            placing: Vec::new(),
            timers: BinaryHeap::new(),
            pending_timers: HashMap::default(),
            transmits: VecDeque::new(),
            split_queued: 0,
            events: VecDeque::new(),
            placement: None,
            buffers: buffers::Buffers::default(),
            stats: Stats::default(),
            buffered: 0,
            version_reported: HashSet::default(),
            conflicts_reported: HashSet::default(),
        };
        e.start_host_alloc(now);
        e
    }

    /// The logical host id, once allocated.
    pub fn host(&self) -> Option<HostId> {
        self.host
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Counters, with the gauges filled in.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats.clone();
        s.active_exchanges = self.exchanges.len() as u64 + self.lookups.len() as u64;
        s.active_aliens = self.aliens.len() as u64;
        s.active_transfers = (self.streams_out.len() + self.streams_in.len()) as u64;
        s.processes = self.procs.len() as u64;
        s.alive_hosts = self.alive_hosts().hosts().count() as u64;
        (s.memberships, s.group_copies) = self.group_gauges();
        s.rmem_segments = self.rmem.table.len() as u64;
        s.rmem_bytes = self.rmem.table.bytes as u64;
        s.rmem_ops_pending = self.rmem.pending() as u64;
        s.timer_entries = self.timers.len() as u64;
        s
    }

    /// Creates a local process (a V process is a thread with a pid). The first
    /// gets local id 1 (the runtime's kernel server, at a pid every node
    /// knows); the others get ids in order from a point drawn anew by each
    /// incarnation, skipping live ones. So a node restarted with the same host
    /// id is unlikely to give a process the pid of one of its previous life,
    /// to which a client that missed the restart would send requests that
    /// process never receives (a mount hung so for ever): a Send to a pid of
    /// the previous life meets no such process, and the client finds its
    /// server again.
    /// Errors: `NotReady` before the host id is known, `Limit`.
    pub fn create_process(&mut self) -> Result<Pid, Error> {
        let host = self.host.ok_or(Error::NotReady)?;
        if self.procs.len() >= self.cfg.max_processes.min(u16::MAX as usize - 1) {
            return Err(Error::Limit("processes"));
        }
        loop {
            let pid = Pid::new(host, self.next_local);
            self.next_local = match self.next_local {
                1 => self.rng.gen_range(2..=u16::MAX),
                u16::MAX => 2,
                n => n + 1,
            };
            if let std::collections::hash_map::Entry::Vacant(e) = self.procs.entry(pid) {
                e.insert(Proc { blocked: Blocked::No, queue: VecDeque::new(), limit_at: None });
                return Ok(pid);
            }
        }
    }

    /// True if `pid` is a live local process.
    pub fn is_alive(&self, pid: Pid) -> bool {
        self.procs.contains_key(&pid)
    }

    /// The earliest time [`Engine::handle_timeout`] has work to do.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.timers.peek().map(|Reverse((t, _))| *t)
    }

    /// The next datagram to send, whole.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        loop {
            let mut t = self.poll_transmit_split()?;
            if self.join(&mut t) {
                return Some(t);
            }
        }
    }

    /// The next datagram to send; a large read answer comes split, its data
    /// still in the segment ([`Transmit::segment`]), so that the runtime can
    /// send them from there without copying them first.
    pub fn poll_transmit_split(&mut self) -> Option<Transmit> {
        let t = self.transmits.pop_front()?;
        if t.segment.is_some() {
            self.split_queued -= 1;
        }
        Some(t)
    }

    /// The bytes a split transmit carries; `None` if its segment is gone
    /// (possible only if the engine was given something before it was sent).
    pub fn segment_slice(&self, s: &SegmentSlice) -> Option<&[u8]> {
        self.rmem.table.get(s.id)?.bytes().get(s.offset..s.offset.checked_add(s.len)?)
    }

    /// Makes a split transmit whole (in a recycled buffer if one is at hand); false
    /// if its segment is gone and the transmit must be dropped.
    pub fn join(&mut self, t: &mut Transmit) -> bool {
        let Some(s) = t.segment.take() else { return true };
        if self.segment_slice(&s).is_none() {
            return false;
        }
        let mut bytes = self.buffers.get(t.bytes.len() + s.len);
        bytes.extend_from_slice(&t.bytes);
        bytes.extend_from_slice(self.segment_slice(&s).unwrap_or_default());
        t.bytes = bytes;
        true
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Hands back the bytes of a sent [`Transmit`] so that the engine can
    /// build later packets in them: no malloc per small packet, no page faults per large one.
    pub fn recycle(&mut self, bytes: Vec<u8>) {
        self.buffers.recycle(bytes);
    }

    /// `h` and `data` encoded into a buffer from the pools.
    fn encoded(&mut self, h: &Header, data: &[u8]) -> Vec<u8> {
        let mut bytes = self.buffers.for_packet(vipc_wire::encoded_len(data.len(), self.cfg.key.is_some()));
        vipc_wire::encode(h, data, self.cfg.key.as_ref(), &mut bytes);
        bytes
    }

    /// After [`Engine::handle_datagram`]: bytes of that datagram (the range)
    /// that belong in a buffer lent to [`Engine::move_from_lent`], and where.
    /// The runtime must copy them there before it hands the engine another
    /// datagram (the engine has already counted them as received).
    pub fn poll_placement(&mut self) -> Option<(Lent, Range<usize>)> {
        self.placement.take()
    }

    // ----- helpers shared by the submodules -----

    fn is_local(&self, pid: Pid) -> bool {
        Some(pid.host()) == self.host
    }

    fn fresh_seq(&mut self) -> u32 {
        self.next_seq = self.next_seq.wrapping_add(1);
        self.next_seq
    }

    fn wake(&mut self, pid: Pid, completion: Completion) {
        if let Some(p) = self.procs.get_mut(&pid) {
            p.blocked = Blocked::No;
            p.limit_at = None;
        }
        self.events.push_back(Event::Wake { pid, completion });
    }

    /// A header with our incarnation filled in.
    fn header(&self, ptype: PacketType) -> Header {
        let mut h = Header::new(ptype);
        h.incarnation = self.incarnation;
        h
    }

    /// Encodes and queues a packet, in a recycled buffer if one is at hand
    /// (see [`Engine::recycle`]).
    fn emit(&mut self, to: Destination, h: &Header, data: &[u8]) {
        let bytes = self.encoded(h, data);
        self.emit_raw(to, h.ptype, bytes);
    }

    /// [`Engine::emit`], returning a copy of the packet for the engine to
    /// resend (a group member's reply it keeps): only those pay for the copy.
    /// A unicast reply or forward keeps its header instead (see [`AlienState`]).
    fn emit_kept(&mut self, to: Destination, h: &Header, data: &[u8]) -> Vec<u8> {
        let bytes = self.encoded(h, data);
        let kept = bytes.clone();
        self.emit_raw(to, h.ptype, bytes);
        kept
    }

    /// Queues already-encoded bytes.
    fn emit_raw(&mut self, to: Destination, ptype: PacketType, bytes: Vec<u8>) {
        self.stats.packets_out[ptype.index()] += 1;
        self.stats.bytes_out += bytes.len() as u64;
        self.transmits.push_back(Transmit { to, bytes, lent: None, segment: None });
    }

    /// [`join_queued`] for a segment not otherwise borrowed (an unexport).
    fn join_queued_from(&mut self, id: SegmentId) {
        if let Some(seg) = self.rmem.table.get(id) {
            join_queued(&mut self.transmits, &mut self.split_queued, id, seg.bytes());
        }
    }

    /// Queues a packet whose data are `lent` bytes of a lent buffer: only the
    /// header is encoded here (no key: a MAC would need the data), with the
    /// data length at offset 24 set to `lent.len`.
    fn emit_lent(&mut self, to: Destination, h: &Header, lent: Lent) {
        let bytes = self.lent_header(h, lent.len);
        self.transmits.push_back(Transmit { to, bytes, lent: Some(lent), segment: None });
    }

    /// The encoded header of a packet whose `len` data bytes the runtime
    /// appends from a buffer it holds (no key: a MAC would need the data),
    /// counted as sent.
    fn lent_header(&mut self, h: &Header, len: usize) -> Vec<u8> {
        debug_assert!(self.cfg.key.is_none(), "lent data cannot be MACed");
        let mut bytes = self.encoded(h, &[]);
        bytes[24..28].copy_from_slice(&(len as u32).to_be_bytes());
        self.stats.packets_out[h.ptype.index()] += 1;
        self.stats.bytes_out += (bytes.len() + len) as u64;
        bytes
    }

    /// Where to send a packet for `pid` (see [`route_in`]).
    fn route(&mut self, pid: Pid) -> Destination {
        route_in(&mut self.location, &mut self.stats, pid)
    }

    /// Arms the timer `key` for `at` (see [`Engine::timer_entry`]) and makes
    /// the record expect the entry it got. The record's `timer_at` must be
    /// set before the call.
    fn arm(&mut self, at: Time, key: TimerKey) {
        let t = self.timer_entry(at, key);
        if t == at {
            return;
        }
        let expects = match key {
            TimerKey::Exchange(pid) => self.exchanges.get_mut(&pid).map(|ex| &mut ex.timer_at),
            TimerKey::Alien(pid) => self.aliens.get_mut(&pid).map(|a| &mut a.timer_at),
            _ => None,
        };
        if let Some(expects) = expects {
            *expects = Some(t);
        }
    }

    /// The heap entry a timer `key` armed for `at` is to expect: a new one,
    /// or — for the timers of exchanges and aliens, re-armed on every
    /// exchange, of the remote-memory deadlines, re-armed on every
    /// operation, and of a caller's limit, armed by every blocking call
    /// made within it — one already pending for that key at or before `at`
    /// (its handler finds the record early and re-arms). A busy client or
    /// server thus keeps one live heap entry per peer process instead of
    /// one stale entry per exchange. The caller records the time returned.
    fn timer_entry(&mut self, at: Time, key: TimerKey) -> Time {
        if matches!(key, TimerKey::Exchange(_) | TimerKey::Alien(_) | TimerKey::MemDeadlines | TimerKey::Limit(_)) {
            match self.pending_timers.entry(key) {
                Entry::Occupied(e) if *e.get() <= at => return *e.get(),
                Entry::Occupied(mut e) => {
                    e.insert(at);
                }
                Entry::Vacant(e) => {
                    e.insert(at);
                }
            }
        }
        self.timers.push(Reverse((at, key)));
        at
    }

    fn check_caller(&self, pid: Pid) -> Result<(), Error> {
        match self.procs.get(&pid) {
            None => Err(Error::NotLocalProcess(pid)),
            Some(p) if p.blocked != Blocked::No => Err(Error::Busy(pid)),
            Some(_) => Ok(()),
        }
    }

    fn set_blocked(&mut self, pid: Pid, b: Blocked) {
        if let Some(p) = self.procs.get_mut(&pid) {
            p.blocked = b;
        }
    }

    fn unqueue(&mut self, receiver: Pid, item: Incoming) {
        if let Some(p) = self.procs.get_mut(&receiver) {
            p.queue.retain(|i| *i != item);
        }
    }

    /// Releases what an alien holds elsewhere — its queue entry and its
    /// buffered bytes — leaving it in the table to be overwritten; false if
    /// there is none.
    fn release_alien(&mut self, src: Pid) -> bool {
        let Some(a) = self.aliens.get_mut(&src) else { return false };
        let (released, queued, dst) = (std::mem::take(&mut a.appended).len(), a.state == AlienState::Queued, a.dst);
        self.buffered -= released;
        if queued {
            self.unqueue(dst, Incoming::Remote(src));
        }
        true
    }

    /// Makes room in a full alien table: drops the least recently heard
    /// record of an exchange that ended without a reply to keep (refused,
    /// cancelled — a retransmission of it is refused again or never comes —,
    /// or idempotent and replied, which may run again anyway) and silent for
    /// a whole T_r, so that no duplicate of it is still on its way. False if
    /// no alien qualifies: the new sender then waits. Without this, 4,096
    /// forged senders refreshing refused Sends kept every real sender out.
    fn evict_finished_alien(&mut self, now: Time) -> bool {
        let quiet = |a: &Alien| now.since(a.last_heard) >= self.cfg.retransmit;
        let finished = self
            .aliens
            .iter()
            .filter(|(_, a)| matches!(a.state, AlienState::Gone { .. } | AlienState::Done) && quiet(a))
            .min_by_key(|(_, a)| a.last_heard)
            .map(|(src, _)| *src);
        let Some(src) = finished else { return false };
        self.drop_alien(src);
        self.stats.aliens_evicted += 1;
        true
    }

    /// Removes an alien, its queue entry and its buffered bytes.
    fn drop_alien(&mut self, src: Pid) {
        if self.release_alien(src) {
            self.aliens.remove(&src);
        }
    }

    /// Ends an alien without a reply but keeps its sequence number (see
    /// [`AlienState::Gone`]) until it has been silent for the expiry time.
    fn bury_alien(&mut self, now: Time, src: Pid, nack: bool) {
        if !self.release_alien(src) {
            return;
        }
        if let Some(a) = self.aliens.get_mut(&src) {
            a.state = AlienState::Gone { nack };
            a.last_heard = now;
        }
    }

    /// How long an alien outlives the last packet from its sender: twice T_t,
    /// so that it outlives every retransmission the sender can still make
    /// (a sender gives up T_t after its last sign of progress).
    fn alien_lifetime(&self) -> std::time::Duration {
        self.cfg.timeout * 2
    }

    fn random_host_candidate(&mut self) -> HostId {
        self.rng.gen_range(1..=vipc_wire::MAX_HOST_ID)
    }
}
