//! A worker's exported segment: eight slots, each holding the rows one
//! exchange carries to one side (as many as the bands' ghost depth).
//!
//! - **Inbox** (written by the neighbours): for each ghost (above, below)
//!   two slots, by the parity of the exchange. A neighbour writes the rows
//!   of exchange e + 2 only after it has this worker's rows of e + 1, which
//!   this worker sends only after it read the rows of e, so a slot is never
//!   overwritten before it is read.
//! - **Outbox** (written by the worker itself, read by the neighbours when
//!   rows written to them went missing): the same four slots, each encoded
//!   exactly as it was written to the neighbour.
//!
//! A slot is {exchange number: u64, check word: u64, the rows: one byte per
//! spin}. A slot counts only if it names the exchange wanted and its check
//! word matches, so a late duplicate of older rows, or rows that arrived in
//! part, are never taken. `width` below is the spins a slot carries.

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

/// The bytes of one slot of `width` spins.
pub(crate) fn slot_len(width: usize) -> usize {
    HEADER + width
}

/// The segment's size.
pub(crate) fn segment_len(width: usize) -> usize {
    8 * slot_len(width)
}

fn slot(width: usize, index: usize) -> u32 {
    (index * slot_len(width)) as u32
}

/// Where the neighbour writes this worker's ghost `g` of exchange `seq`.
pub(crate) fn inbox(width: usize, g: Ghost, seq: u64) -> u32 {
    slot(width, 2 * g as usize + (seq % 2) as usize)
}

/// Where this worker keeps the rows it wrote to be its neighbour's ghost `g`.
pub(crate) fn outbox(width: usize, g: Ghost, seq: u64) -> u32 {
    slot(width, 4 + 2 * g as usize + (seq % 2) as usize)
}

/// The check word of a row: FNV-1a over the ghost, the sequence number and the spins.
fn check(g: Ghost, seq: u64, row: &[u8]) -> u64 {
    let head = (seq << 1 | g as u64).to_le_bytes();
    super::model::fnv1a(head.iter().chain(row))
}

/// The slot holding `row` (one or more rows) as ghost `g` of exchange `seq`.
pub(crate) fn encode(g: Ghost, seq: u64, row: &[i8]) -> Vec<u8> {
    let spins: Vec<u8> = row.iter().map(|&s| u8::from(s > 0)).collect();
    let mut out = Vec::with_capacity(HEADER + row.len());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&check(g, seq, &spins).to_le_bytes());
    out.extend_from_slice(&spins);
    out
}

/// The rows in `slot`, if they are ghost `g` of exchange `seq` and whole.
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
        assert_eq!(decode(Ghost::Above, 5, &s), None, "an older exchange");
        assert_eq!(decode(Ghost::Below, 7, &s), None, "the other ghost");
        let mut torn = s.clone();
        torn[HEADER + 2] = 1;
        assert_eq!(decode(Ghost::Above, 7, &torn), None, "a changed spin");
        assert_eq!(decode(Ghost::Above, 0, &[0; 22]), None, "a zeroed slot is no row of exchange 0");
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
