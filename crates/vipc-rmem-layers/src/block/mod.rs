//! Reliable block transfer on remote writes (003 §5.3.1: blast with
//! selective acknowledgement).
//!
//! The receiver exports a segment of packet slots ([`BlockReceiver`]); the
//! sender ([`BlockSender`]) exports a small acknowledgement segment and
//! registers its name in the receiver's header. A block is cut into packets
//! of `packet` bytes, grouped into acknowledgement units of `unit` (N ≤ 64)
//! packets. For each unit the sender writes every packet not yet
//! acknowledged — the last one with the notify bit — and waits; the
//! receiver, woken by that notification (or its own tick), checks the
//! unit's slots and writes one bitmask of the packets it holds into the
//! sender's segment; the sender rewrites only the missing ones. After a
//! retransmission timeout without an acknowledgement the sender reads the
//! receiver's status word itself (a remote read, answered by the receiver's
//! node with no receiver thread running): that recovers a lost
//! acknowledgement, and a refused or unanswered read says the receiver is gone.
//!
//! Why each packet carries a tag: 003 relied on ATM delivering cells in
//! order, so the source could announce in advance which word of each cell
//! to watch. Datagrams here may be lost, duplicated and overtaken, so each
//! slot starts with {block, index, length, check word} written in the same
//! datagram as the data, and the receiver takes a slot only if the tag
//! names the block it expects and the check word matches the bytes (see
//! `check.rs`): a late packet of an older block, or a packet split over
//! datagrams that arrived in part, is simply "missing".
//!
//! ```
//! use std::time::Duration;
//! use vipc::{Node, NodeConfig};
//! use vipc_rmem_layers::block::{BlockParams, BlockReceiver, BlockSender};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (a1, a2) = ("127.0.0.1:0".parse()?, "127.0.0.1:0".parse()?);
//! let a = Node::start(NodeConfig::fixed(1, a1, vec![]))?;
//! let b = Node::start(NodeConfig::fixed(2, a2, vec![a.local_addr()]))?;
//! let mut rx = BlockReceiver::export(&a, BlockParams::default())?;
//! let mut tx = BlockSender::connect(&b, rx.name(), Duration::from_secs(2))?;
//! let data = vec![7u8; 100_000];
//! let t = std::thread::spawn(move || tx.send(&data, Duration::from_secs(5)));
//! assert_eq!(rx.recv(Duration::from_secs(5))?, vec![7u8; 100_000]);
//! t.join().unwrap()?;
//! # Ok(()) }
//! ```

mod receiver;
mod sender;

pub use receiver::BlockReceiver;
pub use sender::BlockSender;

use crate::common::{get32, get64, put32, put64};

/// How a receiver cuts blocks; the sender reads it from the receiver's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockParams {
    /// Data bytes per packet. Keep it within one datagram to the sender
    /// (about 1,400 bytes across Ethernet, 65,000 on loopback): a larger
    /// packet still arrives correctly, but one lost datagram costs all of it.
    pub packet: usize,
    /// Packets per acknowledgement unit (1–64: the bitmask is 64 bits). 003 used 16.
    pub unit: usize,
    /// The largest block the receiver accepts (its segment holds one block).
    pub max_block: usize,
}

impl Default for BlockParams {
    /// 1 KiB packets, units of 16 (RAPID's N), blocks up to 1 MiB.
    fn default() -> BlockParams {
        BlockParams { packet: 1024, unit: 16, max_block: 1 << 20 }
    }
}

impl BlockParams {
    /// Slots in the receiver's segment: packets of the largest block.
    fn slots(&self) -> usize {
        self.max_block.div_ceil(self.packet).max(1)
    }

    /// Offset of slot `i`.
    fn slot(&self, i: usize) -> usize {
        HEADER + i * (TAG + self.packet)
    }
}

/// `VBLK`: the receiver's header starts with it.
const MAGIC: u32 = 0x4b4c_4256;
/// The receiver's header: layout, status, registration.
const HEADER: usize = 64;
/// Each slot's tag: block, index, block length, check word.
const TAG: usize = 16;
/// Header offsets: the layout (written once).
const H_PACKET: usize = 4;
const H_UNIT: usize = 8;
const H_SLOTS: usize = 12;
/// Header offsets: the receiver's status, which the sender reads when an
/// acknowledgement is late: last block completed, block in progress, its
/// lowest incomplete unit, that unit's mask.
const H_STATUS: usize = 16;
const STATUS_LEN: usize = 24;
/// Header offsets: the registered sender's acknowledgement segment name and registration id.
const H_REG: usize = 40;
const REG_LEN: usize = 20;
/// The sender's acknowledgement segment: {block, unit, mask, done}, one write.
const ACK_LEN: usize = 24;
const ACK_SEGMENT: usize = 64;

/// The receiver's state as one record: in its status word and in every acknowledgement.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Ack {
    /// The last block the receiver completed.
    done: u32,
    /// The block this acknowledges.
    block: u32,
    /// The unit this acknowledges.
    unit: u32,
    /// Bit i: packet `unit × N + i` is in.
    mask: u64,
}

impl Ack {
    fn to_bytes(self) -> [u8; STATUS_LEN] {
        let mut b = [0u8; STATUS_LEN];
        put32(&mut b, 0, self.done);
        put32(&mut b, 4, self.block);
        put32(&mut b, 8, self.unit);
        put64(&mut b, 16, self.mask);
        b
    }

    fn from_bytes(b: &[u8]) -> Ack {
        Ack { done: get32(b, 0), block: get32(b, 4), unit: get32(b, 8), mask: get64(b, 16) }
    }
}

/// A slot's tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tag {
    block: u32,
    index: u32,
    /// The last packet of a round: the sender waits for the unit's mask (bit 31 of the index on the wire).
    ask: bool,
    total: u32,
    check: u32,
}

/// The index bit that asks for the unit's mask.
const ASK: u32 = 1 << 31;

impl Tag {
    fn new(reg: u32, block: u32, index: u32, total: u32, data: &[u8]) -> Tag {
        Tag { block, index, ask: false, total, check: Tag::check_of(reg, block, index, total, data) }
    }

    /// Over the sender's registration id too: a packet left by an earlier
    /// sender never counts for the current one, whatever its block number.
    /// Not over the ask bit: a packet is the same packet in every round.
    fn check_of(reg: u32, block: u32, index: u32, total: u32, data: &[u8]) -> u32 {
        let seed = (u64::from(block) << 32) | u64::from(index);
        crate::check::check(seed, &[&reg.to_le_bytes(), &total.to_le_bytes(), data])
    }

    fn put(self, b: &mut [u8]) {
        put32(b, 0, self.block);
        put32(b, 4, self.index | if self.ask { ASK } else { 0 });
        put32(b, 8, self.total);
        put32(b, 12, self.check);
    }

    fn get(b: &[u8]) -> Tag {
        let index = get32(b, 4);
        Tag { block: get32(b, 0), index: index & !ASK, ask: index & ASK != 0, total: get32(b, 8), check: get32(b, 12) }
    }
}

/// Packets of a block of `len` bytes (an empty block is one empty packet).
fn packets(len: usize, packet: usize) -> usize {
    len.div_ceil(packet).max(1)
}

/// The mask of a unit's `n` packets.
fn full_mask(n: usize) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// `a` is `b` or after it (block numbers wrap).
fn newer_or_same(a: u32, b: u32) -> bool {
    a.wrapping_sub(b) < 1 << 31
}
