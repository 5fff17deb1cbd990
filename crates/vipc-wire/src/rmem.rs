//! The type-specific fields of the remote-memory packets (003, PROTOCOL §4.15).
//!
//! Each packet reuses the fixed header: `total_len`, `local_addr`,
//! `remote_addr` and the 32-byte message area carry the fields below. The
//! structs only place and read fields; every check (bounds, access,
//! generation) is the receiving engine's, so reading never fails.
//!
//! ```
//! use vipc_wire::rmem::{Descriptor, ReadFields};
//! use vipc_wire::{Header, PacketType};
//! let f = ReadFields { source: Descriptor { index: 3, generation: 9 }, offset: 64, len: 40,
//!                      dest: Descriptor { index: 1, generation: 2 }, dest_offset: 8, token: 0 };
//! let mut h = Header::new(PacketType::MemRead);
//! f.put(&mut h);
//! assert_eq!(h.local_addr, 3 << 16 | 9);
//! assert_eq!(ReadFields::get(&h), f);
//! ```

use crate::Header;

/// Size of a CAS-II cell: a 32-bit value, then the 32-bit nonce of the last
/// successful swapper, both big-endian, at an 8-aligned offset.
pub const CAS_CELL: usize = 8;

/// A segment's 128-bit name: chosen at random by the exporter so that it
/// cannot be guessed (003 §3.4.2). Anonymous segments have none.
pub type SegmentName = [u8; 16];

/// A MemRead of more than this many bytes to a node without a cluster key
/// must carry that node's address token for the requester's address
/// ([`Refusal::Unvalidated`]): its answer would be more than about three
/// times the request, so a forged source address could aim it at someone else.
pub const TOKENLESS_READ_MAX: u32 = 128;

/// Access bit in MemImport and MemImportReply: reading.
pub const ACCESS_READ: u8 = 1 << 0;
/// Access bit in MemImport and MemImportReply: writing.
pub const ACCESS_WRITE: u8 = 1 << 1;

/// Names a slot of a node's descriptor table and the export that holds it:
/// the generation changes each time the slot is reused, so a request
/// carrying an old one is refused (003 §4.2.1). On the wire a u32,
/// `index << 16 | generation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct Descriptor {
    /// Slot in the owner's descriptor table.
    pub index: u16,
    /// Generation of the slot; 0 is never valid.
    pub generation: u16,
}

impl Descriptor {
    /// The wire form.
    pub const fn to_u32(self) -> u32 {
        (self.index as u32) << 16 | self.generation as u32
    }

    /// From the wire form.
    pub const fn from_u32(v: u32) -> Descriptor {
        Descriptor { index: (v >> 16) as u16, generation: v as u16 }
    }
}

/// Why the owner refused a request (byte 0 of a MemNack's message).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[repr(u8)]
pub enum Refusal {
    /// No segment in that slot, or an older generation of it (unexported).
    #[error("no such segment (unexported or stale handle)")]
    UnknownSegment = 1,
    /// The range lies outside the segment.
    #[error("range outside the segment")]
    OutOfRange = 2,
    /// The segment does not grant the access the operation needs (anonymous
    /// segments grant none).
    #[error("access not granted")]
    NoAccess = 3,
    /// The requesting host is outside the segment's protection group.
    #[error("host outside the protection group")]
    NotInGroup = 4,
    /// No exported segment has that name.
    #[error("no segment has that name")]
    UnknownName = 5,
    /// A CAS-II cell offset that is not a multiple of 8.
    #[error("CAS cell offset not 8-aligned")]
    Misaligned = 6,
    /// A CAS-II on a write-inhibited range (a write there is queued on the
    /// data channel instead, but a CAS must answer now).
    #[error("range is write-inhibited")]
    WriteInhibited = 7,
    /// Fields that contradict each other (e.g. a writev whose data are not count × element bytes).
    #[error("malformed request")]
    Malformed = 8,
    /// A read larger than [`TOKENLESS_READ_MAX`] without the owner's token
    /// for the address it came from: the MemNack carries the token, and the
    /// requester sends the read again with it.
    #[error("requester's address not proven (no valid address token)")]
    Unvalidated = 9,
}

impl Refusal {
    /// Every reason, in code order.
    pub const ALL: [Refusal; 9] = [
        Refusal::UnknownSegment,
        Refusal::OutOfRange,
        Refusal::NoAccess,
        Refusal::NotInGroup,
        Refusal::UnknownName,
        Refusal::Misaligned,
        Refusal::WriteInhibited,
        Refusal::Malformed,
        Refusal::Unvalidated,
    ];

    /// Decodes a wire code.
    pub fn from_u8(v: u8) -> Option<Refusal> {
        Refusal::ALL.get((v as usize).wrapping_sub(1)).copied()
    }

    /// Index 0..9 for per-reason counters.
    pub fn index(self) -> usize {
        self as usize - 1
    }

    /// Name used in statistics.
    pub fn name(self) -> &'static str {
        match self {
            Refusal::UnknownSegment => "unknown_segment",
            Refusal::OutOfRange => "out_of_range",
            Refusal::NoAccess => "no_access",
            Refusal::NotInGroup => "not_in_group",
            Refusal::UnknownName => "unknown_name",
            Refusal::Misaligned => "misaligned",
            Refusal::WriteInhibited => "write_inhibited",
            Refusal::Malformed => "malformed",
            Refusal::Unvalidated => "unvalidated",
        }
    }
}

fn get32(m: &[u8; 32], at: usize) -> u32 {
    u32::from_be_bytes([m[at], m[at + 1], m[at + 2], m[at + 3]])
}

fn put32(m: &mut [u8; 32], at: usize, v: u32) {
    m[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn get64(m: &[u8; 32], at: usize) -> u64 {
    let mut b = [0; 8];
    b.copy_from_slice(&m[at..at + 8]);
    u64::from_be_bytes(b)
}

fn put64(m: &mut [u8; 32], at: usize, v: u64) {
    m[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// MemWrite: the packet's data go to `offset` of segment `dest`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteFields {
    /// The destination segment (`local_addr`).
    pub dest: Descriptor,
    /// Where this packet's data go (`remote_addr`).
    pub offset: u32,
    /// Bytes of the whole operation this packet belongs to (`total_len`).
    pub total: u32,
}

impl WriteFields {
    /// Writes the fields into `h`.
    pub fn put(&self, h: &mut Header) {
        h.local_addr = self.dest.to_u32();
        h.remote_addr = self.offset;
        h.total_len = self.total;
    }

    /// Reads the fields of `h`.
    pub fn get(h: &Header) -> WriteFields {
        WriteFields { dest: Descriptor::from_u32(h.local_addr), offset: h.remote_addr, total: h.total_len }
    }
}

/// MemRead: `len` bytes at `offset` of `source`, to be written to
/// `dest_offset` of the requester's segment `dest`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadFields {
    /// The owner's segment (`local_addr`).
    pub source: Descriptor,
    /// Start of the range (`remote_addr`).
    pub offset: u32,
    /// Length of the range (`total_len`).
    pub len: u32,
    /// The requester's segment the answers go to (message bytes 0–3).
    pub dest: Descriptor,
    /// Where in it (message bytes 4–7).
    pub dest_offset: u32,
    /// The owner's address token for the requester's address, 0 if it has
    /// none (message bytes 8–15; see [`TOKENLESS_READ_MAX`]).
    pub token: u64,
}

impl ReadFields {
    /// Writes the fields into `h`.
    pub fn put(&self, h: &mut Header) {
        h.local_addr = self.source.to_u32();
        h.remote_addr = self.offset;
        h.total_len = self.len;
        put32(&mut h.message, 0, self.dest.to_u32());
        put32(&mut h.message, 4, self.dest_offset);
        put64(&mut h.message, 8, self.token);
    }

    /// Reads the fields of `h`.
    pub fn get(h: &Header) -> ReadFields {
        ReadFields {
            source: Descriptor::from_u32(h.local_addr),
            offset: h.remote_addr,
            len: h.total_len,
            dest: Descriptor::from_u32(get32(&h.message, 0)),
            dest_offset: get32(&h.message, 4),
            token: get64(&h.message, 8),
        }
    }
}

/// MemCas: CAS-II on the cell at `offset` of `target`; the answer (a
/// [`CasAnswer`]) goes to `dest_offset` of the requester's segment `dest`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CasFields {
    /// The owner's segment (`local_addr`).
    pub target: Descriptor,
    /// The cell's offset, a multiple of 8 (`remote_addr`).
    pub offset: u32,
    /// The value expected in the cell (message bytes 0–3).
    pub expect: u32,
    /// The value stored on success (message bytes 4–7).
    pub new: u32,
    /// The requester's nonce, stored on success (message bytes 8–11).
    pub nonce: u32,
    /// The requester's segment the answer goes to (message bytes 12–15).
    pub dest: Descriptor,
    /// Where in it (message bytes 16–19).
    pub dest_offset: u32,
}

impl CasFields {
    /// Writes the fields into `h` (`total_len` = 8, the cell size).
    pub fn put(&self, h: &mut Header) {
        h.local_addr = self.target.to_u32();
        h.remote_addr = self.offset;
        h.total_len = CAS_CELL as u32;
        put32(&mut h.message, 0, self.expect);
        put32(&mut h.message, 4, self.new);
        put32(&mut h.message, 8, self.nonce);
        put32(&mut h.message, 12, self.dest.to_u32());
        put32(&mut h.message, 16, self.dest_offset);
    }

    /// Reads the fields of `h`.
    pub fn get(h: &Header) -> CasFields {
        CasFields {
            target: Descriptor::from_u32(h.local_addr),
            offset: h.remote_addr,
            expect: get32(&h.message, 0),
            new: get32(&h.message, 4),
            nonce: get32(&h.message, 8),
            dest: Descriptor::from_u32(get32(&h.message, 12)),
            dest_offset: get32(&h.message, 16),
        }
    }
}

/// What a CAS-II answers: the value found at comparison time and the nonce
/// of the last successful swapper (after this operation). It is the data of
/// the answering MemWrite, and the bytes written into the destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CasAnswer {
    /// The cell's value when compared.
    pub value: u32,
    /// The cell's nonce after the operation.
    pub nonce: u32,
}

impl CasAnswer {
    /// The 8 bytes: value then nonce, big-endian (also the cell's layout).
    pub fn to_bytes(self) -> [u8; CAS_CELL] {
        let mut b = [0; CAS_CELL];
        b[..4].copy_from_slice(&self.value.to_be_bytes());
        b[4..].copy_from_slice(&self.nonce.to_be_bytes());
        b
    }

    /// From 8 bytes; `None` for any other length.
    pub fn from_bytes(b: &[u8]) -> Option<CasAnswer> {
        let b: &[u8; CAS_CELL] = b.try_into().ok()?;
        Some(CasAnswer {
            value: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            nonce: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        })
    }
}

/// MemWritev: `count` elements of `elem` bytes (the data, back to back) go
/// to `base`, `base + stride`, … of `dest` (003 `WRITEV` with `ychunks` = 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WritevFields {
    /// The destination segment (`local_addr`).
    pub dest: Descriptor,
    /// Offset of this packet's first element (`remote_addr`).
    pub base: u32,
    /// Distance between element starts, at least `elem` (message bytes 0–3).
    pub stride: u32,
    /// Elements in this packet (message bytes 4–7).
    pub count: u32,
    /// Bytes per element, at least 1 (message bytes 8–11).
    pub elem: u32,
    /// Data bytes of the whole operation (`total_len`).
    pub total: u32,
}

impl WritevFields {
    /// Writes the fields into `h`.
    pub fn put(&self, h: &mut Header) {
        h.local_addr = self.dest.to_u32();
        h.remote_addr = self.base;
        h.total_len = self.total;
        put32(&mut h.message, 0, self.stride);
        put32(&mut h.message, 4, self.count);
        put32(&mut h.message, 8, self.elem);
    }

    /// Reads the fields of `h`.
    pub fn get(h: &Header) -> WritevFields {
        WritevFields {
            dest: Descriptor::from_u32(h.local_addr),
            base: h.remote_addr,
            total: h.total_len,
            stride: get32(&h.message, 0),
            count: get32(&h.message, 4),
            elem: get32(&h.message, 8),
        }
    }
}

/// MemNack: why a MemRead, MemCas or MemImport (same `seq`) was refused, and what it asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NackFields {
    /// The reason code (message byte 0; see [`Refusal`]).
    pub reason: u8,
    /// The refused packet's type code (message byte 1).
    pub refused: u8,
    /// The refused request's descriptor (`local_addr`).
    pub desc: Descriptor,
    /// Its offset (`remote_addr`).
    pub offset: u32,
    /// Its length (`total_len`).
    pub len: u32,
    /// With [`Refusal::Unvalidated`], the owner's token for the address the
    /// refused read came from; else 0 (message bytes 2–9).
    pub token: u64,
}

impl NackFields {
    /// Writes the fields into `h`.
    pub fn put(&self, h: &mut Header) {
        h.local_addr = self.desc.to_u32();
        h.remote_addr = self.offset;
        h.total_len = self.len;
        h.message[0] = self.reason;
        h.message[1] = self.refused;
        put64(&mut h.message, 2, self.token);
    }

    /// Reads the fields of `h`.
    pub fn get(h: &Header) -> NackFields {
        NackFields {
            reason: h.message[0],
            refused: h.message[1],
            desc: Descriptor::from_u32(h.local_addr),
            offset: h.remote_addr,
            len: h.total_len,
            token: get64(&h.message, 2),
        }
    }
}

/// MemImport: who exports `name`, and may the asker have `access`?
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImportFields {
    /// The name (message bytes 0–15).
    pub name: SegmentName,
    /// Access wanted: [`ACCESS_READ`] | [`ACCESS_WRITE`] (message byte 16).
    pub access: u8,
}

impl ImportFields {
    /// Writes the fields into `h`.
    pub fn put(&self, h: &mut Header) {
        h.message[..16].copy_from_slice(&self.name);
        h.message[16] = self.access;
    }

    /// Reads the fields of `h`.
    pub fn get(h: &Header) -> ImportFields {
        let mut name = [0; 16];
        name.copy_from_slice(&h.message[..16]);
        ImportFields { name, access: h.message[16] }
    }
}

/// MemImportReply: the owner's descriptor for `name`, its size and the access it grants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImportReplyFields {
    /// The name asked for (message bytes 0–15).
    pub name: SegmentName,
    /// The segment's descriptor (`local_addr`).
    pub desc: Descriptor,
    /// The segment's size in bytes (`total_len`).
    pub size: u32,
    /// Access granted: [`ACCESS_READ`] | [`ACCESS_WRITE`] (message byte 16).
    pub access: u8,
}

impl ImportReplyFields {
    /// Writes the fields into `h`.
    pub fn put(&self, h: &mut Header) {
        h.message[..16].copy_from_slice(&self.name);
        h.message[16] = self.access;
        h.local_addr = self.desc.to_u32();
        h.total_len = self.size;
    }

    /// Reads the fields of `h`.
    pub fn get(h: &Header) -> ImportReplyFields {
        let ImportFields { name, access } = ImportFields::get(h);
        ImportReplyFields { name, access, desc: Descriptor::from_u32(h.local_addr), size: h.total_len }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PacketType;

    #[test]
    fn fields_round_trip_through_the_header() {
        let d = Descriptor { index: 0xabcd, generation: 0x1234 };
        assert_eq!(Descriptor::from_u32(d.to_u32()), d);
        assert_eq!(d.to_u32(), 0xabcd_1234);
        let mut h = Header::new(PacketType::MemWrite);
        let w = WriteFields { dest: d, offset: 7, total: 99 };
        w.put(&mut h);
        assert_eq!(WriteFields::get(&h), w);
        let c = CasFields { target: d, offset: 16, expect: 1, new: 2, nonce: 3, dest: d, dest_offset: 8 };
        let mut h = Header::new(PacketType::MemCas);
        c.put(&mut h);
        assert_eq!((CasFields::get(&h), h.total_len), (c, 8));
        assert_eq!(&h.message[..20], &[0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0xab, 0xcd, 0x12, 0x34, 0, 0, 0, 8]);
        let v = WritevFields { dest: d, base: 4, stride: 64, count: 10, elem: 8, total: 80 };
        let mut h = Header::new(PacketType::MemWritev);
        v.put(&mut h);
        assert_eq!(WritevFields::get(&h), v);
        let n = NackFields { reason: 9, refused: 19, desc: d, offset: 5, len: 6, token: 0x0102_0304_0506_0708 };
        let mut h = Header::new(PacketType::MemNack);
        n.put(&mut h);
        assert_eq!(NackFields::get(&h), n);
        assert_eq!(&h.message[..10], &[9, 19, 1, 2, 3, 4, 5, 6, 7, 8]);
        let f = ReadFields { source: d, offset: 1, len: 2, dest: d, dest_offset: 3, token: u64::MAX - 1 };
        let mut h = Header::new(PacketType::MemRead);
        f.put(&mut h);
        assert_eq!(ReadFields::get(&h), f);
        assert_eq!(&h.message[8..16], &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe]);
        let r = ImportReplyFields { name: [9; 16], desc: d, size: 4096, access: ACCESS_READ | ACCESS_WRITE };
        let mut h = Header::new(PacketType::MemImportReply);
        r.put(&mut h);
        assert_eq!(ImportReplyFields::get(&h), r);
        assert_eq!(ImportFields::get(&h), ImportFields { name: [9; 16], access: 3 });
    }

    #[test]
    fn cas_answer_bytes_and_refusal_codes() {
        let a = CasAnswer { value: 0x0102_0304, nonce: 0xa0b0_c0d0 };
        assert_eq!(a.to_bytes(), [1, 2, 3, 4, 0xa0, 0xb0, 0xc0, 0xd0]);
        assert_eq!(CasAnswer::from_bytes(&a.to_bytes()), Some(a));
        assert_eq!(CasAnswer::from_bytes(&[0; 7]), None);
        for (i, r) in Refusal::ALL.iter().enumerate() {
            assert_eq!(Refusal::from_u8(*r as u8), Some(*r));
            assert_eq!(r.index(), i);
        }
        assert_eq!(Refusal::from_u8(0), None);
        assert_eq!(Refusal::from_u8(9), Some(Refusal::Unvalidated));
        assert_eq!(Refusal::from_u8(10), None);
    }
}
