//! The records the engine keeps: processes, exchanges, aliens, lookups, timers.

use crate::{Access, Message, Pid, Segment, SendOptions, Time};
use std::collections::VecDeque;
use std::net::SocketAddr;

/// What a local process is blocked in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Blocked {
    /// Free to make a call.
    No,
    /// In Send, until its exchange completes.
    Send,
    /// In Receive (`only = None`) or ReceiveSpecific.
    Receive { only: Option<Pid>, capacity: usize },
    /// In MoveTo or MoveFrom.
    Move,
    /// In GetPid.
    GetPid,
    /// In GetReply.
    GetReply,
}

/// A message waiting in a receiver's queue: where its state lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Incoming {
    /// A local sender's exchange (`Engine::exchanges[sender]`).
    Local(Pid),
    /// A remote sender's alien (`Engine::aliens[sender]`).
    Remote(Pid),
    /// A group message: the receiver's copy (`Groups::copies[(sender, receiver)]`).
    Group(Pid),
}

impl Incoming {
    pub(crate) fn sender(self) -> Pid {
        match self {
            Incoming::Local(p) | Incoming::Remote(p) | Incoming::Group(p) => p,
        }
    }
}

/// A local process.
#[derive(Debug)]
pub(crate) struct Proc {
    pub blocked: Blocked,
    /// Messages sent to it and not yet received, FCFS.
    pub queue: VecDeque<Incoming>,
    /// The caller's limit on its current blocking primitive ([`crate::Engine::limit`]).
    pub limit_at: Option<Time>,
}

/// Where a local process's outstanding Send stands.
#[derive(Debug)]
pub(crate) enum ExchangeState {
    /// The destination is local: queued, then received by `received_by`.
    Local { received_by: Option<Pid> },
    /// The destination is remote: sent with sequence number `seq`, retransmitted until answered.
    /// `receiver` is the incarnation of the receiver's node the exchange is with (0: not known):
    /// the one last heard from that host when it was sent, then the one that answered
    /// ReplyPending. Retransmissions carry it, so that a restarted receiver refuses them.
    /// `sent_to`: the first address a Send of it went to (not broadcast or
    /// multicast). A later packet can move the receiver's host in the
    /// location cache, forged or not, but not this: a MoveFromRequest for
    /// the exchange is taken only from there (without a key).
    Remote { seq: u32, next_retransmit: Time, deadline: Time, receiver: u16, sent_to: Option<SocketAddr> },
}

/// Where a kept answer (a cached Reply or Forward, a member's kept reply)
/// goes when a duplicate of its request comes from `from`: without a key,
/// to where the request first came from (`recorded`), since anyone can
/// forge a duplicate's source and aim the answer at someone else; with a
/// key, sources are key holders, so to `from` (a peer whose address
/// changed still gets it).
pub(crate) fn resend_addr(keyed: bool, recorded: SocketAddr, from: SocketAddr) -> SocketAddr {
    if keyed {
        from
    } else {
        recorded
    }
}

/// A Send in progress by a local process (keyed by the sender's pid).
#[derive(Debug)]
pub(crate) struct Exchange {
    pub to: Pid,
    pub forwarder: Pid,
    pub msg: Message,
    pub opts: SendOptions,
    pub segment: Option<Segment>,
    /// The sender's thread lends a read-only segment of this size for the
    /// whole exchange ([`crate::Engine::send_lending`]): MoveFrom chunks are
    /// sent from it, and `segment` holds only the bytes a Send packet
    /// appends — all of them once fetched for a receiver on this node.
    pub lent_read: Option<usize>,
    /// The sender's thread lends a write-only buffer of this size for the
    /// whole exchange ([`crate::Engine::send_lending_write`]): the segment
    /// holds no bytes, and what receivers write goes to that buffer as
    /// placements.
    pub lent_write: Option<usize>,
    pub state: ExchangeState,
    /// Expected heap entry (see `Timers`).
    pub timer_at: Option<Time>,
}

impl Exchange {
    pub fn access(&self) -> Access {
        self.segment.as_ref().map(|s| s.access).unwrap_or_default()
    }

    pub fn segment_size(&self) -> usize {
        self.lent_write.or(self.lent_read).unwrap_or_else(|| self.segment.as_ref().map_or(0, |s| s.data.len()))
    }

    /// Whether the engine lacks bytes of a lent read segment (it holds
    /// the appended part only, see `lent_read`).
    pub fn lacks_lent_bytes(&self) -> bool {
        self.lent_read.is_some_and(|size| self.segment.as_ref().map_or(0, |s| s.data.len()) < size)
    }
}

/// Where a remote sender's exchange stands on the receiving node.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum AlienState {
    /// In `dst`'s queue.
    Queued,
    /// Taken by `by`, which owes the reply.
    Received { by: Pid },
    /// Replied (non-idempotent) by `by`, with the alien's `msg` now the
    /// reply and `data` its segment data for `offset`: the Reply is encoded
    /// again for a duplicate (rare) rather than kept encoded, which cost
    /// every reply a copy of its packet.
    Replied { by: Pid, offset: u32, data: Vec<u8> },
    /// Replied (idempotent): nothing kept; a duplicate of this sequence number
    /// is executed again, an older one dropped.
    Done,
    /// Forwarded by `by` to `to` on another node, with the alien's `msg` now
    /// the forwarded message: the Forward is encoded again for duplicates.
    Forwarded { by: Pid, to: Pid },
    /// Finished without a reply (refused with an nAck, cancelled by the sender,
    /// or its receiver destroyed): remembered only so that retransmissions of
    /// this sequence number are not taken for a new request. Duplicates get
    /// the nAck again if `nack`, else nothing.
    Gone { nack: bool },
}

/// A remote sender's exchange, keyed by the sender's pid (one exchange per
/// sender at a time; a newer sequence number supersedes an older one).
#[derive(Debug)]
pub(crate) struct Alien {
    pub incarnation: u16,
    pub seq: u32,
    pub dst: Pid,
    pub forwarder: Pid,
    pub msg: Message,
    pub opts: SendOptions,
    pub access: Access,
    pub segment_size: u32,
    /// Appended segment data held for a receiver that was not yet waiting.
    pub appended: Vec<u8>,
    pub addr: SocketAddr,
    pub state: AlienState,
    pub last_heard: Time,
    pub timer_at: Option<Time>,
}

/// A remote GetPid in progress.
#[derive(Debug)]
pub(crate) struct Lookup {
    pub seq: u32,
    pub name: Vec<u8>,
    pub next_retransmit: Time,
    pub deadline: Time,
    pub timer_at: Option<Time>,
}

/// What a timer heap entry refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum TimerKey {
    Exchange(Pid),
    Alien(Pid),
    Lookup(Pid),
    StreamOut(Pid, u32),
    StreamIn(Pid, u32),
    HostAlloc,
    /// Expiry of a member's copy of a group message: (sender, member).
    GroupCopy(Pid, Pid),
    /// The limit of a GetReply.
    GetReply(Pid),
    /// The periodic I-Am-Here announcement and check.
    Alive,
    /// Our I-Am-Here to a newcomer, after a random delay.
    AliveReply(crate::HostId),
    /// Retransmission and deadline of a remote-memory import, by seq.
    MemImport(u32),
    /// The earliest deadline of the pending reads and CAS-IIs (see `Rmem::deadlines`).
    MemDeadlines,
    /// The caller's limit on a process's blocking primitive.
    Limit(Pid),
}

/// True if sequence number `a` is newer than `b` (serial arithmetic,
/// docs/PROTOCOL.md §4.1).
pub fn seq_newer(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}
