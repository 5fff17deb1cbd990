//! Typed errors of every primitive.

use vipc_wire::Pid;

/// Why a primitive failed. Every misuse of the API is one of these, never a panic.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The destination does not exist (local check, or an nAck from its host).
    #[error("no such process {0}")]
    NoSuchProcess(Pid),
    /// No reply or replyPending within T_t: the host is down or unreachable.
    #[error("no answer from {0} within the timeout")]
    Timeout(Pid),
    /// The receiver's node restarted while the Send was outstanding: the
    /// message may or may not have been received, and its request carried
    /// out, by the node's previous life. Not retried, so that a request is
    /// never carried out twice.
    #[error("the node of {0} restarted during the exchange: the request may or may not have been carried out")]
    ReceiverRestarted(Pid),
    /// The caller's own limit on a blocking primitive passed first
    /// ([`crate::Engine::limit`]); the primitive was abandoned. A Send's
    /// receiver may still have taken, or even answered, the message.
    #[error("the caller's time limit passed")]
    Deadline,
    /// Reply, Forward, MoveTo or MoveFrom to a process not awaiting a reply from the caller.
    #[error("{0} is not awaiting a reply from the caller")]
    NotAwaitingReply(Pid),
    /// The sender did not grant the access the operation needs.
    #[error("segment access denied: {0} access not granted")]
    NoAccess(&'static str),
    /// The range lies outside the granted segment.
    #[error("range {offset}+{len} lies outside the {size}-byte segment")]
    OutOfSegment {
        /// Start of the requested range.
        offset: u64,
        /// Length of the requested range.
        len: u64,
        /// Size of the granted segment.
        size: u64,
    },
    /// The calling pid is not a live process of this node.
    #[error("{0} is not a live process on this node")]
    NotLocalProcess(Pid),
    /// The calling process is already blocked in another primitive.
    #[error("{0} is already blocked in a primitive")]
    Busy(Pid),
    /// A process cannot send to itself (it would wait forever).
    #[error("a process cannot send to itself")]
    SendToSelf,
    /// A process cannot wait for a message from itself alone (it would wait forever).
    #[error("a process cannot wait for a message from itself")]
    ReceiveFromSelf,
    /// The operation was abandoned because the process or its peer was destroyed.
    #[error("process {0} was destroyed")]
    Destroyed(Pid),
    /// Group ids are not valid destinations for this primitive.
    #[error("{0} is a group id, not a process")]
    GroupId(Pid),
    /// The null pid.
    #[error("the null pid names no process")]
    NullPid,
    /// A segment or reply segment larger than the protocol allows.
    #[error("{what} of {len} bytes exceeds the limit of {limit}")]
    TooLarge {
        /// What was too large.
        what: &'static str,
        /// Its size.
        len: u64,
        /// The limit.
        limit: u64,
    },
    /// A resource limit of this node was reached.
    #[error("node limit reached: {0}")]
    Limit(&'static str),
    /// Names are 1 to 32 bytes.
    #[error("a name is 1 to 32 bytes")]
    BadName,
    /// The name is registered to another live process ([`crate::Engine::claim_name`]).
    #[error("the name is already registered to {0}")]
    NameTaken(Pid),
    /// The node has no logical host id yet (allocation still running).
    #[error("node not ready: logical host allocation in progress")]
    NotReady,
    /// The call needs a group id.
    #[error("{0} is not a group id")]
    NotAGroup(Pid),
    /// The process is not a member of the group.
    #[error("{pid} is not a member of group {group}")]
    NotMember {
        /// The process.
        pid: Pid,
        /// The group.
        group: Pid,
    },
    /// K of a K_REPLY or K_DELIVER Send must be 1 to 2^24 − 1.
    #[error("K must be 1 to 16777215, not {0}")]
    BadK(u32),
    /// A reliable group Send on a node without the alive-host service: it
    /// would know no host but its own, and "all members" would mean the local ones.
    #[error("reliable group sends need the alive-host service (alive_period is off)")]
    NoAliveService,
    /// GetReply without a group Send to collect replies of.
    #[error("the caller's last Send was not to a group")]
    NoGroupSend,
    /// The alive-host table changed since the caller read it.
    #[error("the alive-host table changed (sequence {current}, read under {given})")]
    StaleTable {
        /// The sequence number the caller read the table under.
        given: u32,
        /// The table's sequence number now.
        current: u32,
    },
    /// No host in that row of the alive-host table.
    #[error("no host in row {0} of the alive-host table")]
    NoSuchRow(usize),
    /// Remote memory: the segment's owner refused the request (a MemNack), or
    /// this node did for a request to its own segment.
    #[error("remote memory request refused: {0}")]
    Refused(crate::Refusal),
    /// Remote memory: no local segment with that descriptor (unexported, or never was).
    #[error("no such local segment")]
    NoSuchSegment,
    /// The segment's bytes are receiving an answer outside the engine
    /// ([`crate::Engine::mem_lend`]); the runtime waits for them instead.
    #[error("the segment is receiving an answer")]
    SegmentBusy,
    /// The call is not possible in this situation (e.g. a lent move to a
    /// process on this node); the ordinary variant of the call is.
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
}
