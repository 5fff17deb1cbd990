//! What flows in and out of the engine besides method arguments: segments,
//! completions of blocking primitives, events and datagrams to transmit.

use crate::Error;
use std::net::SocketAddr;
use vipc_wire::{HostId, Message, Pid};

/// Access a sender grants the receiver to its segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct Access {
    /// The receiver may MoveFrom the segment (and its first part is appended to the Send).
    pub read: bool,
    /// The receiver may MoveTo the segment and reply with a segment into it.
    pub write: bool,
}

impl Access {
    /// Read access only.
    pub const READ: Access = Access { read: true, write: false };
    /// Write access only.
    pub const WRITE: Access = Access { read: false, write: true };
    /// Read and write access.
    pub const READ_WRITE: Access = Access { read: true, write: true };
}

/// A segment of the sender's memory lent to the engine for the duration of a Send.
/// It comes back, possibly written to, in [`SendOutcome::segment`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The bytes; the segment's size is `data.len()`.
    pub data: Vec<u8>,
    /// What the receiver may do with them.
    pub access: Access,
}

/// Options of a Send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SendOptions {
    /// At-least-once: the receiver caches no reply, a lost reply means re-execution.
    pub idempotent: bool,
}

/// Scope of a name registration or lookup (000 §5.6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// This node only.
    Local,
    /// Other nodes only.
    Remote,
    /// Both: local first, then remote.
    Any,
}

/// A message taken by Receive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// The original sender: the process to reply to.
    pub from: Pid,
    /// The process that forwarded the message (equal to `from` if not forwarded).
    pub forwarder: Pid,
    /// The 32-byte message.
    pub msg: Message,
    /// The appended first part of a read-granted segment, at most the capacity
    /// given to `receive` (empty if none was sent or it could not be buffered).
    pub segment: Vec<u8>,
    /// The size of the whole granted segment (0 if none).
    pub segment_size: u32,
    /// The access granted to the segment.
    pub access: Access,
}

/// What a completed Send returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendOutcome {
    /// The reply message (it overwrites the sent message).
    pub reply: Message,
    /// The process that replied (differs from the destination after a Forward).
    pub replier: Pid,
    /// The lent segment, with whatever the receiver wrote into it.
    pub segment: Option<Segment>,
}

/// The result of a blocking primitive. Each accepted blocking call yields exactly one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    /// A Send finished.
    Send(Result<SendOutcome, Error>),
    /// A Receive or ReceiveSpecific took a message.
    Receive(Result<Received, Error>),
    /// A MoveTo (empty data) or MoveFrom (the bytes read) finished.
    Move(Result<Vec<u8>, Error>),
    /// A GetPid finished; `None` if no process is registered under the name.
    GetPid(Option<Pid>),
    /// A GetReply finished: the next reply to the last group Send and its
    /// replier, or `None` when the time limit passed first.
    GetReply(Option<(Pid, Message)>),
    /// A reliable group Send finished: whether its condition was met, and what it reached.
    Group(crate::GroupOutcome),
}

/// How a Send to a group waits for replies (000 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ReplyMode {
    /// A datagram: the Send returns at once, nothing is retransmitted;
    /// replies that come anyway wait for GetReply.
    None,
    /// The Send returns with the first reply; later replies are dropped.
    One,
    /// The Send returns with the first reply; later replies wait for
    /// GetReply until the sender's next Send.
    #[default]
    Many,
}

/// Something the runtime must act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Wake `pid`: its blocking call has completed.
    Wake {
        /// The process to wake.
        pid: Pid,
        /// What its call returns.
        completion: Completion,
    },
    /// Give the engine the whole read-only segment `pid` lends
    /// ([`crate::Engine::send_lending`]) with
    /// [`crate::Engine::lent_segment`]: a Forward has brought its Send to a
    /// process on this node, which reads the segment from the engine.
    FetchLent {
        /// The lending process.
        pid: Pid,
    },
    /// Copy `data` to `offset` of the buffer `pid` lent with
    /// [`crate::Engine::send_lending_write`] (written by a process on this
    /// node; data from the network come as placements). Before the
    /// [`Event::Wake`] that ends the exchange.
    Place {
        /// The lending process.
        pid: Pid,
        /// Where in its buffer.
        offset: usize,
        /// The bytes.
        data: Vec<u8>,
    },
    /// The node has its logical host id and can run remote IPC.
    HostReady(HostId),
    /// Another node at `addr` claims our logical host id (misconfiguration).
    HostConflict {
        /// The contested id.
        host: HostId,
        /// Where the other claimant is.
        addr: SocketAddr,
    },
    /// This node now has a local member of `group` (it had none): listen on
    /// the group's multicast address.
    GroupJoined(Pid),
    /// The last local member of `group` left or was destroyed: stop listening
    /// on the group's multicast address.
    GroupLeft(Pid),
    /// I-Am-Here: a host came up (first heard, or restarted).
    HostUp {
        /// The host.
        host: HostId,
        /// Where it announced itself from.
        addr: SocketAddr,
    },
    /// I-Am-Here: a host fell silent for `alive_down_after` periods (or restarted).
    HostDown(HostId),
    /// Remote memory: an operation of this node finished; collect it with
    /// [`crate::Engine::mem_poll`].
    MemDone(crate::MemOpId),
    /// Remote memory: a segment's control or data channel, empty until now,
    /// has a record.
    MemNotify(crate::SegmentId),
    /// A peer speaks another protocol version; reported once per address.
    VersionMismatch {
        /// The peer.
        addr: SocketAddr,
        /// Its version.
        version: u8,
    },
}

/// Where a datagram goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Destination {
    /// One node.
    Addr(SocketAddr),
    /// Every node on the broadcast channel (multicast group or static peer list).
    Broadcast,
    /// Every node with a member of this group: the group's own multicast
    /// address (PROTOCOL §4.10), or the broadcast channel's unicast fan-out
    /// where there is no multicast. Plain (unreliable) group Sends go here;
    /// reliable ones go to [`Destination::Broadcast`], since every alive host
    /// must acknowledge them, members or not.
    Group(Pid),
}

/// A datagram to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Where to.
    pub to: Destination,
    /// The encoded packet; when `lent` or `segment` is set, everything but its data.
    pub bytes: Vec<u8>,
    /// The packet's data are these bytes of a buffer lent by a local process
    /// ([`crate::Engine::move_to_lent`]): the datagram is `bytes` followed by them.
    pub lent: Option<Lent>,
    /// The packet's data are still in a segment of this node (a large read
    /// answer, only from [`crate::Engine::poll_transmit_split`]): the
    /// datagram is `bytes` followed by [`crate::Engine::segment_slice`],
    /// which must be sent — or joined with [`crate::Engine::join`] — before
    /// the engine is given anything else, so that it carries the bytes of
    /// the moment the read was served.
    pub segment: Option<SegmentSlice>,
}

/// Bytes of a segment of this node that a [`Transmit`] carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentSlice {
    /// The segment.
    pub id: crate::SegmentId,
    /// Offset of the first byte.
    pub offset: usize,
    /// Number of bytes.
    pub len: usize,
}

/// A packet of [`crate::Engine::mem_write_headers`]: its header, to be sent
/// to `to` with bytes `data` of the caller's buffer appended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderFor {
    /// Where to.
    pub to: SocketAddr,
    /// The encoded header, its data length already set.
    pub head: Vec<u8>,
    /// The range of the caller's buffer that follows it.
    pub data: std::ops::Range<usize>,
}

/// A range of the buffer a local process lends for the duration of its
/// blocking call ([`crate::Engine::move_to_lent`], [`crate::Engine::move_from_lent`]).
/// The engine never holds those bytes: the runtime moves them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lent {
    /// The process whose buffer it is.
    pub pid: Pid,
    /// Offset in the buffer.
    pub offset: usize,
    /// Number of bytes.
    pub len: usize,
}
