//! The fixed 72-byte header, the packet types and their encoding.
//!
//! All multi-byte fields are big-endian (network order). The layout is
//! documented byte by byte in `docs/PROTOCOL.md`; the offsets below are the
//! single source of truth for the code.

use crate::auth::{AuthKey, MAC_LEN};
use crate::Pid;
use thiserror::Error;

/// First two bytes of every packet: ASCII "Vi".
pub const MAGIC: u16 = 0x5669;
/// The protocol version this crate speaks.
pub const VERSION: u8 = 1;
/// Size of the fixed header, including the 32-byte message.
pub const HEADER_LEN: usize = 72;
/// Size of a V message.
pub const MESSAGE_LEN: usize = 32;
/// The largest UDP payload we ever build or accept.
pub const MAX_DATAGRAM: usize = 65_507;
/// The largest data part a packet can carry (with room for a MAC).
pub const MAX_DATA: usize = MAX_DATAGRAM - HEADER_LEN - MAC_LEN;

/// A 32-byte V message.
pub type Message = [u8; MESSAGE_LEN];

/// The packet types: the 13 of 000 §5.5 plus the selective-retransmission
/// acknowledgement for MoveFrom, an exchange cancellation, the I-Am-Here
/// heartbeat and group acknowledgement of the reliable multicast (004), and
/// the remote-memory operations of 003 (their fields: [`crate::rmem`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PacketType {
    /// Announces a candidate logical host id (`logicalHostRequest`).
    HostRequest = 1,
    /// "That logical host id is mine" (`logicalHostComplaint`).
    HostComplaint = 2,
    /// A message from a sender to a receiver (`remoteSend`).
    Send = 3,
    /// The reply, which also acknowledges the send (`remoteReply`).
    Reply = 4,
    /// Asks the original sender's node to re-send to another pid (`remoteForward`).
    Forward = 5,
    /// The destination process does not exist (`nAck`).
    NAck = 6,
    /// The send arrived and is being worked on; restarts the sender's timers (`replyPending`).
    ReplyPending = 7,
    /// Broadcast name lookup (`remoteGetPid`).
    GetPid = 8,
    /// Answer to a name lookup (`remoteGetPidReply`).
    GetPidReply = 9,
    /// A data packet of a MoveTo stream (`remoteMoveToRequest`).
    MoveToData = 10,
    /// Acknowledgement of MoveTo data, cumulative plus bitmap (`remoteMoveToReply`).
    MoveToAck = 11,
    /// Asks for a range of a read-granted segment (`remoteMoveFromRequest`).
    MoveFromRequest = 12,
    /// A data packet of a MoveFrom stream (`remoteMoveFromReply`).
    MoveFromData = 13,
    /// Acknowledgement of MoveFrom data, cumulative plus bitmap.
    MoveFromAck = 14,
    /// The sender abandoned the exchange (process destroyed): free its state.
    Cancel = 15,
    /// "This host is alive": the periodic heartbeat of the alive-host table (004 §4.2).
    IAmHere = 16,
    /// A host's acknowledgement of a reliable group Send, with its member count (004 §4.3).
    GroupAck = 17,
    /// Remote memory: data for (descriptor, offset) of a segment (003 `WRITE`),
    /// also the answer to a MemRead or MemCas (flag `ANSWER`).
    MemWrite = 18,
    /// Remote memory: asks for a range of a segment, to be written into the
    /// requester's destination segment by MemWrite answers (003 `READ`).
    MemRead = 19,
    /// Remote memory: CAS-II on a {value, nonce} cell (003 §4.2.3).
    MemCas = 20,
    /// Remote memory: a strided write of equal elements (003 `WRITEV`, 2-D).
    MemWritev = 21,
    /// Remote memory: a MemRead, MemCas or MemImport was refused (reason code).
    MemNack = 22,
    /// Remote memory: broadcast lookup of an exported segment's 128-bit name.
    MemImport = 23,
    /// Remote memory: the owner's answer to a MemImport.
    MemImportReply = 24,
}

impl PacketType {
    /// Every packet type, in wire-code order.
    pub const ALL: [PacketType; 24] = [
        PacketType::HostRequest,
        PacketType::HostComplaint,
        PacketType::Send,
        PacketType::Reply,
        PacketType::Forward,
        PacketType::NAck,
        PacketType::ReplyPending,
        PacketType::GetPid,
        PacketType::GetPidReply,
        PacketType::MoveToData,
        PacketType::MoveToAck,
        PacketType::MoveFromRequest,
        PacketType::MoveFromData,
        PacketType::MoveFromAck,
        PacketType::Cancel,
        PacketType::IAmHere,
        PacketType::GroupAck,
        PacketType::MemWrite,
        PacketType::MemRead,
        PacketType::MemCas,
        PacketType::MemWritev,
        PacketType::MemNack,
        PacketType::MemImport,
        PacketType::MemImportReply,
    ];

    /// Decodes a wire code.
    pub fn from_u8(v: u8) -> Option<PacketType> {
        PacketType::ALL.get((v as usize).wrapping_sub(1)).copied()
    }

    /// Index 0..24 for per-type counters.
    pub fn index(self) -> usize {
        self as usize - 1
    }

    /// Human-readable name, as used in statistics.
    pub fn name(self) -> &'static str {
        match self {
            PacketType::HostRequest => "host-request",
            PacketType::HostComplaint => "host-complaint",
            PacketType::Send => "send",
            PacketType::Reply => "reply",
            PacketType::Forward => "forward",
            PacketType::NAck => "nack",
            PacketType::ReplyPending => "reply-pending",
            PacketType::GetPid => "get-pid",
            PacketType::GetPidReply => "get-pid-reply",
            PacketType::MoveToData => "move-to-data",
            PacketType::MoveToAck => "move-to-ack",
            PacketType::MoveFromRequest => "move-from-request",
            PacketType::MoveFromData => "move-from-data",
            PacketType::MoveFromAck => "move-from-ack",
            PacketType::Cancel => "cancel",
            PacketType::IAmHere => "i-am-here",
            PacketType::GroupAck => "group-ack",
            PacketType::MemWrite => "mem-write",
            PacketType::MemRead => "mem-read",
            PacketType::MemCas => "mem-cas",
            PacketType::MemWritev => "mem-writev",
            PacketType::MemNack => "mem-nack",
            PacketType::MemImport => "mem-import",
            PacketType::MemImportReply => "mem-import-reply",
        }
    }
}

/// Header flag bits (byte offset 4, u16).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct Flags(pub u16);

impl Flags {
    /// The request may be executed more than once: no reply is cached.
    pub const IDEMPOTENT: u16 = 1 << 0;
    /// The sender granted read access to its segment.
    pub const SEG_READ: u16 = 1 << 1;
    /// The sender granted write access to its segment.
    pub const SEG_WRITE: u16 = 1 << 2;
    /// Bulk data: the receiver must acknowledge now.
    pub const ACK_REQUEST: u16 = 1 << 3;
    /// I-Am-Here: the sender is new (or forgot its table) and asks every
    /// receiver to announce itself back after a short random delay.
    pub const HELLO: u16 = 1 << 4;
    /// Send to a group: a reliable Send of 004 (mode and K in `local_addr`).
    pub const RELIABLE: u16 = 1 << 5;
    /// Reply to a reliable group Send: it also acknowledges it for the
    /// replier's host, whose member count is in `local_addr`.
    pub const GROUP_ACK: u16 = 1 << 6;
    /// GroupAck (or a Reply with `GROUP_ACK`): the host lacked resources
    /// for some members (a NACK).
    pub const NACK: u16 = 1 << 7;
    /// Remote memory request: notify the owner if the segment's policy is
    /// Conditional (003 §3.4.5).
    pub const NOTIFY: u16 = 1 << 8;
    /// MemWrite: the answer to the requester's MemRead or MemCas of the same seq.
    pub const ANSWER: u16 = 1 << 9;
    /// Send on the broadcast channel (the sender knew no address for the
    /// receiver's host), not idempotent: the receiving node answers at once
    /// with ReplyPending, so that the sender learns which life of the node
    /// took it before any retransmission has to name one.
    pub const EARLY_PENDING: u16 = 1 << 10;
    /// I-Am-Here: the sender is shutting down; drop it from the alive-host
    /// table now rather than after it has been silent for a while.
    pub const LEAVING: u16 = 1 << 11;
    /// A MAC trailer follows the data.
    pub const MAC: u16 = 1 << 15;
    /// Bits a version-1 node understands; others are ignored.
    pub const KNOWN: u16 = Self::IDEMPOTENT
        | Self::SEG_READ
        | Self::SEG_WRITE
        | Self::ACK_REQUEST
        | Self::HELLO
        | Self::RELIABLE
        | Self::GROUP_ACK
        | Self::NACK
        | Self::NOTIFY
        | Self::ANSWER
        | Self::EARLY_PENDING
        | Self::LEAVING
        | Self::MAC;

    /// True when every bit of `bits` is set.
    pub fn has(self, bits: u16) -> bool {
        self.0 & bits == bits
    }

    /// Returns the flags with `bits` set or cleared.
    pub fn with(self, bits: u16, on: bool) -> Flags {
        if on {
            Flags(self.0 | bits)
        } else {
            Flags(self.0 & !bits)
        }
    }
}

/// Every header field except magic, version and data length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// What kind of packet this is.
    pub ptype: PacketType,
    /// Flag bits; `Flags::MAC` is managed by the encoder.
    pub flags: Flags,
    /// The sending node's boot incarnation (random, nonzero): tells a restarted
    /// node's reused pids and sequence numbers from its previous life.
    pub incarnation: u16,
    /// Exchange or transfer sequence number, unique per sending node.
    pub seq: u32,
    /// The process on whose behalf the packet is sent.
    pub src: Pid,
    /// The process the packet is for (0 for broadcasts).
    pub dst: Pid,
    /// The forwarder (equal to `src` unless forwarded); reused by some types.
    pub fwd: Pid,
    /// Length of the whole segment or transfer.
    pub total_len: u32,
    /// First field of the address pair: meaning depends on the type.
    pub local_addr: u32,
    /// Second field of the address pair: meaning depends on the type.
    pub remote_addr: u32,
    /// The 32-byte message.
    pub message: Message,
}

impl Header {
    /// A header of the given type with every other field zero.
    pub fn new(ptype: PacketType) -> Header {
        Header {
            ptype,
            flags: Flags::default(),
            incarnation: 0,
            seq: 0,
            src: Pid::NONE,
            dst: Pid::NONE,
            fwd: Pid::NONE,
            total_len: 0,
            local_addr: 0,
            remote_addr: 0,
            message: [0; MESSAGE_LEN],
        }
    }
}

/// A parsed packet borrowing its data from the receive buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    /// The fixed header.
    pub header: Header,
    /// The data part (`length` bytes).
    pub data: &'a [u8],
}

/// Why a datagram is not a valid packet. Every variant is counted by the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Error)]
pub enum ParseError {
    /// Shorter than the fixed header.
    #[error("datagram of {0} bytes is shorter than the {HEADER_LEN}-byte header")]
    TooShort(usize),
    /// Not a vipc packet at all.
    #[error("bad magic {0:#06x}")]
    BadMagic(u16),
    /// A vipc packet of another protocol version.
    #[error("protocol version {0} (this node speaks {VERSION})")]
    BadVersion(u8),
    /// Unknown packet type code.
    #[error("unknown packet type {0}")]
    UnknownType(u8),
    /// The length field disagrees with the datagram size.
    #[error("length field {field} does not match {actual} data bytes")]
    LengthMismatch {
        /// What the header claims.
        field: u32,
        /// What the datagram holds.
        actual: usize,
    },
    /// The cluster has a key but the packet carries no MAC.
    #[error("packet carries no MAC but this cluster requires one")]
    MissingMac,
    /// The packet carries a MAC but this node has no key.
    #[error("packet carries a MAC but this node has no key")]
    UnexpectedMac,
    /// The MAC does not verify: wrong key or a forged/corrupted packet.
    #[error("MAC verification failed")]
    BadMac,
}

pub(crate) fn be16_at(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

pub(crate) fn be32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Parses and authenticates one datagram. Never panics, never allocates.
pub fn parse<'a>(buf: &'a [u8], key: Option<&AuthKey>) -> Result<Packet<'a>, ParseError> {
    if buf.len() < HEADER_LEN {
        return Err(ParseError::TooShort(buf.len()));
    }
    let magic = be16_at(buf, 0);
    if magic != MAGIC {
        return Err(ParseError::BadMagic(magic));
    }
    if buf[2] != VERSION {
        return Err(ParseError::BadVersion(buf[2]));
    }
    let ptype = PacketType::from_u8(buf[3]).ok_or(ParseError::UnknownType(buf[3]))?;
    let flags = Flags(be16_at(buf, 4));
    let mac_len = if flags.has(Flags::MAC) { MAC_LEN } else { 0 };
    let length = be32_at(buf, 24);
    let actual = buf.len().saturating_sub(HEADER_LEN + mac_len);
    if buf.len() < HEADER_LEN + mac_len || length as usize != actual {
        return Err(ParseError::LengthMismatch { field: length, actual });
    }
    match (key, mac_len) {
        (Some(_), 0) => return Err(ParseError::MissingMac),
        (None, MAC_LEN) => return Err(ParseError::UnexpectedMac),
        (Some(k), _) => {
            let (body, mac) = buf.split_at(buf.len() - MAC_LEN);
            if !k.verify(body, mac) {
                return Err(ParseError::BadMac);
            }
        }
        (None, _) => {}
    }
    let mut message = [0u8; MESSAGE_LEN];
    message.copy_from_slice(&buf[40..72]);
    let header = Header {
        ptype,
        flags,
        incarnation: be16_at(buf, 6),
        seq: be32_at(buf, 8),
        src: Pid(be32_at(buf, 12)),
        dst: Pid(be32_at(buf, 16)),
        fwd: Pid(be32_at(buf, 20)),
        total_len: be32_at(buf, 28),
        local_addr: be32_at(buf, 32),
        remote_addr: be32_at(buf, 36),
        message,
    };
    Ok(Packet { header, data: &buf[HEADER_LEN..HEADER_LEN + length as usize] })
}

/// The encoded size of a packet with `data_len` data bytes.
pub fn encoded_len(data_len: usize, keyed: bool) -> usize {
    HEADER_LEN + data_len + if keyed { MAC_LEN } else { 0 }
}

/// Appends the encoded packet to `out` (which is usually empty).
///
/// # Panics
/// If `data` is longer than [`MAX_DATA`]: the engine never builds such a packet.
pub fn encode(header: &Header, data: &[u8], key: Option<&AuthKey>, out: &mut Vec<u8>) {
    assert!(data.len() <= MAX_DATA, "packet data of {} bytes exceeds MAX_DATA", data.len());
    let start = out.len();
    let flags = header.flags.with(Flags::MAC, key.is_some());
    // The fixed header is built on the stack and appended at once: one
    // capacity check instead of one per field.
    let mut fixed = [0u8; HEADER_LEN];
    fixed[0..2].copy_from_slice(&MAGIC.to_be_bytes());
    fixed[2] = VERSION;
    fixed[3] = header.ptype as u8;
    fixed[4..6].copy_from_slice(&flags.0.to_be_bytes());
    fixed[6..8].copy_from_slice(&header.incarnation.to_be_bytes());
    let words = [
        header.seq,
        header.src.0,
        header.dst.0,
        header.fwd.0,
        data.len() as u32,
        header.total_len,
        header.local_addr,
        header.remote_addr,
    ];
    for (i, v) in words.iter().enumerate() {
        fixed[8 + 4 * i..12 + 4 * i].copy_from_slice(&v.to_be_bytes());
    }
    fixed[40..].copy_from_slice(&header.message);
    out.reserve(encoded_len(data.len(), key.is_some()));
    out.extend_from_slice(&fixed);
    out.extend_from_slice(data);
    if let Some(k) = key {
        let mac = k.mac(&out[start..]);
        out.extend_from_slice(&mac);
    }
}

/// Encodes into a fresh vector.
pub fn to_vec(header: &Header, data: &[u8], key: Option<&AuthKey>) -> Vec<u8> {
    let mut v = Vec::with_capacity(encoded_len(data.len(), key.is_some()));
    encode(header, data, key, &mut v);
    v
}
