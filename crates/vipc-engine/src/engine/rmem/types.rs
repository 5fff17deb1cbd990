//! The public types of remote memory: what an exporter chooses, what an
//! importer holds, and what the engine reports.

use crate::{Access, HostId};
pub use vipc_wire::rmem::{CasAnswer, Descriptor, Refusal, SegmentName, CAS_CELL, TOKENLESS_READ_MAX};

/// When the exporter hears of remote operations on its segment (003 §3.4.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub enum Notify {
    /// Never: data move without the exporter's knowledge.
    #[default]
    Never,
    /// After every remote operation.
    Always,
    /// After remote operations whose request has the notify bit set.
    Conditional,
}

/// The hosts allowed to import and operate on a segment (003 §3.4.2).
#[derive(Clone, Debug, PartialEq, Eq, Default, Hash)]
pub enum ProtectionGroup {
    /// Every host of the cluster.
    #[default]
    Any,
    /// Only these hosts (the owner's own host included only if listed).
    Hosts(Vec<HostId>),
}

impl ProtectionGroup {
    /// True if `host` may use the segment.
    pub fn admits(&self, host: HostId) -> bool {
        match self {
            ProtectionGroup::Any => true,
            ProtectionGroup::Hosts(h) => h.contains(&host),
        }
    }
}

/// How a segment is exported.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SegmentOptions {
    /// What importers may do.
    pub access: Access,
    /// When the exporter is notified.
    pub notify: Notify,
    /// Who may import and operate.
    pub protection: ProtectionGroup,
}

/// A local segment of this node: its descriptor (the handle the owner holds).
pub type SegmentId = Descriptor;

/// What an importer knows of a segment: enough to address requests to it
/// (003's registry entry). The owner checks everything again on every request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Imported {
    /// The owner's logical host.
    pub host: HostId,
    /// The owner's descriptor.
    pub desc: Descriptor,
    /// The segment's size in bytes.
    pub size: u32,
    /// The access the owner granted.
    pub access: Access,
}

/// A pending read, CAS or import: the sequence number of its request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemOpId(pub u32);

/// A remote-memory operation, as reported on a control or data channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MemOp {
    /// A write of contiguous bytes.
    Write,
    /// A strided write.
    Writev,
    /// A read.
    Read,
    /// A CAS-II.
    Cas,
}

/// A notification: a remote operation was applied to the segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlRecord {
    /// Which operation.
    pub op: MemOp,
    /// The requesting host.
    pub from: HostId,
    /// The first byte it touched.
    pub offset: u32,
    /// The bytes it spans (a writev: from its first element's start to its last's end).
    pub len: u32,
}

/// A write that arrived for a write-inhibited range: not applied, queued
/// with its data for the exporter to merge (003 §3.4.4, §4.2.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DataRecord {
    /// The writing host.
    pub from: HostId,
    /// Where the first element goes.
    pub offset: u32,
    /// Distance between element starts (a plain write: its length).
    pub stride: u32,
    /// Bytes per element (a plain write: its length).
    pub elem: u32,
    /// The elements, back to back.
    pub data: Vec<u8>,
}

impl DataRecord {
    /// The (offset, bytes) pieces the record would write.
    pub fn pieces(&self) -> impl Iterator<Item = (u64, &[u8])> {
        let (stride, elem) = (self.stride as u64, self.elem.max(1) as usize);
        self.data.chunks(elem).enumerate().map(move |(i, c)| (self.offset as u64 + i as u64 * stride, c))
    }
}

/// What a finished operation returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemOutcome {
    /// A read: every byte is in the destination segment.
    Read,
    /// A CAS-II: its answer (also written into the destination segment).
    Cas(CasAnswer),
    /// An import: the handle.
    Import(Imported),
}

/// Access as the wire's bits.
pub(crate) fn access_bits(a: Access) -> u8 {
    let (r, w) = (vipc_wire::rmem::ACCESS_READ, vipc_wire::rmem::ACCESS_WRITE);
    (if a.read { r } else { 0 }) | (if a.write { w } else { 0 })
}

/// Access from the wire's bits.
pub(crate) fn access_from_bits(b: u8) -> Access {
    Access { read: b & vipc_wire::rmem::ACCESS_READ != 0, write: b & vipc_wire::rmem::ACCESS_WRITE != 0 }
}
