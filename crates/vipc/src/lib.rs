//! vipc: transparent message passing for a cluster — the V kernel's IPC
//! (Send / Receive / Reply, Forward, MoveTo / MoveFrom, SetPid / GetPid) in
//! user space over UDP. A process sends to a [`Pid`] without regard to which
//! node it lives on.
//!
//! Two nodes on loopback with fixed logical host ids; the second lists the
//! first as a static peer (the first learns the second's address from its
//! packets). A process on node 2 sends to a process on node 1:
//!
//! ```
//! use vipc::{Node, NodeConfig};
//! # fn main() -> Result<(), vipc::Error> {
//! let a = Node::start(NodeConfig::fixed(1, "127.0.0.1:0".parse().unwrap(), vec![]))?;
//! let b = Node::start(NodeConfig::fixed(2, "127.0.0.1:0".parse().unwrap(), vec![a.local_addr()]))?;
//!
//! // A server process on node 1: receive one message, reply with byte 0 incremented.
//! let (server, thread) = a.spawn(|p| -> Result<(), vipc::Error> {
//!     let mut msg = [0u8; 32];
//!     let client = p.receive(&mut msg)?;
//!     msg[0] += 1;
//!     p.reply(&msg, client)
//! })?;
//!
//! // This thread becomes a process on node 2 and sends; the reply overwrites the message.
//! let me = b.attach()?;
//! let mut msg = [0u8; 32];
//! msg[0] = 41;
//! let replier = me.send(&mut msg, server)?;
//! assert_eq!((msg[0], replier), (42, server));
//! thread.join().unwrap()?;
//! assert_eq!(b.stats().remote_exchanges, 1);
//! # Ok(()) }
//! ```
//!
//! # Layers
//! [`vipc_wire`] encodes packets; [`vipc_engine`] is the sans-IO protocol
//! state machine; this crate gives it sockets, threads and a clock
//! ([`Node`]), and exposes the primitives as blocking calls on a [`Process`].
//!
//! # Discovery
//! A node's broadcast channel ([`Broadcast`]) is an IPv4 multicast group
//! (default [`DEFAULT_GROUP`] on interface 127.0.0.1 with TTL 1: every node on
//! this machine) and/or a list of static peers that get every broadcast by
//! unicast. Broadcasts carry logical-host allocation, I-Am-Here, location-cache
//! misses, remote GetPid and reliable group Sends; a plain group Send goes to
//! its group's multicast address; everything else is unicast to the address
//! learned from the peer's packets.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod config;
mod error;
mod faults;
mod filemap;
mod gso;
pub mod locate;
mod loopback;
mod net;
mod node;
mod process;
mod rmem;
mod runtime;
pub mod services;
#[doc(hidden)]
pub mod testing;
mod within;

pub use config::{Broadcast, FaultConfig, Multicast, NodeConfig, DEFAULT_GROUP};
pub use error::{Error, Result};
pub use filemap::page_aligned;
pub use loopback::{free_loopback_addrs, loopback_cluster};
pub use node::Node;
pub use process::{Process, ReceiveInfo, SegmentRef};
pub use rmem::{AnonSegment, ExportedSegment, PendingOp, RemoteSegment, DIRECT_WRITE};
pub use vipc_engine::{
    well_known_group, Access, AliveHost, AliveHosts, AuthKey, CasAnswer, Config as EngineConfig, ControlRecord,
    DataRecord, Error as ProtocolError, GroupOutcome, HostId, HostIdConfig, MemOp, MemOutcome, Message, Notify, Pid,
    ProtectionGroup, Refusal, Reliable, ReplyMode, Scope, SegmentName, SegmentOptions, SendOptions, Stats, CAS_CELL,
};
pub use vipc_wire::PacketType;
pub use within::{deadline_after, within, without_limit};
