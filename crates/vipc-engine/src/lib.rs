//! The vipc protocol engine: the V interkernel protocol (000 ch. 5) as a
//! deterministic, sans-IO state machine.
//!
//! The engine owns all protocol state — local processes and their exchanges,
//! aliens (remote senders' exchanges), the reply cache, the host-location
//! cache, logical-host allocation, the name registry, bulk transfers and
//! remote-memory segments with their bytes — and
//! nothing else: no sockets, threads or clocks. A runtime feeds it
//! - API calls ([`Engine::send`], [`Engine::receive`], …),
//! - datagrams ([`Engine::handle_datagram`]) and
//! - the passage of time ([`Engine::handle_timeout`] once [`Engine::poll_timeout`] is due),
//!
//! and after each call drains
//! - [`Engine::poll_transmit`]: datagrams to send (or
//!   [`Engine::poll_transmit_split`], which leaves a large read answer's
//!   data in the segment, for the runtime to send from there),
//! - [`Engine::poll_event`]: processes to wake with their results, and notices.
//!
//! ```
//! use vipc_engine::{Config, Engine, HostIdConfig, Time, Event, Completion, SendOptions};
//! let mut e = Engine::new(Config { host_id: HostIdConfig::Fixed(1), ..Config::default() }, Time::ZERO);
//! assert_eq!(e.poll_event(), Some(Event::HostReady(1)));
//! let server = e.create_process().unwrap();
//! let client = e.create_process().unwrap();
//! e.receive(Time::ZERO, server, None, 0).unwrap();
//! e.send(Time::ZERO, client, server, [7; 32], SendOptions::default(), None).unwrap();
//! // The server wakes with the message...
//! let Some(Event::Wake { pid, completion: Completion::Receive(Ok(m)) }) = e.poll_event() else { panic!() };
//! assert_eq!((pid, m.from, m.msg), (server, client, [7; 32]));
//! // ...and its reply wakes the client.
//! e.reply(Time::ZERO, server, client, [8; 32], None).unwrap();
//! let Some(Event::Wake { pid, completion: Completion::Send(Ok(r)) }) = e.poll_event() else { panic!() };
//! assert_eq!((pid, r.reply), (client, [8; 32]));
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod config;
mod engine;
mod error;
mod io;
mod placed;
mod stats;
mod time;

pub use config::{Config, HostIdConfig};
pub use engine::{
    check_name, group_multicast_addr, seq_newer, well_known_group, AliveHost, AliveHosts, Cas, CasAnswer,
    ControlRecord, DataRecord, Descriptor, Engine, GroupOutcome, Imported, MemLoan, MemOp, MemOpId, MemOutcome, Notify,
    ProtectionGroup, Refusal, Reliable, SegmentId, SegmentName, SegmentOptions, Strided, CAS_CELL, GROUP_ADDR_BASE,
    MAX_K, TOKENLESS_READ_MAX, WELL_KNOWN_GROUP_HOST,
};
pub use error::Error;
pub use io::{
    Access, Completion, Destination, Event, HeaderFor, Lent, Received, ReplyMode, Scope, Segment, SegmentSlice,
    SendOptions, SendOutcome, Transmit,
};
pub use placed::{placed_buffer, RECEIVE_PAGE_OFFSET};
pub use stats::Stats;
pub use time::Time;
pub use vipc_wire::{AuthKey, HostId, Message, Pid};

/// Names registered with SetPid are 1 to this many bytes.
pub const MAX_NAME: usize = 32;
