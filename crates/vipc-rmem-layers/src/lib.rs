//! Reliability layers built only on vipc's public remote-memory API, as
//! Thekkath built RAPID on his primitives (seed 003, ch. 5).
//!
//! The primitives promise little on purpose: a remote write is a
//! fire-and-forget datagram (it may be lost, duplicated or overtaken), a
//! remote read or CAS-II has a timeout but no retry, and the exporter hears
//! of nothing unless it asks. Everything a program needs beyond that is a
//! layer of its own, written against [`vipc::RemoteSegment`] and
//! [`vipc::ExportedSegment`] with no change to the engine:
//!
//! - [`block`]: a block written into the receiver's segment in
//!   acknowledgement units of N packets; the receiver answers each unit with
//!   a bitmask of the packets it holds, written into a segment the sender
//!   exported; the sender rewrites only the missing packets (003 §5.3.1).
//! - [`rapid`]: RPC on argument stacks the server exports, one per client,
//!   with a flag word the server polls, the stack write-protected while the
//!   procedure runs, and the result written into the client's segment;
//!   retransmission with sequence numbers runs each call at most once (003 §5.2–5.4).
//! - [`styles`]: the four file-service transfer styles of 003 §7.4 over a
//!   server's exported block cache: read-only and write-only (pure data
//!   transfer, no server thread) and hybrid-1/-2 (a notify-write of the
//!   parameters, the block written back).
//!
//! What each promises, packet by packet, is in `docs/RMEM.md`, "Reliability layers".

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod block;
mod check;
mod common;
pub mod rapid;
pub mod styles;

pub use common::{import_retrying, Error, FailedImports, Result};
