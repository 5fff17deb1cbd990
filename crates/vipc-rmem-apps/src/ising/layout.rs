//! A worker's exported segment: eight slots of one row each.
//!
//! - **Inbox** (written by the neighbours): for each ghost (above, below)
//!   two slots, by the parity of the half-sweep. A neighbour writes the
//!   rows of half-sweep h + 2 only after it has this worker's rows of
//!   h + 1, which this worker sends only after it read the rows of h, so a
//!   slot is never overwritten before it is read.
//! - **Outbox** (written by the worker itself, read by the neighbours when
//!   a row written to them went missing): the same four slots, each row
//!   encoded exactly as it was written to the neighbour.
//!
//! A slot is {sequence number: u64, check word: u64, the row: one byte per
//! spin}. A slot counts only if it names the half-sweep wanted and its
//! check word matches, so a late duplicate of an older row, or a row that
//! arrived in part, is never taken.

/// Which ghost row of a band.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ghost {
    /// The row above the band: the bottom row of the neighbour above.
    Above = 0,
    /// The row below the band: the top row of the neighbour below.
    Below = 1,
}

impl Ghost {
    pub(crate) const BOTH: [Ghost; 2] = [Ghost::Above, Ghost::Below];
}

const HEADER: usize = 16;

/// The bytes of one slot for an L-wide grid.
pub(crate) fn slot_len(size: usize) -> usize {
    HEADER + size
}

/// The segment's size.
pub(crate) fn segment_len(size: usize) -> usize {
    8 * slot_len(size)
}

fn slot(size: usize, index: usize) -> u32 {
    (index * slot_len(size)) as u32
}

/// Where the neighbour writes this worker's ghost `g` of half-sweep `seq`.
pub(crate) fn inbox(size: usize, g: Ghost, seq: u64) -> u32 {
    slot(size, 2 * g as usize + (seq % 2) as usize)
}

/// Where this worker keeps the row it wrote to be its neighbour's ghost `g`.
pub(crate) fn outbox(size: usize, g: Ghost, seq: u64) -> u32 {
    slot(size, 4 + 2 * g as usize + (seq % 2) as usize)
}

/// The check word of a row: FNV-1a over the ghost, the sequence number and the spins.
fn check(g: Ghost, seq: u64, row: &[u8]) -> u64 {
    let head = (seq << 1 | g as u64).to_le_bytes();
    super::model::fnv1a(head.iter().chain(row))
}

/// The slot holding `row` as ghost `g` of half-sweep `seq`.
pub(crate) fn encode(g: Ghost, seq: u64, row: &[i8]) -> Vec<u8> {
    let spins: Vec<u8> = row.iter().map(|&s| u8::from(s > 0)).collect();
    let mut out = Vec::with_capacity(HEADER + row.len());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&check(g, seq, &spins).to_le_bytes());
    out.extend_from_slice(&spins);
    out
}

/// The row in `slot`, if it is ghost `g` of half-sweep `seq` and whole.
pub(crate) fn decode(g: Ghost, seq: u64, slot: &[u8]) -> Option<Vec<i8>> {
    let word = |at: usize| u64::from_le_bytes(slot[at..at + 8].try_into().unwrap_or([0; 8]));
    if slot.len() < HEADER || word(0) != seq {
        return None;
    }
    let spins = &slot[HEADER..];
    if word(8) != check(g, seq, spins) || spins.iter().any(|&b| b > 1) {
        return None;
    }
    Some(spins.iter().map(|&b| if b == 1 { 1 } else { -1 }).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_counts_only_for_its_ghost_and_half_sweep_and_whole() {
        let row = [1i8, -1, -1, 1, 1, 1];
        let s = encode(Ghost::Above, 7, &row);
        assert_eq!(decode(Ghost::Above, 7, &s), Some(row.to_vec()));
        assert_eq!(decode(Ghost::Above, 5, &s), None, "an older half-sweep");
        assert_eq!(decode(Ghost::Below, 7, &s), None, "the other ghost");
        let mut torn = s.clone();
        torn[HEADER + 2] = 1;
        assert_eq!(decode(Ghost::Above, 7, &torn), None, "a changed spin");
        assert_eq!(decode(Ghost::Above, 0, &[0; 22]), None, "a zeroed slot is no row of half-sweep 0");
    }

    #[test]
    fn slots_do_not_overlap() {
        let n = 10;
        let mut offsets: Vec<u32> = Vec::new();
        for g in Ghost::BOTH {
            for seq in [4, 5] {
                offsets.push(inbox(n, g, seq));
                offsets.push(outbox(n, g, seq));
            }
        }
        offsets.sort();
        offsets.dedup();
        assert_eq!(offsets.len(), 8);
        assert!(offsets.iter().all(|&o| o as usize + slot_len(n) <= segment_len(n)));
    }
}
