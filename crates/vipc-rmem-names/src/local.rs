//! The clerk's own table: the well-known segment it exports and the one
//! writer of it. Every change is one local write of one whole entry, which
//! the node applies atomically with respect to every remote read, so a
//! reader sees the entry before or after, never half (003's single-writer,
//! flag-word consistency).

use crate::entry::{Binding, Entry, EntryState};
use crate::error::{Error, Result};
use crate::layout::{bucket_of, slot_offset, table_size, well_known_name, Header, ENTRY_SIZE, MAX_BUCKETS, NAME_MAX};
use crate::probe::{self, Walk};
use vipc::{Access, ExportedSegment, Node, Notify, ProtectionGroup, SegmentOptions};

/// A name must be 1 to [`NAME_MAX`] bytes.
pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > NAME_MAX {
        return Err(Error::BadName { len: name.len(), max: NAME_MAX });
    }
    Ok(())
}

/// The exported table and the clerk's copy of what it wrote there.
pub(crate) struct LocalTable {
    seg: ExportedSegment,
    header: Header,
    /// What each bucket holds (the segment's bytes, parsed): the writer
    /// decides from here, readers read the segment.
    mirror: Vec<Option<Entry>>,
    /// The next registration's generation (never 0).
    next_generation: u32,
}

impl LocalTable {
    /// Exports the table at this host's well-known name, readable by
    /// `protection` (the clerk alone writes it), and writes its header.
    pub fn export(node: &Node, buckets: u32, protection: ProtectionGroup) -> Result<LocalTable> {
        if buckets == 0 || buckets > MAX_BUCKETS {
            return Err(Error::Layout { host: node.host_id(), why: format!("{buckets} buckets") });
        }
        let opts = SegmentOptions { access: Access::READ, notify: Notify::Never, protection };
        let seg = node.export_segment_named(well_known_name(node.host_id()), table_size(buckets), opts)?;
        let incarnation = loop {
            let v: u32 = rand::random();
            if v != 0 {
                break v;
            }
        };
        let header = Header { buckets, incarnation, host: node.host_id() };
        seg.write(0, &header.encode())?;
        Ok(LocalTable { seg, header, mirror: vec![None; buckets as usize], next_generation: 1 })
    }

    pub fn header(&self) -> Header {
        self.header
    }

    /// Registers `name` in the first deleted or empty bucket of its probe
    /// chain, with a new generation; fails if it is live already.
    pub fn register(&mut self, name: &str, binding: Binding) -> Result<Entry> {
        check_name(name)?;
        let n = self.header.buckets;
        let home = bucket_of(name, n);
        let mut free = None;
        for i in 0..n {
            let slot = (home + i) % n;
            match &self.mirror[slot as usize] {
                Some(e) if e.state == EntryState::Live && e.name == name => {
                    return Err(Error::AlreadyRegistered(name.to_string()))
                }
                Some(e) if e.state == EntryState::Live => {}
                Some(_) => free = free.or(Some(slot)),
                None => {
                    free = free.or(Some(slot));
                    break;
                }
            }
        }
        let slot = free.ok_or(Error::TableFull(n))?;
        let generation = self.next_generation;
        self.next_generation = self.next_generation.checked_add(1).unwrap_or(1);
        let e = Entry {
            state: EntryState::Live,
            incarnation: self.header.incarnation,
            generation,
            name: name.to_string(),
            binding,
        };
        self.put(slot, e.clone())?;
        Ok(e)
    }

    /// Marks the live entry of `name` deleted (lazily: nobody else is told)
    /// and returns its generation.
    pub fn delete(&mut self, name: &str) -> Result<u32> {
        check_name(name)?;
        let n = self.header.buckets;
        let home = bucket_of(name, n);
        let live =
            |s: &u32| matches!(&self.mirror[*s as usize], Some(e) if e.state == EntryState::Live && e.name == name);
        let chain = (0..n).map(|i| (home + i) % n).take_while(|&s| self.mirror[s as usize].is_some());
        let slot = chain.into_iter().find(live).ok_or_else(|| Error::NotFound(name.to_string()))?;
        let Some(mut e) = self.mirror[slot as usize].clone() else { return Err(Error::NotFound(name.to_string())) };
        e.state = EntryState::Deleted;
        let generation = e.generation;
        self.put(slot, e)?;
        Ok(generation)
    }

    /// The live entry of `name` and its bucket, read from the segment as a
    /// remote clerk would, `window` buckets per read.
    pub fn find(&self, name: &str, window: u32) -> Result<Option<(u32, Entry)>> {
        let h = self.header;
        let walk = Walk { host: h.host, buckets: h.buckets, incarnation: h.incarnation, window, reads: probe::WHOLE };
        let read = |first, count| Ok(self.seg.to_vec(slot_offset(first), count as usize * ENTRY_SIZE)?);
        Ok(probe::find(&walk, name, read)?.found())
    }

    /// Writes one whole entry: one local write, applied atomically.
    fn put(&mut self, slot: u32, e: Entry) -> Result<()> {
        self.seg.write(slot_offset(slot), &e.encode())?;
        self.mirror[slot as usize] = Some(e);
        Ok(())
    }
}
