//! Reliable block transfer on remote writes (003 §5.3.1: blast with
//! selective acknowledgement).
//!
//! The receiver exports a segment of packet slots ([`BlockReceiver`]); the
//! sender ([`BlockSender`]) exports a small acknowledgement segment and
//! registers its name in the receiver's header. A block is cut into packets
//! of `packet` bytes, grouped into acknowledgement units of `unit` (N ≤ 64)
//! packets. The sender keeps up to a window of W units in flight
//! ([`BlockSender::set_window`], default [`WINDOW`], at most [`MAX_WINDOW`]):
//! for each it writes every packet not yet acknowledged — the unit's last
//! with the ask bit — and goes on with the next unit while the window has
//! room. The receiver, which takes each packet as its notification comes,
//! answers an asking packet with one record {done, block, unit, bitmask,
//! check word} written into slot `unit mod 16` of the sender's segment; the
//! sender rewrites only the missing packets of that unit, and the window
//! moves on past its lowest unit once that unit is complete. W = 1 is
//! stop-and-wait, unit by unit. After a retransmission timeout without an
//! acknowledgement the sender reads the receiver's status word itself (a
//! remote read, answered by the receiver's node with no receiver thread
//! running): that recovers lost acknowledgements, and a refused or
//! unanswered read says the receiver is gone.
//!
//! Why a record names its block and unit and carries a check word: any
//! host may write the acknowledgement segment, and a record may arrive late
//! or twice. The sender takes a record only if its check word (over the
//! sender's registration id) matches and it names the block being sent and
//! a unit in flight that maps to the slot it is in; anything else is
//! counted ([`SenderStats::ignored_acks`]) and skipped (see `judge`). The
//! receiver's status word needs no check word: the receiver write-inhibits
//! its layout and status, so no other host's write lands there.
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
pub use sender::{BlockSender, SenderStats, WINDOW};

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
/// Largest packet (one remote write) of a block transfer: a receiver offers
/// none larger, and a sender refuses a receiver's header that says otherwise.
const MAX_PACKET: usize = 1 << 24;
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
/// lowest incomplete unit, the registration id of the sender it serves,
/// that unit's mask, and the registration id the last block was completed
/// for. The ids tell a sender whether the rest speaks of its own blocks: a
/// sender that registered while its predecessor's last block completed
/// may have numbered its first block as that one.
const H_STATUS: usize = 16;
const STATUS_LEN: usize = 28;
/// Status offsets of the two registration ids (an acknowledgement record
/// has its check word where the status has the serving id).
const S_SERVING: usize = 12;
const S_DONE_BY: usize = 24;
/// Header offsets: the registered sender's acknowledgement segment name and registration id.
const H_REG: usize = 44;
const REG_LEN: usize = 20;
/// The sender's acknowledgement segment: one 32-byte record per slot, unit
/// `u`'s in slot `u % ACK_SLOTS` (units in flight are consecutive, so at
/// most [`MAX_WINDOW`] of them never share a slot), each written in one write.
const ACK_SLOT: usize = 32;
const ACK_SLOTS: usize = 16;
const ACK_SEGMENT: usize = ACK_SLOT * ACK_SLOTS;
/// Where an acknowledgement record keeps its check word (zero in the status word).
const ACK_CHECK: usize = 12;

/// The most units a sender keeps in flight: one acknowledgement slot each.
pub const MAX_WINDOW: usize = ACK_SLOTS;

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

    /// The acknowledgement record for the sender registered as `reg`: the
    /// status bytes, a check word and zeros to the slot's end.
    fn to_record(self, reg: u32) -> [u8; ACK_SLOT] {
        let mut b = [0u8; ACK_SLOT];
        b[..STATUS_LEN].copy_from_slice(&self.to_bytes());
        put32(&mut b, ACK_CHECK, self.check(reg));
        b
    }

    /// Over the registration id too, like a packet's: any host may write the
    /// segment, and bytes that are not this receiver's record for this sender
    /// (garbage, a torn or foreign write) fail it.
    fn check(self, reg: u32) -> u32 {
        let seed = (u64::from(self.block) << 32) | u64::from(self.unit);
        crate::check::check(seed, &[&reg.to_le_bytes(), &self.done.to_le_bytes(), &self.mask.to_le_bytes()])
    }
}

/// The receiver's status word: its state, and whose blocks that state is of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Status {
    ack: Ack,
    /// The registration id of the sender it takes packets from.
    serving: u32,
    /// The registration id `ack.done` was completed for.
    done_by: u32,
}

impl Status {
    fn to_bytes(self) -> [u8; STATUS_LEN] {
        let mut b = self.ack.to_bytes();
        put32(&mut b, S_SERVING, self.serving);
        put32(&mut b, S_DONE_BY, self.done_by);
        b
    }

    fn from_bytes(b: &[u8]) -> Status {
        Status { ack: Ack::from_bytes(b), serving: get32(b, S_SERVING), done_by: get32(b, S_DONE_BY) }
    }
}

/// What the sender makes of one acknowledgement slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// The receiver has the whole block.
    Done,
    /// The packets of unit `unit` it holds (a unit in flight).
    Mask { unit: usize, mask: u64 },
    /// A true record, but of another block or of a unit not in flight (late, or duplicated).
    Stale,
    /// Not a record of this receiver for this sender: wrong check word, or
    /// it says a block is done that was never sent.
    Garbled,
}

/// Judges the record in acknowledgement slot `slot` while the sender, registered
/// as `reg`, has units `lo..next` of `block` in flight. Any bytes are safe here:
/// a short or garbled record is [`Verdict::Garbled`], never a panic.
fn judge(rec: &[u8], slot: usize, reg: u32, block: u32, lo: usize, next: usize) -> Verdict {
    if rec.len() < ACK_SLOT {
        return Verdict::Garbled;
    }
    let a = Ack::from_bytes(rec);
    if get32(rec, ACK_CHECK) != a.check(reg) || (a.done != block && newer_or_same(a.done, block)) {
        return Verdict::Garbled;
    }
    let unit = a.unit as usize;
    if a.done == block {
        Verdict::Done
    } else if a.block != block || !(lo..next).contains(&unit) || unit % ACK_SLOTS != slot {
        Verdict::Stale
    } else {
        Verdict::Mask { unit, mask: a.mask }
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const REG: u32 = 0x5eed_1234;

    fn record(done: u32, block: u32, unit: u32, mask: u64) -> [u8; ACK_SLOT] {
        Ack { done, block, unit, mask }.to_record(REG)
    }

    #[test]
    fn only_a_current_units_record_counts() {
        // Block 7, units 3..7 in flight.
        let judge7 = |rec: &[u8], slot| judge(rec, slot, REG, 7, 3, 7);
        assert_eq!(judge7(&record(6, 7, 4, 0b101), 4), Verdict::Mask { unit: 4, mask: 0b101 });
        assert_eq!(judge7(&record(7, 7, 9, 0), 9), Verdict::Done);
        // Late or duplicated: a unit already complete, a unit whose slot is
        // reused later, the same unit of the previous block (even in its slot).
        assert_eq!(judge7(&record(6, 7, 2, 0b1), 2), Verdict::Stale);
        assert_eq!(judge7(&record(6, 7, 4 + ACK_SLOTS as u32, 0b1), 4), Verdict::Stale);
        assert_eq!(judge7(&record(5, 6, 4, 0b1111), 4), Verdict::Stale);
        assert_eq!(judge7(&record(6, 6, 4, 0b1111), 4), Verdict::Stale, "block 6's final record");
        // In the wrong slot: not written by the receiver.
        assert_eq!(judge7(&record(6, 7, 4, 0b1), 5), Verdict::Stale);
        // Another sender's record, a block done that was never sent, bytes changed.
        assert_eq!(
            judge(&Ack { done: 6, block: 7, unit: 4, mask: 1 }.to_record(REG + 1), 4, REG, 7, 3, 7),
            Verdict::Garbled
        );
        assert_eq!(judge7(&record(8, 8, 4, 0b1), 4), Verdict::Garbled);
        let mut r = record(6, 7, 4, 0b101);
        r[16] ^= 0b10;
        assert_eq!(judge7(&r, 4), Verdict::Garbled);
        assert_eq!(judge7(&[0u8; ACK_SLOT], 0), Verdict::Garbled);
        assert_eq!(judge7(&r[..ACK_SLOT - 1], 4), Verdict::Garbled);
    }

    #[test]
    fn block_numbers_wrap() {
        let rec = Ack { done: u32::MAX, block: 0, unit: 0, mask: 1 }.to_record(REG);
        assert_eq!(judge(&rec, 0, REG, 0, 0, 1), Verdict::Mask { unit: 0, mask: 1 });
        let done = Ack { done: 0, block: 0, unit: 0, mask: 1 }.to_record(REG);
        assert_eq!(judge(&done, 0, REG, 0, 0, 1), Verdict::Done);
        assert_eq!(judge(&done, 0, REG, u32::MAX, 0, 1), Verdict::Garbled);
    }

    proptest! {
        #[test]
        fn any_bytes_in_a_slot_are_judged_without_panic(
            rec in proptest::collection::vec(any::<u8>(), 0..=2 * ACK_SLOT),
            slot in 0..ACK_SLOTS, block: u32, lo in 0usize..1 << 20, w in 0usize..=MAX_WINDOW,
        ) {
            // Random bytes pass the check word only by a 2^-32 chance.
            let v = judge(&rec, slot, REG, block, lo, lo + w);
            prop_assert!(matches!(v, Verdict::Garbled), "{v:?}");
        }
    }
}
