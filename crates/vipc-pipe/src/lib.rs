//! Pipes as a service (000 §3.7): a pipe server process on some node, and
//! readers and writers on any nodes, all speaking Send/Receive/Reply.
//!
//! A write is a Send carrying the data as a read segment (appended to the
//! request when it fits in a packet, else read by the server with MoveFrom);
//! a read is a Send granting a write segment that the reply fills. An empty
//! pipe and a full one are handled by *withholding the reply*, as the V pipe
//! server did, so a blocked reader or writer is simply a process waiting in
//! Send. The protocol is in docs/PROTOCOL.md, "Pipe service"; the rules for
//! end of file and broken pipes are in [`state`].
//!
//! ```
//! use std::io::{Read, Write};
//! use vipc::{Node, NodeConfig};
//! use vipc_pipe::{PipeConfig, PipeReader, PipeServer, PipeWriter};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let a = Node::start(NodeConfig::fixed(1, "127.0.0.1:0".parse()?, vec![]))?;
//! let b = Node::start(NodeConfig::fixed(2, "127.0.0.1:0".parse()?, vec![a.local_addr()]))?;
//! let _server = PipeServer::start(&a, "demo", PipeConfig::default())?;
//! let mut w = PipeWriter::open(&b, "demo")?;    // the writer on node 2
//! let mut r = PipeReader::open(&a, "demo")?;    // the reader on node 1
//! w.write_all(b"hello through a V pipe")?;
//! w.close()?;                                   // last writer gone: the reader gets EOF after the data
//! let mut got = String::new();
//! r.read_to_string(&mut got)?;
//! assert_eq!(got, "hello through a V pipe");
//! # Ok(()) }
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod client;
mod error;
pub mod proto;
mod server;
pub mod state;

pub use client::{lookup, stat, PipeReader, PipeStat, PipeWriter, WRITE_CHUNK};
pub use error::{PipeError, PipeResult};
pub use server::{PipeConfig, PipeServer, INLINE, MIN_LEASE};
