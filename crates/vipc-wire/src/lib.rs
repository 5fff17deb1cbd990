//! The vipc wire format: the fixed 72-byte header (the V interkernel header of
//! 000 §5.5 widened for UDP: magic, version, 32-bit sequence numbers, flags),
//! its 24 packet types (the last seven are remote memory, [`rmem`]), and the
//! optional MAC trailer.
//!
//! Parsing borrows from the receive buffer and never allocates or panics;
//! every way a datagram can be wrong is a [`ParseError`].
//!
//! ```
//! use vipc_wire::{encode, parse, Header, PacketType, Pid};
//! let mut h = Header::new(PacketType::Send);
//! h.src = Pid::new(1, 1);
//! h.dst = Pid::new(2, 1);
//! h.seq = 7;
//! let mut buf = Vec::new();
//! encode(&h, b"page", None, &mut buf);
//! let p = parse(&buf, None).unwrap();
//! assert_eq!(p.header, h);
//! assert_eq!(p.data, b"page");
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod auth;
pub mod coalesced;
mod packet;
mod pid;
pub mod rmem;

pub use auth::{AuthKey, BadKey, MAC_LEN};
pub use packet::{
    encode, encoded_len, parse, to_vec, Flags, Header, Message, Packet, PacketType, ParseError, HEADER_LEN, MAGIC,
    MAX_DATA, MAX_DATAGRAM, MESSAGE_LEN, VERSION,
};
pub use pid::{HostId, Pid, MAX_HOST_ID};
