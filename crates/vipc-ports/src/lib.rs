//! Language-level primitives on vipc, after LeBlanc (seed 002): typed
//! interfaces whose remote calls look like method calls ([`interface`]),
//! and the completion statement (`vipc::within`, re-exported here).
//!
//! ```
//! use vipc::{Node, NodeConfig};
//!
//! #[vipc_ports::interface]
//! pub trait Greeter {
//!     fn greet(&self, name: String) -> String;
//! }
//!
//! struct Polite;
//! impl Greeter for Polite {
//!     fn greet(&self, name: String) -> String {
//!         format!("good morning, {name}")
//!     }
//! }
//!
//! # fn main() -> Result<(), vipc_ports::Error> {
//! let a = Node::start(NodeConfig::fixed(1, "127.0.0.1:0".parse().unwrap(), vec![]))?;
//! let b = Node::start(NodeConfig::fixed(2, "127.0.0.1:0".parse().unwrap(), vec![a.local_addr()]))?;
//! vipc_ports::rpc::spawn_server(&a, "greeter", GreeterServer(Polite))?;
//! let me = b.attach()?;
//! let greeter = GreeterClient::connect(&me, "greeter")?;
//! assert_eq!(greeter.greet("Ada".into())?, "good morning, Ada");
//! # Ok(()) }
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod activate;
pub mod codec;
mod error;
pub mod frame;
pub mod netport;
mod port;
mod region;
pub mod rpc;
mod transfer;
pub mod vars;

pub use activate::{activate, Activation, Activator};
pub use error::{Error, Result};
pub use netport::{Gathered, NetPort};
pub use port::{Checkpoint, Port, PortRef, Ports, MAX_HELD, MAX_HELD_BYTES};
pub use region::Region;
/// Used by `#[interface]`: `Vec<u8>` arguments and results travel as one
/// byte string (the same bytes on the wire as serde's default sequence of
/// `u8`, which postcard marshals a byte at a time: 0.07 of a raw move at 1 MiB).
#[doc(hidden)]
pub use serde_bytes;
pub use vars::{RemoteVars, Variable, Variables};
pub use vipc;
pub use vipc::within;
pub use vipc_ports_macros::interface;
