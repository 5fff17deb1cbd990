//! MoveTo and MoveFrom (000 §5.6.2), streamed without per-packet
//! acknowledgements and with selective retransmission.
//!
//! Data flows from a *stream sender* to a *stream receiver*: for MoveTo from
//! the mover's node to the node of the client whose segment is written; for
//! MoveFrom from the client's node (after a MoveFromRequest) to the mover's.
//! The sender keeps at most `window` unacknowledged chunks in flight and asks
//! for an acknowledgement every half window and on the last chunk. An
//! acknowledgement carries the count of chunks received contiguously from the
//! start and a 256-bit map of the chunks after those. A chunk is resent when
//! a chunk sent three or more transmissions after it has been acknowledged
//! (it was lost, not merely overtaken), or
//! when nothing at all has been acknowledged for T_r (then the first missing
//! chunk is resent with an acknowledgement request). T_t without any
//! acknowledgement fails the transfer.

use super::primitives::{check_range, nack};
use super::*;
use std::time::Duration;
use vipc_wire::{Flags, HEADER_LEN};

/// [`Engine::next_placement`] answers only while at most this many incoming
/// streams into lent buffers are under way (it searches them all).
pub(crate) const NEXT_PLACEMENT_SCAN: usize = 8;

/// Bits in an acknowledgement's chunk map (the 32-byte message field).
const ACK_MAP_BITS: usize = 256;

/// A chunk counts as lost once a chunk sent this many transmissions after it
/// is acknowledged: smaller gaps may be reordering (TCP's duplicate-ack threshold).
const REORDER_TOLERANCE: u64 = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StreamKind {
    MoveTo,
    MoveFrom,
}

/// The sending end of a stream (keyed by (receiver pid, seq)).
#[derive(Debug)]
pub(crate) struct StreamOut {
    kind: StreamKind,
    /// MoveTo: the client's exchange (its Send's seq) the data belong to.
    exchange: u32,
    /// The local process the stream belongs to (mover for MoveTo, client for MoveFrom).
    local: Pid,
    addr: SocketAddr,
    base: u32,
    /// Where the bytes come from.
    source: Source,
    /// Bytes in the transfer.
    total: usize,
    chunk: usize,
    acked: Vec<bool>,
    acked_count: usize,
    /// Chunks below this are all acknowledged.
    cum: usize,
    /// Next chunk never sent.
    next_new: usize,
    /// Transmission order of each chunk's latest sending.
    sent_order: Vec<u64>,
    order: u64,
    /// Highest `sent_order` among acknowledged chunks.
    acked_order: u64,
    next_retransmit: Time,
    deadline: Time,
    /// The latest `deadline` may be: see [`Engine::stream_cap`].
    cap: Time,
    timer_at: Option<Time>,
}

/// Where a stream sender's bytes are.
#[derive(Debug)]
pub(crate) enum Source {
    /// A copy the engine holds (MoveTo).
    Owned(Vec<u8>),
    /// The mover's lent buffer (MoveTo with [`Engine::move_to_lent`]): chunks
    /// leave as [`Transmit`]s whose data the runtime appends.
    Lent,
    /// The segment of the local client's exchange `exchange`, from the
    /// stream's base offset (MoveFrom): read in place, chunk by chunk.
    Segment { exchange: u32 },
}

/// The receiving end of a stream (keyed by (sender pid, seq)).
#[derive(Debug)]
pub(crate) struct StreamIn {
    kind: StreamKind,
    /// The client's exchange (its Send's seq) the data belong to.
    exchange: u32,
    /// The local process (client for MoveTo, mover for MoveFrom).
    local: Pid,
    addr: SocketAddr,
    base: u32,
    total: usize,
    /// Chunk size, learned from the first data packet (0 until then).
    chunk: usize,
    got: Vec<bool>,
    got_count: usize,
    cum: usize,
    /// MoveFrom: the bytes being assembled (empty when lent).
    buf: Vec<u8>,
    /// Into a lent buffer — the mover's (MoveFrom) or the client's
    /// ([`Engine::send_lending_write`], MoveTo): each fresh chunk becomes a
    /// placement, and [`Engine::next_placement`] says where the next one goes.
    lent: bool,
    done: bool,
    last_heard: Time,
    /// The stream fails here even if it is still progressing: see [`Engine::stream_cap`].
    cap: Time,
    /// MoveFrom: when to resend the request if no data has come.
    next_retransmit: Time,
    timer_at: Option<Time>,
}

/// What the mover may do with a client's segment.
pub(super) struct Grant {
    pub access: Access,
    pub size: u64,
    /// The client's node and its exchange's seq, or `None` if the client is local.
    pub remote: Option<(SocketAddr, u32)>,
}

/// Where data packets and MoveFrom requests carry the client's exchange seq
/// (message bytes 4..8; bytes 0..4 of a data packet hold the chunk size).
const EXCHANGE_AT: usize = 4;

fn exchange_of(h: &Header) -> u32 {
    u32::from_be_bytes(h.message[EXCHANGE_AT..EXCHANGE_AT + 4].try_into().expect("4 bytes"))
}

/// The smallest chunk a receiver accepts, unless the transfer is shorter:
/// what a packet of the smallest `max_packet` carries. Chunks of one byte
/// would make the receiver keep a flag per byte of the segment.
pub(crate) const MIN_CHUNK: usize = 64;

/// Streams the processes of one other host may open with one local process
/// at once (unfinished MoveTos into its segment, MoveFroms out of it). A
/// mover moves one at a time (MoveTo and MoveFrom block), but the members
/// of a group on one host may all read the sender's segment together; fresh
/// stream seqs or mover pids from a hostile host must not open streams
/// without end.
pub(crate) const MAX_STREAMS_PER_HOST: usize = 16;

/// Finished incoming streams kept (against late duplicates, for T_t) per
/// other host and local process; beyond it the oldest is forgotten.
pub(crate) const MAX_DONE_STREAMS_PER_HOST: usize = 256;

fn chunks(total: usize, chunk: usize) -> usize {
    total.div_ceil(chunk)
}

impl Engine {
    /// When a stream of `total` bytes started at `now` fails however it
    /// progresses: after T_t plus the time `total` takes at
    /// `min_stream_rate`. Without it, a peer that sends (or acknowledges)
    /// one fresh 64-byte chunk every T_t would hold a mover's MoveFrom (or
    /// MoveTo) open for hours.
    fn stream_cap(&self, now: Time, total: usize) -> Time {
        match self.cfg.min_stream_rate {
            0 => Time(u64::MAX),
            rate => {
                now + self.cfg.timeout + Duration::from_nanos((total as u128 * 1_000_000_000 / rate as u128) as u64)
            }
        }
    }

    /// The segment grant of `client`, which must be awaiting a reply from `mover`.
    fn grant(&self, mover: Pid, client: Pid) -> Result<Grant, Error> {
        if let Some(ex) = self.exchanges.get(&client) {
            if matches!(ex.state, ExchangeState::Local { received_by: Some(r) } if r == mover) {
                return Ok(Grant { access: ex.access(), size: ex.segment_size() as u64, remote: None });
            }
        }
        match self.aliens.get(&client) {
            Some(a) if a.state == (AlienState::Received { by: mover }) => {
                Ok(Grant { access: a.access, size: a.segment_size as u64, remote: Some((a.addr, a.seq)) })
            }
            _ => self.group_grant(client, mover).ok_or(Error::NotAwaitingReply(client)),
        }
    }

    /// The grant a MoveTo of `len` bytes at `offset` by `from` into `dest`'s
    /// segment would use, if it may take place.
    fn write_grant(&self, from: Pid, dest: Pid, offset: u32, len: u64) -> Result<Grant, Error> {
        self.check_caller(from)?;
        let g = self.grant(from, dest)?;
        if !g.access.write {
            return Err(Error::NoAccess("write"));
        }
        check_range(offset as u64, len, g.size)?;
        Ok(g)
    }

    /// The checks [`Engine::move_to`] makes before it moves anything, alone:
    /// a caller whose bytes are costly to produce (read from a file) can
    /// fail before it produces them.
    pub fn check_move_to(&self, from: Pid, dest: Pid, offset: u32, len: u64) -> Result<(), Error> {
        self.write_grant(from, dest, offset, len).map(drop)
    }

    /// MoveTo: write `data` at `offset` of the write-granted segment of `dest`,
    /// which must be awaiting a reply from `from`. Blocks until [`Completion::Move`].
    pub fn move_to(&mut self, now: Time, from: Pid, dest: Pid, offset: u32, data: Vec<u8>) -> Result<(), Error> {
        let g = self.write_grant(from, dest, offset, data.len() as u64)?;
        self.set_blocked(from, Blocked::Move);
        let Some((addr, exchange)) = g.remote.filter(|_| !data.is_empty()) else {
            self.write_exchange_segment(dest, offset as usize, &data, false);
            self.wake(from, Completion::Move(Ok(Vec::new())));
            return Ok(());
        };
        let (seq, total) = (self.fresh_seq(), data.len());
        self.start_stream_out(
            now,
            StreamKind::MoveTo,
            exchange,
            from,
            dest,
            seq,
            addr,
            offset,
            Source::Owned(data),
            total,
        );
        Ok(())
    }

    /// MoveTo whose `len` bytes stay in a buffer the caller lends for the
    /// duration of the call: every data packet is a [`Transmit`] with
    /// [`Transmit::lent`] set, whose data the runtime appends from that
    /// buffer (nothing is copied into the engine). For a remote client of a
    /// node without a key only (else [`Error::Unsupported`]); otherwise as
    /// [`Engine::move_to`].
    pub fn move_to_lent(&mut self, now: Time, from: Pid, dest: Pid, offset: u32, len: u32) -> Result<(), Error> {
        let g = self.write_grant(from, dest, offset, len as u64)?;
        if self.cfg.key.is_some() {
            return Err(Error::Unsupported("a lent MoveTo on a node with a key"));
        }
        let Some((addr, exchange)) = g.remote else {
            return Err(Error::Unsupported("a lent MoveTo to a process on this node"));
        };
        self.set_blocked(from, Blocked::Move);
        if len == 0 {
            self.wake(from, Completion::Move(Ok(Vec::new())));
            return Ok(());
        }
        let seq = self.fresh_seq();
        self.start_stream_out(
            now,
            StreamKind::MoveTo,
            exchange,
            from,
            dest,
            seq,
            addr,
            offset,
            Source::Lent,
            len as usize,
        );
        Ok(())
    }

    /// MoveFrom: read `len` bytes at `offset` of the read-granted segment of
    /// `src`, which must be awaiting a reply from `from`. Blocks until [`Completion::Move`].
    pub fn move_from(&mut self, now: Time, from: Pid, src: Pid, offset: u32, len: u32) -> Result<(), Error> {
        self.move_from_into(now, from, src, offset, len, false)
    }

    /// MoveFrom into a buffer of `len` bytes the caller lends for the
    /// duration of the call: the engine copies nothing; after each datagram,
    /// [`Engine::poll_placement`] says which of its bytes go where in that
    /// buffer, and the completion carries no data. For a remote client only
    /// (else [`Error::Unsupported`]); otherwise as [`Engine::move_from`].
    pub fn move_from_lent(&mut self, now: Time, from: Pid, src: Pid, offset: u32, len: u32) -> Result<(), Error> {
        self.move_from_into(now, from, src, offset, len, true)
    }

    /// Where the next data of `pid`'s lent MoveFrom ([`Engine::move_from_lent`])
    /// most likely go: the offset in the lent buffer and the length of the
    /// first chunk not yet received. Those bytes of the buffer are not yet
    /// written, so the runtime may receive the next datagram in place (its
    /// data part there) and skip the copy when [`Engine::poll_placement`]
    /// confirms it. `None` before the first chunk (its size is not known),
    /// once complete, or if `pid` has no such stream. Also `None` while more
    /// than `NEXT_PLACEMENT_SCAN` streams into lent buffers are under way:
    /// the search looks at each, per datagram.
    pub fn next_placement(&self, pid: Pid) -> Option<(usize, usize)> {
        if self.placing.len() > NEXT_PLACEMENT_SCAN {
            return None;
        }
        let s = self
            .placing
            .iter()
            .filter_map(|key| self.streams_in.get(key))
            .find(|s| s.local == pid && !s.done && s.chunk > 0 && self.lends_now(pid, s))?;
        let at = s.cum.checked_mul(s.chunk)?;
        // A MoveTo's chunks go to its base offset of the client's buffer; a MoveFrom's buffer is its own.
        let base = if s.kind == StreamKind::MoveTo { s.base as usize } else { 0 };
        (s.cum < s.got.len() && at < s.total).then(|| (base + at, s.chunk.min(s.total - at)))
    }

    /// Whether `pid`'s buffer lent now is the one stream `s` writes: a
    /// MoveTo's only while its exchange is `pid`'s present one (a stream cut
    /// off by its mover's restart outlives the exchange, and the buffer lent
    /// next belongs to another); a lent MoveFrom's only while `pid` is in
    /// it (it ends with the move).
    fn lends_now(&self, pid: Pid, s: &StreamIn) -> bool {
        match s.kind {
            StreamKind::MoveTo => self.exchanges.get(&pid).is_some_and(|ex| {
                ex.lent_write.is_some() && matches!(ex.state, ExchangeState::Remote { seq, .. } if seq == s.exchange)
            }),
            StreamKind::MoveFrom => self.procs.get(&pid).is_some_and(|p| p.blocked == Blocked::Move),
        }
    }

    fn move_from_into(
        &mut self,
        now: Time,
        from: Pid,
        src: Pid,
        offset: u32,
        len: u32,
        lent: bool,
    ) -> Result<(), Error> {
        self.check_caller(from)?;
        let g = self.grant(from, src)?;
        if !g.access.read {
            return Err(Error::NoAccess("read"));
        }
        check_range(offset as u64, len as u64, g.size)?;
        if lent && g.remote.is_none() {
            return Err(Error::Unsupported("a lent MoveFrom from a process on this node"));
        }
        self.set_blocked(from, Blocked::Move);
        let Some((addr, exchange)) = g.remote.filter(|_| len > 0) else {
            let data = self
                .exchanges
                .get(&src)
                .and_then(|ex| ex.segment.as_ref())
                .and_then(|s| s.data.get(offset as usize..(offset + len) as usize))
                .map(<[u8]>::to_vec)
                .unwrap_or_default();
            self.wake(from, Completion::Move(Ok(data)));
            return Ok(());
        };
        let seq = self.fresh_seq();
        let retransmit = now + self.cfg.retransmit;
        if lent {
            self.placing.push((src, seq));
        }
        self.streams_in.insert(
            (src, seq),
            StreamIn {
                kind: StreamKind::MoveFrom,
                exchange,
                local: from,
                addr,
                base: offset,
                total: len as usize,
                chunk: 0,
                got: Vec::new(),
                got_count: 0,
                cum: 0,
                buf: if lent { Vec::new() } else { vec![0; len as usize] },
                lent,
                done: false,
                last_heard: now,
                cap: self.stream_cap(now, len as usize),
                next_retransmit: retransmit,
                timer_at: Some(retransmit),
            },
        );
        self.arm(retransmit, TimerKey::StreamIn(src, seq));
        self.transmit_move_from_request(src, seq);
        Ok(())
    }

    fn transmit_move_from_request(&mut self, src: Pid, seq: u32) {
        let Some(s) = self.streams_in.get(&(src, seq)) else { return };
        let mut h = self.header(PacketType::MoveFromRequest);
        h.seq = seq;
        h.src = s.local;
        h.dst = src;
        h.total_len = s.total as u32;
        h.local_addr = s.base;
        h.message[EXCHANGE_AT..EXCHANGE_AT + 4].copy_from_slice(&s.exchange.to_be_bytes());
        let addr = s.addr;
        self.emit(Destination::Addr(addr), &h, &[]);
    }

    #[allow(clippy::too_many_arguments)]
    fn start_stream_out(
        &mut self,
        now: Time,
        kind: StreamKind,
        exchange: u32,
        local: Pid,
        peer: Pid,
        seq: u32,
        addr: SocketAddr,
        base: u32,
        source: Source,
        total: usize,
    ) {
        let chunk = self.cfg.data_to(addr);
        let n = chunks(total, chunk);
        let (retransmit, deadline) = (now + self.cfg.retransmit, now + self.cfg.timeout);
        self.streams_out.insert(
            (peer, seq),
            StreamOut {
                kind,
                exchange,
                local,
                addr,
                base,
                source,
                total,
                chunk,
                acked: vec![false; n],
                acked_count: 0,
                cum: 0,
                next_new: 0,
                sent_order: vec![0; n],
                order: 0,
                acked_order: 0,
                next_retransmit: retransmit,
                deadline,
                cap: self.stream_cap(now, total),
                timer_at: Some(retransmit),
            },
        );
        self.arm(retransmit, TimerKey::StreamOut(peer, seq));
        self.pump(peer, seq);
    }

    /// Sends new chunks while the window allows.
    fn pump(&mut self, peer: Pid, seq: u32) {
        loop {
            let Some(s) = self.streams_out.get(&(peer, seq)) else { return };
            let window = self.cfg.window_chunks(s.chunk);
            let n = s.acked.len();
            let in_flight = s.next_new - s.acked_count;
            // Never outrun what an acknowledgement's chunk map can describe.
            if s.next_new >= n || in_flight >= window || s.next_new >= s.cum + ACK_MAP_BITS {
                return;
            }
            let i = s.next_new;
            let ask = i + 1 == n || in_flight + 1 >= window || (i + 1) % (window / 2) == 0;
            self.send_chunk(peer, seq, i, ask);
            // Sending may end the stream (a MoveFrom whose exchange has ended).
            let Some(s) = self.streams_out.get_mut(&(peer, seq)) else { return };
            s.next_new += 1;
        }
    }

    fn send_chunk(&mut self, peer: Pid, seq: u32, i: usize, ask_ack: bool) {
        let key = self.cfg.key.clone();
        let incarnation = self.incarnation;
        let Some(s) = self.streams_out.get_mut(&(peer, seq)) else { return };
        s.order += 1;
        s.sent_order[i] = s.order;
        let ptype = if s.kind == StreamKind::MoveTo { PacketType::MoveToData } else { PacketType::MoveFromData };
        let mut h = Header::new(ptype);
        h.incarnation = incarnation;
        h.flags = Flags(0).with(Flags::ACK_REQUEST, ask_ack);
        h.seq = seq;
        h.src = s.local;
        h.dst = peer;
        h.total_len = s.total as u32;
        h.local_addr = s.base;
        h.remote_addr = (i * s.chunk) as u32;
        h.message[..4].copy_from_slice(&(s.chunk as u32).to_be_bytes());
        h.message[EXCHANGE_AT..EXCHANGE_AT + 4].copy_from_slice(&s.exchange.to_be_bytes());
        let (start, end) = (i * s.chunk, ((i + 1) * s.chunk).min(s.total));
        let addr = s.addr;
        let mut bytes = match s.source {
            Source::Lent => Vec::new(),
            _ => self.buffers.get(vipc_wire::encoded_len(end - start, key.is_some())),
        };
        let Some(s) = self.streams_out.get(&(peer, seq)) else { return };
        match &s.source {
            Source::Owned(data) => vipc_wire::encode(&h, &data[start..end], key.as_ref(), &mut bytes),
            Source::Lent => {
                let lent = Lent { pid: s.local, offset: start, len: end - start };
                return self.emit_lent(Destination::Addr(addr), &h, lent);
            }
            Source::Segment { exchange } => {
                let at = s.base as usize;
                let ex = self
                    .exchanges
                    .get(&s.local)
                    .filter(|ex| matches!(ex.state, ExchangeState::Remote { seq, .. } if seq == *exchange))
                    .filter(|ex| at + s.total <= ex.segment_size());
                match ex {
                    Some(ex) if ex.lent_read.is_some() => {
                        // The client's thread sends the chunk from its own copy.
                        let lent = Lent { pid: s.local, offset: at + start, len: end - start };
                        self.recycle(bytes);
                        return self.emit_lent(Destination::Addr(addr), &h, lent);
                    }
                    Some(ex) => {
                        let seg = ex.segment.as_ref().expect("segment_size > 0");
                        vipc_wire::encode(&h, &seg.data[at + start..at + end], key.as_ref(), &mut bytes)
                    }
                    None => {
                        // The client's exchange has ended: nobody wants the rest.
                        self.streams_out.remove(&(peer, seq));
                        return;
                    }
                }
            }
        }
        self.emit_raw(Destination::Addr(addr), ptype, bytes);
    }

    pub(crate) fn on_move_from_request(&mut self, now: Time, from: SocketAddr, h: &Header) {
        // A MoveFrom of nothing completes on the mover's node: no request.
        if h.total_len == 0 {
            return self.malformed();
        }
        if self.streams_out.contains_key(&(h.src, h.seq)) {
            self.stats.duplicates += 1;
            return;
        }
        let (offset, len) = (h.local_addr, h.total_len);
        let exchange = exchange_of(h);
        if let Err((reason, detail)) = self.check_client_segment(h.dst, h.src, exchange, false, offset, len) {
            return self.send_nack(from, h, reason, detail);
        }
        // Counted after the segment checks (as MoveToData's): only a mover
        // the client's exchange names gets this far.
        let host = h.src.host();
        let open = self.streams_out.iter().filter(|((peer, _), s)| s.local == h.dst && peer.host() == host).count();
        if open >= MAX_STREAMS_PER_HOST {
            return self.malformed();
        }
        // The stream goes to the request's source: without a key, only the
        // address the exchange's Send went to may ask for it, or a host that
        // knows the exchange could forge the source and aim the segment at
        // someone else.
        let sent_to = self.exchanges.get(&h.dst).and_then(|ex| match ex.state {
            ExchangeState::Remote { sent_to, .. } => sent_to,
            ExchangeState::Local { .. } => None,
        });
        if self.cfg.key.is_none() && sent_to.is_some_and(|a| a != from) {
            return self.stray();
        }
        self.heard_receiver(h.dst, exchange, h.src, h.incarnation);
        // The chunks are read from the client's segment as they are sent: no copy.
        let source = Source::Segment { exchange };
        self.start_stream_out(now, StreamKind::MoveFrom, 0, h.dst, h.src, h.seq, from, offset, source, len as usize);
    }

    /// On the client's node: may `mover` read (or write) `[offset, offset+len)`
    /// of the segment of `client`'s exchange `exchange`? (A move meant for an
    /// earlier exchange of the same client must never touch the current one.)
    fn check_client_segment(
        &self,
        client: Pid,
        mover: Pid,
        exchange: u32,
        write: bool,
        offset: u32,
        len: u32,
    ) -> Result<(), (u8, [u32; 3])> {
        let Some(ex) = self.exchanges.get(&client) else {
            let reason =
                if self.procs.contains_key(&client) { nack::NOT_AWAITING_REPLY } else { nack::NO_SUCH_PROCESS };
            return Err((reason, [0; 3]));
        };
        // Any member of a group may read a group Send's segment; none may
        // MoveTo it (the first reply writes it).
        let group = ex.to.is_group();
        if !matches!(ex.state, ExchangeState::Remote { seq, .. } if seq == exchange)
            || (!group && ex.to.host() != mover.host())
        {
            return Err((nack::NOT_AWAITING_REPLY, [0; 3]));
        }
        let access = if group { Access { read: ex.access().read, write: false } } else { ex.access() };
        if write && !access.write {
            return Err((nack::NO_WRITE_ACCESS, [0; 3]));
        }
        if !write && !access.read {
            return Err((nack::NO_READ_ACCESS, [0; 3]));
        }
        let size = ex.segment_size() as u64;
        check_range(offset as u64, len as u64, size).map_err(|_| (nack::OUT_OF_SEGMENT, [offset, len, size as u32]))
    }

    pub(crate) fn on_data(&mut self, now: Time, from: SocketAddr, h: &Header, data: &[u8]) {
        let kind = if h.ptype == PacketType::MoveToData { StreamKind::MoveTo } else { StreamKind::MoveFrom };
        let chunk = u32::from_be_bytes([h.message[0], h.message[1], h.message[2], h.message[3]]) as usize;
        let total = h.total_len as usize;
        let at = h.remote_addr as usize;
        let valid_shape = chunk >= MIN_CHUNK.min(total)
            && chunk > 0
            && at % chunk == 0
            && at < total
            && data.len() == chunk.min(total - at)
            && (h.local_addr as u64 + total as u64) <= u32::MAX as u64;
        if !valid_shape {
            return self.malformed();
        }
        let key = (h.src, h.seq);
        if !self.streams_in.contains_key(&key) {
            if kind == StreamKind::MoveFrom {
                return self.stray(); // MoveFrom streams exist from the request on
            }
            // Checked first: only a mover the client's exchange names pays
            // for the count below (it scanned for any packet at all).
            if let Err((reason, detail)) =
                self.check_client_segment(h.dst, h.src, exchange_of(h), true, h.local_addr, h.total_len)
            {
                return self.send_nack(from, h, reason, detail);
            }
            let host = h.src.host();
            let ours = |((peer, _), s): &(&(Pid, u32), &StreamIn)| s.local == h.dst && peer.host() == host;
            let (mut open, mut done, mut oldest) = (0, 0, None::<((Pid, u32), Time)>);
            for (k, s) in self.streams_in.iter().filter(ours) {
                if !s.done {
                    open += 1;
                } else {
                    done += 1;
                    if oldest.is_none_or(|(_, t)| s.last_heard < t) {
                        oldest = Some((*k, s.last_heard));
                    }
                }
            }
            if open >= MAX_STREAMS_PER_HOST {
                return self.malformed();
            }
            // Finished streams are kept for T_t against late duplicates; a
            // mover opening tiny ones as fast as it can would grow the table
            // (and this scan) without bound: past MAX_DONE_STREAMS_PER_HOST
            // the oldest goes.
            if done >= MAX_DONE_STREAMS_PER_HOST {
                if let Some((k, _)) = oldest {
                    self.remove_stream_in(k);
                }
            }
            self.heard_receiver(h.dst, exchange_of(h), h.src, h.incarnation);
            let lent = self.exchanges.get(&h.dst).is_some_and(|ex| ex.lent_write.is_some());
            if lent {
                self.placing.push(key);
            }
            self.streams_in.insert(
                key,
                StreamIn {
                    kind,
                    exchange: exchange_of(h),
                    local: h.dst,
                    addr: from,
                    base: h.local_addr,
                    total,
                    chunk: 0,
                    got: Vec::new(),
                    got_count: 0,
                    cum: 0,
                    buf: Vec::new(),
                    lent,
                    done: false,
                    last_heard: now,
                    cap: self.stream_cap(now, total),
                    next_retransmit: now,
                    timer_at: None,
                },
            );
        }
        let s = self.streams_in.get_mut(&key).expect("present");
        let same_exchange = kind == StreamKind::MoveFrom || s.exchange == exchange_of(h);
        if s.kind != kind
            || !same_exchange
            || s.total != total
            || s.base != h.local_addr
            || s.local != h.dst
            || (s.chunk != 0 && s.chunk != chunk)
        {
            return self.malformed();
        }
        if s.chunk == 0 {
            s.chunk = chunk;
            s.got = vec![false; chunks(total, chunk)];
        }
        if s.timer_at.is_none() {
            let expiry = now + self.cfg.timeout;
            s.timer_at = Some(expiry);
            self.arm(expiry, TimerKey::StreamIn(key.0, key.1));
        }
        let s = self.streams_in.get_mut(&key).expect("present");
        let i = at / chunk;
        let fresh = !s.done && !s.got[i];
        if fresh {
            // Only progress keeps the stream alive: a peer repeating a chunk
            // already here must not hold the mover's MoveFrom open forever.
            s.last_heard = now;
            s.got[i] = true;
            s.got_count += 1;
            while s.cum < s.got.len() && s.got[s.cum] {
                s.cum += 1;
            }
        } else {
            self.stats.duplicates += 1;
        }
        let s = self.streams_in.get_mut(&key).expect("present");
        if fresh {
            match kind {
                StreamKind::MoveFrom if s.lent => {
                    // A packet's data start right after its header.
                    let lent = Lent { pid: s.local, offset: at, len: data.len() };
                    self.placement = Some((lent, HEADER_LEN..HEADER_LEN + data.len()));
                }
                StreamKind::MoveFrom => s.buf[at..at + data.len()].copy_from_slice(data),
                StreamKind::MoveTo => {
                    let dest = (s.base as usize) + at;
                    let exchange = s.exchange;
                    // Only into the exchange the stream belongs to: it may have ended meanwhile.
                    let current = self
                        .exchanges
                        .get(&h.dst)
                        .filter(|ex| matches!(ex.state, ExchangeState::Remote { seq, .. } if seq == exchange));
                    if current.is_some_and(|ex| dest + data.len() <= ex.segment_size()) {
                        self.write_exchange_segment(h.dst, dest, data, true);
                    }
                }
            }
        }
        let s = self.streams_in.get_mut(&key).expect("present");
        let complete = s.got_count == s.got.len();
        let just_done = complete && !s.done;
        if just_done {
            s.done = true;
            self.placing.retain(|k| *k != key);
            let s = self.streams_in.get_mut(&key).expect("present");
            if kind == StreamKind::MoveFrom {
                let (mover, buf) = (s.local, std::mem::take(&mut s.buf));
                self.wake(mover, Completion::Move(Ok(buf)));
            }
        }
        if h.flags.has(Flags::ACK_REQUEST) || just_done || !fresh {
            self.send_ack(key);
        }
    }

    fn send_ack(&mut self, key: (Pid, u32)) {
        let Some(s) = self.streams_in.get(&key) else { return };
        let ptype = if s.kind == StreamKind::MoveTo { PacketType::MoveToAck } else { PacketType::MoveFromAck };
        let mut h = self.header(ptype);
        h.seq = key.1;
        h.src = s.local;
        h.dst = key.0;
        h.total_len = s.total as u32;
        h.local_addr = s.cum as u32;
        for b in 0..ACK_MAP_BITS {
            if s.got.get(s.cum + b).copied().unwrap_or(false) {
                h.message[b / 8] |= 1 << (b % 8);
            }
        }
        let addr = s.addr;
        self.emit(Destination::Addr(addr), &h, &[]);
    }

    pub(crate) fn on_ack(&mut self, now: Time, h: &Header) {
        let key = (h.src, h.seq);
        let expected =
            |k: StreamKind| if k == StreamKind::MoveTo { PacketType::MoveToAck } else { PacketType::MoveFromAck };
        let (retransmit, deadline) = (now + self.cfg.retransmit, now + self.cfg.timeout);
        let Some(s) = self.streams_out.get_mut(&key) else { return self.stray() };
        let n = s.acked.len();
        let cum = h.local_addr as usize;
        if expected(s.kind) != h.ptype || s.local != h.dst || cum > s.next_new || h.total_len as usize != s.total {
            return self.malformed();
        }
        let acked_before = s.acked_count;
        let mark = |i: usize, s: &mut StreamOut| {
            if i < s.next_new && !s.acked[i] {
                s.acked[i] = true;
                s.acked_count += 1;
                s.acked_order = s.acked_order.max(s.sent_order[i]);
            }
        };
        for i in s.cum..cum {
            mark(i, s);
        }
        for b in 0..ACK_MAP_BITS {
            if h.message[b / 8] & (1 << (b % 8)) != 0 && cum + b < n {
                mark(cum + b, s);
            }
        }
        while s.cum < n && s.acked[s.cum] {
            s.cum += 1;
        }
        s.next_retransmit = retransmit;
        // Only an ack of something new is progress: a repeated one must not
        // keep a stalled stream (and the MoveTo waiting on it) alive forever.
        if s.acked_count > acked_before {
            s.deadline = deadline.min(s.cap);
        }
        if s.acked_count == n {
            let s = self.streams_out.remove(&key).expect("present");
            if s.kind == StreamKind::MoveTo {
                self.wake(s.local, Completion::Move(Ok(Vec::new())));
            }
            return;
        }
        // Resend every chunk overtaken by a later-sent acknowledged chunk: lost, not late.
        let reported = s.next_new.min(cum + ACK_MAP_BITS);
        let lost: Vec<usize> = (s.cum..reported)
            .filter(|&i| !s.acked[i] && s.sent_order[i] + REORDER_TOLERANCE <= s.acked_order)
            .collect();
        let last = lost.len().saturating_sub(1);
        for (k, i) in lost.into_iter().enumerate() {
            self.stats.retransmissions += 1;
            self.send_chunk(key.0, key.1, i, k == last);
        }
        self.pump(key.0, key.1);
    }

    /// Fails the stream `(peer, seq)` owned by local `owner` after an nAck; true if there was one.
    pub(crate) fn fail_stream(&mut self, peer: Pid, seq: u32, owner: Pid, err: Error) -> bool {
        if self.streams_out.get(&(peer, seq)).is_some_and(|s| s.local == owner) {
            let s = self.streams_out.remove(&(peer, seq)).expect("present");
            if s.kind == StreamKind::MoveTo {
                self.wake(owner, Completion::Move(Err(err)));
            }
            return true;
        }
        if self
            .streams_in
            .get(&(peer, seq))
            .is_some_and(|s| s.local == owner && s.kind == StreamKind::MoveFrom && !s.done)
        {
            self.remove_stream_in((peer, seq));
            self.wake(owner, Completion::Move(Err(err)));
            return true;
        }
        false
    }

    /// Drops every stream of a destroyed process (no completion: it is gone).
    pub(crate) fn cancel_streams_of(&mut self, pid: Pid) {
        self.streams_out.retain(|_, s| s.local != pid);
        self.streams_in.retain(|_, s| s.local != pid);
        let streams_in = &self.streams_in;
        self.placing.retain(|k| streams_in.contains_key(k));
    }

    /// Forgets an incoming stream, and that it may be placing.
    fn remove_stream_in(&mut self, key: (Pid, u32)) -> Option<StreamIn> {
        self.placing.retain(|k| *k != key);
        self.streams_in.remove(&key)
    }

    pub(crate) fn stream_out_timer(&mut self, now: Time, key: (Pid, u32), at: Time) {
        let Some(s) = self.streams_out.get_mut(&key) else { return };
        if s.timer_at != Some(at) {
            return;
        }
        if now >= s.deadline {
            let s = self.streams_out.remove(&key).expect("present");
            self.stats.timeouts += 1;
            self.stats.slow_streams += u64::from(now >= s.cap);
            if s.kind == StreamKind::MoveTo {
                self.wake(s.local, Completion::Move(Err(Error::Timeout(key.0))));
            }
            return;
        }
        if now >= s.next_retransmit {
            s.next_retransmit = now + self.cfg.retransmit;
            if let Some(first) = (s.cum..s.next_new).find(|&i| !s.acked[i]) {
                self.stats.retransmissions += 1;
                self.send_chunk(key.0, key.1, first, true);
            }
        }
        // Sending may end the stream (a MoveFrom whose exchange has ended).
        let Some(s) = self.streams_out.get_mut(&key) else { return };
        let next = s.next_retransmit.min(s.deadline);
        s.timer_at = Some(next);
        self.arm(next, TimerKey::StreamOut(key.0, key.1));
    }

    pub(crate) fn stream_in_timer(&mut self, now: Time, key: (Pid, u32), at: Time) {
        let Some(s) = self.streams_in.get_mut(&key) else { return };
        if s.timer_at != Some(at) {
            return;
        }
        let mut expiry = s.last_heard + self.cfg.timeout;
        if !s.done {
            expiry = expiry.min(s.cap);
        }
        if now >= expiry {
            let s = self.remove_stream_in(key).expect("present");
            self.stats.slow_streams += u64::from(!s.done && now >= s.cap);
            if s.kind == StreamKind::MoveFrom && !s.done {
                self.stats.timeouts += 1;
                self.wake(s.local, Completion::Move(Err(Error::Timeout(key.0))));
            }
            return;
        }
        let mut next = expiry;
        if s.kind == StreamKind::MoveFrom && s.got_count == 0 {
            if now >= s.next_retransmit {
                s.next_retransmit = now + self.cfg.retransmit;
                self.stats.retransmissions += 1;
                self.transmit_move_from_request(key.0, key.1);
            }
            let s = self.streams_in.get(&key).expect("present");
            next = next.min(s.next_retransmit);
        }
        let s = self.streams_in.get_mut(&key).expect("present");
        s.timer_at = Some(next);
        self.arm(next, TimerKey::StreamIn(key.0, key.1));
    }
}
