//! Remote memory (003, PROTOCOL §4.15) between engines on virtual time:
//! every operation, every refusal rule, notification, write-inhibition,
//! timeouts and the local path. Node 0 (host 1) exports; node 1 (host 2)
//! and node 2 (host 3) import and operate.

mod common;

use common::*;
use std::net::SocketAddr;
use std::time::Duration;
use vipc_engine::*;
use vipc_wire::rmem::{CasFields, ReadFields, WriteFields, WritevFields};
use vipc_wire::{to_vec, Flags, Header, PacketType, Pid};

const NAME: SegmentName = [0x5a; 16];

fn rw() -> SegmentOptions {
    SegmentOptions { access: Access::READ_WRITE, ..Default::default() }
}

/// Exports `size` bytes on node 0 under NAME with `opts`.
fn export(net: &mut Net, size: usize, opts: SegmentOptions) -> SegmentId {
    net.nodes[0].export_segment(Some(NAME), size, opts).unwrap()
}

/// Imports NAME from node `i`.
fn import(net: &mut Net, i: usize, access: Access) -> Result<Imported, Error> {
    let now = net.now;
    let op = net.nodes[i].mem_import(now, NAME, access).unwrap();
    net.settle();
    match finish(net, i, op) {
        Ok(MemOutcome::Import(h)) => Ok(h),
        Ok(o) => panic!("an import finished with {o:?}"),
        Err(e) => Err(e),
    }
}

/// Waits (advancing time if needed) for `op` of node `i`.
fn finish(net: &mut Net, i: usize, op: MemOpId) -> Result<MemOutcome, Error> {
    for _ in 0..200 {
        if let Some(r) = net.nodes[i].mem_poll(op) {
            assert!(
                net.events.iter().any(|(n, e)| *n == i && *e == Event::MemDone(op)),
                "a finished operation is announced"
            );
            return r;
        }
        net.advance(Duration::from_millis(10));
    }
    panic!("operation {op:?} never finished")
}

fn anon(net: &mut Net, i: usize, size: usize) -> SegmentId {
    net.nodes[i].export_segment(None, size, SegmentOptions::default()).unwrap()
}

fn bytes_of(net: &Net, i: usize, id: SegmentId, offset: u32, len: usize) -> Vec<u8> {
    let mut b = vec![0; len];
    net.nodes[i].segment_read(id, offset, &mut b).unwrap();
    b
}

fn refused(net: &Net, i: usize, r: Refusal) -> u64 {
    net.stats(i).rmem_refused[r.index()]
}

/// A raw remote-memory packet from node `from` (host from+1) to host 1.
fn raw(net: &mut Net, from: usize, ptype: PacketType, fill: impl FnOnce(&mut Header), data: &[u8]) {
    let mut h = Header::new(ptype);
    h.incarnation = 77;
    h.seq = 0xdead;
    h.src = Pid::new(from as u16 + 1, 0);
    h.dst = Pid::new(1, 0);
    fill(&mut h);
    let bytes = to_vec(&h, data, None);
    let now = net.now;
    net.nodes[0].handle_datagram(now, addr(from), &bytes);
    net.settle();
}

#[test]
fn write_read_and_cas_across_nodes_without_any_process() {
    let mut net = Net::new(2);
    let seg = export(&mut net, 64 << 10, rw());
    let h = import(&mut net, 1, Access::READ_WRITE).unwrap();
    assert_eq!((h.host, h.desc, h.size, h.access), (1, seg, 64 << 10, Access::READ_WRITE));
    assert_eq!(net.stats(0).processes, 0, "no process exists on the owner");

    // A write larger than a packet is split; it lands in place.
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
    net.nodes[1].mem_write(&h, 100, &data, false).unwrap();
    net.settle();
    assert_eq!(bytes_of(&net, 0, seg, 100, data.len()), data);
    assert_eq!(net.stats(1).sent(PacketType::MemWrite), 8, "10,000 bytes in packets of at most 1,472 bytes");
    assert_eq!(net.stats(0).rmem_writes_applied, net.stats(1).sent(PacketType::MemWrite));

    // A read of 20,000 bytes comes back as several answers into the anonymous segment.
    net.nodes[0].segment_write(seg, 30_000, &[9; 20_000]).unwrap();
    let dest = anon(&mut net, 1, 40_000);
    let now = net.now;
    let op = net.nodes[1].mem_read(now, &h, 30_000, 20_000, (dest, 5_000), false).unwrap();
    assert!(net.nodes[1].mem_pending(op));
    net.settle();
    assert_eq!(finish(&mut net, 1, op), Ok(MemOutcome::Read));
    assert_eq!(bytes_of(&net, 1, dest, 5_000, 20_000), vec![9; 20_000]);
    assert_eq!(bytes_of(&net, 1, dest, 0, 5_000), vec![0; 5_000], "nothing outside the destination range");
    assert_eq!(net.nodes[1].mem_poll(op), None, "collected once");

    // CAS-II: success stores the value and the nonce; the answer goes to the destination too.
    let cas = Cas { expect: 0, new: 41, nonce: 0xabc };
    let op = net.nodes[1].mem_cas(now, &h, 64, cas, (dest, 8), false).unwrap();
    net.settle();
    let a = CasAnswer { value: 0, nonce: 0xabc };
    assert_eq!(finish(&mut net, 1, op), Ok(MemOutcome::Cas(a)));
    assert_eq!(bytes_of(&net, 1, dest, 8, 8), a.to_bytes());
    assert_eq!(bytes_of(&net, 0, seg, 64, 8), CasAnswer { value: 41, nonce: 0xabc }.to_bytes());
    // Failure changes nothing and reports the value and the last swapper's nonce.
    let op = net.nodes[1].mem_cas(now, &h, 64, Cas { expect: 0, new: 1, nonce: 0xdef }, (dest, 8), false).unwrap();
    net.settle();
    assert_eq!(finish(&mut net, 1, op), Ok(MemOutcome::Cas(CasAnswer { value: 41, nonce: 0xabc })));
    assert_eq!(bytes_of(&net, 0, seg, 64, 8), CasAnswer { value: 41, nonce: 0xabc }.to_bytes());
    let s = net.stats(0);
    assert_eq!((s.rmem_reads_served, s.rmem_cas_served, s.rmem_imports_served), (1, 2, 1));
    assert_eq!(net.stats(1).rmem_ops_done, 4);
    assert_eq!(net.stats(1).rmem_ops_pending, 0);
}

#[test]
fn cas_retry_with_the_same_nonce_after_a_lost_answer() {
    let mut net = Net::new(2);
    export(&mut net, 64, rw());
    let h = import(&mut net, 1, Access::READ_WRITE).unwrap();
    let dest = anon(&mut net, 1, 8);
    // Lose the first answer.
    let mut dropped = false;
    net.filter = Some(Box::new(move |from, _, bytes| {
        let answer = vipc_wire::parse(bytes, None).is_ok_and(|p| p.header.flags.has(Flags::ANSWER));
        if from == 0 && answer && !dropped {
            dropped = true;
            return 0;
        }
        1
    }));
    let cas = Cas { expect: 5, new: 6, nonce: 77 };
    net.nodes[0].segment_write(Descriptor { index: 0, generation: 1 }, 0, &[0, 0, 0, 5, 0, 0, 0, 0]).unwrap();
    let now = net.now;
    let op = net.nodes[1].mem_cas(now, &h, 0, cas, (dest, 0), false).unwrap();
    net.settle();
    assert_eq!(finish(&mut net, 1, op), Err(Error::Timeout(Pid::new(1, 0))));
    assert_eq!(net.stats(1).rmem_timeouts, 1);
    // The caller retries with the same nonce: the swap already happened, the
    // answer shows its own nonce and the new value — it succeeded.
    let now = net.now;
    let op = net.nodes[1].mem_cas(now, &h, 0, cas, (dest, 0), false).unwrap();
    net.settle();
    assert_eq!(finish(&mut net, 1, op), Ok(MemOutcome::Cas(CasAnswer { value: 6, nonce: 77 })));
}

#[test]
fn stale_generation_is_refused_after_unexport() {
    let mut net = Net::with(2, |c| c.rmem_max_segments = 1);
    let seg = export(&mut net, 64, rw());
    let h = import(&mut net, 1, Access::READ_WRITE).unwrap();
    net.nodes[0].unexport_segment(seg).unwrap();
    assert_eq!(net.nodes[0].unexport_segment(seg), Err(Error::NoSuchSegment));
    // The slot is reused by the next export, with another generation.
    let again = net.nodes[0].export_segment(Some([1; 16]), 64, rw()).unwrap();
    assert_eq!((again.index, again.generation), (seg.index, seg.generation + 1));
    net.nodes[1].mem_write(&h, 0, &[1; 8], false).unwrap();
    net.settle();
    assert_eq!(bytes_of(&net, 0, again, 0, 8), [0; 8], "a stale handle never writes the new segment");
    assert_eq!(refused(&net, 0, Refusal::UnknownSegment), 1);
    let dest = anon(&mut net, 1, 64);
    let now = net.now;
    let op = net.nodes[1].mem_read(now, &h, 0, 8, (dest, 0), false).unwrap();
    net.settle();
    assert_eq!(net.nodes[1].mem_poll(op), Some(Err(Error::Refused(Refusal::UnknownSegment))), "MemNack: fails fast");
    assert_eq!(refused(&net, 0, Refusal::UnknownSegment), 2);
    assert_eq!(net.stats(0).sent(PacketType::MemNack), 1);
}

#[test]
fn out_of_range_and_no_access_are_refused_by_the_owner() {
    let mut net = Net::new(2);
    let seg = export(&mut net, 64, SegmentOptions { access: Access::READ, ..Default::default() });
    let h = import(&mut net, 1, Access::READ).unwrap();
    assert_eq!(import(&mut net, 1, Access::READ_WRITE), Err(Error::Refused(Refusal::NoAccess)));
    // The requester checks what it knows...
    assert!(matches!(net.nodes[1].mem_write(&h, 0, &[1], false), Err(Error::NoAccess("write"))));
    let dest = anon(&mut net, 1, 256);
    let now = net.now;
    assert!(matches!(net.nodes[1].mem_read(now, &h, 60, 8, (dest, 0), false), Err(Error::OutOfSegment { .. })));
    // ...and the owner checks again whatever a requester claims.
    let forged = Imported { size: 1 << 20, access: Access::READ_WRITE, ..h };
    net.nodes[1].mem_write(&forged, 0, &[1; 4], false).unwrap();
    net.settle();
    assert_eq!(refused(&net, 0, Refusal::NoAccess), 2, "the refused import and the write");
    assert_eq!(bytes_of(&net, 0, seg, 0, 4), [0; 4]);
    let op = net.nodes[1].mem_read(now, &forged, 60, 8, (dest, 0), false).unwrap();
    net.settle();
    assert_eq!(net.nodes[1].mem_poll(op), Some(Err(Error::Refused(Refusal::OutOfRange))));
    raw(
        &mut net,
        1,
        PacketType::MemRead,
        |h| ReadFields { source: seg, offset: u32::MAX - 3, len: 8, dest, dest_offset: 0, token: 0 }.put(h),
        &[],
    );
    assert_eq!(refused(&net, 0, Refusal::OutOfRange), 2, "no wrap-around");
    let op = net.nodes[1].mem_cas(now, &forged, 0, Cas { expect: 0, new: 1, nonce: 1 }, (dest, 0), false).unwrap();
    net.settle();
    assert_eq!(net.nodes[1].mem_poll(op), Some(Err(Error::Refused(Refusal::NoAccess))), "CAS needs write access");
    assert_eq!(refused(&net, 0, Refusal::OutOfRange), 2);
}

#[test]
fn hosts_outside_the_protection_group_are_refused() {
    let mut net = Net::new(3);
    let opts = SegmentOptions { access: Access::READ_WRITE, protection: ProtectionGroup::Hosts(vec![3]), ..rw() };
    let seg = export(&mut net, 64, opts);
    assert_eq!(import(&mut net, 1, Access::READ), Err(Error::Refused(Refusal::NotInGroup)));
    let h = import(&mut net, 2, Access::READ_WRITE).unwrap();
    // Host 2 uses host 3's handle: refused all the same.
    net.nodes[1].mem_write(&h, 0, &[7; 8], false).unwrap();
    let dest = anon(&mut net, 1, 8);
    let now = net.now;
    let op = net.nodes[1].mem_read(now, &h, 0, 8, (dest, 0), false).unwrap();
    net.settle();
    assert_eq!(net.nodes[1].mem_poll(op), Some(Err(Error::Refused(Refusal::NotInGroup))));
    assert_eq!(bytes_of(&net, 0, seg, 0, 8), [0; 8]);
    assert_eq!(refused(&net, 0, Refusal::NotInGroup), 3);
    // Host 3 may.
    net.nodes[2].mem_write(&h, 0, &[7; 8], false).unwrap();
    net.settle();
    assert_eq!(bytes_of(&net, 0, seg, 0, 8), [7; 8]);
}

#[test]
fn unknown_names_time_out_and_anonymous_segments_are_never_importable() {
    let mut net = Net::new(2);
    let a = anon(&mut net, 0, 64);
    let now = net.now;
    let op = net.nodes[1].mem_import(now, [3; 16], Access::READ).unwrap();
    net.settle();
    assert_eq!(finish(&mut net, 1, op), Err(Error::Refused(Refusal::UnknownName)));
    assert!(refused(&net, 0, Refusal::UnknownName) >= 2, "the broadcast is repeated every T_r");
    assert!(net.stats(1).sent(PacketType::MemImport) >= 2);
    // An anonymous segment, addressed directly, grants nothing.
    let forged = Imported { host: 1, desc: a, size: 64, access: Access::READ_WRITE };
    net.nodes[1].mem_write(&forged, 0, &[1; 8], false).unwrap();
    let dest = anon(&mut net, 1, 8);
    let now = net.now;
    let op = net.nodes[1].mem_read(now, &forged, 0, 8, (dest, 0), false).unwrap();
    net.settle();
    assert_eq!(net.nodes[1].mem_poll(op), Some(Err(Error::Refused(Refusal::NoAccess))));
    assert_eq!(bytes_of(&net, 0, a, 0, 8), [0; 8]);
}

#[test]
fn answers_that_match_no_operation_are_not_written() {
    let mut net = Net::new(2);
    let a = anon(&mut net, 0, 64);
    let stray = net.stats(0).stray;
    // An ANSWER MemWrite with no pending operation of that seq.
    raw(
        &mut net,
        1,
        PacketType::MemWrite,
        |h| {
            h.flags = Flags(Flags::ANSWER);
            WriteFields { dest: a, offset: 0, total: 8 }.put(h);
        },
        &[1; 8],
    );
    assert_eq!(bytes_of(&net, 0, a, 0, 8), [0; 8]);
    assert_eq!(net.stats(0).stray, stray + 1);
    // A pending read to host 2: an answer from host 3, or outside the range, is not written either.
    let mut net = Net::new(3);
    let seg = net.nodes[1].export_segment(Some(NAME), 64, rw()).unwrap();
    let h = import(&mut net, 0, Access::READ).unwrap();
    assert_eq!(h.desc, seg);
    let dest = anon(&mut net, 0, 64);
    net.filter = Some(Box::new(|_, _, _| 0)); // the real answer is lost
    let now = net.now;
    let op = net.nodes[0].mem_read(now, &h, 0, 8, (dest, 16), false).unwrap();
    net.settle();
    net.filter = None;
    let seq = op.0;
    for (from, offset) in [(2, 16), (1, 20), (1, 8)] {
        raw(
            &mut net,
            from,
            PacketType::MemWrite,
            |h| {
                h.seq = seq;
                h.flags = Flags(Flags::ANSWER);
                WriteFields { dest, offset, total: 8 }.put(h);
            },
            &[5; 8],
        );
    }
    assert_eq!(bytes_of(&net, 0, dest, 0, 64), vec![0; 64]);
    assert!(net.nodes[0].mem_pending(op));
    raw(
        &mut net,
        1,
        PacketType::MemWrite,
        |h| {
            h.seq = seq;
            h.flags = Flags(Flags::ANSWER);
            WriteFields { dest, offset: 16, total: 8 }.put(h);
        },
        &[5; 8],
    );
    assert_eq!(net.nodes[0].mem_poll(op), Some(Ok(MemOutcome::Read)));
    assert_eq!(bytes_of(&net, 0, dest, 16, 8), [5; 8]);
}

#[test]
fn misaligned_cas_and_malformed_writev_are_refused() {
    let mut net = Net::new(2);
    let seg = export(&mut net, 64, rw());
    let h = import(&mut net, 1, Access::READ_WRITE).unwrap();
    let dest = anon(&mut net, 1, 8);
    let now = net.now;
    let cas = Cas { expect: 0, new: 1, nonce: 1 };
    assert_eq!(net.nodes[1].mem_cas(now, &h, 4, cas, (dest, 0), false), Err(Error::Refused(Refusal::Misaligned)));
    raw(
        &mut net,
        1,
        PacketType::MemCas,
        |h| CasFields { target: seg, offset: 4, expect: 0, new: 1, nonce: 1, dest, dest_offset: 0 }.put(h),
        &[],
    );
    assert_eq!(refused(&net, 0, Refusal::Misaligned), 1);
    assert_eq!(bytes_of(&net, 0, seg, 0, 16), vec![0; 16]);
    for (stride, count, elem, len) in [(4, 2, 8, 16), (8, 2, 0, 0), (8, 3, 4, 8)] {
        raw(
            &mut net,
            1,
            PacketType::MemWritev,
            |h| WritevFields { dest: seg, base: 0, stride, count, elem, total: len }.put(h),
            &vec![1; len as usize],
        );
    }
    assert_eq!(refused(&net, 0, Refusal::Malformed), 3);
    assert_eq!(bytes_of(&net, 0, seg, 0, 64), vec![0; 64]);
    // A zero-length read is malformed too (answered with MemNack).
    raw(
        &mut net,
        1,
        PacketType::MemRead,
        |h| ReadFields { source: seg, offset: 0, len: 0, dest, dest_offset: 0, token: 0 }.put(h),
        &[],
    );
    assert_eq!(refused(&net, 0, Refusal::Malformed), 4);
    assert_eq!(net.stats(0).sent(PacketType::MemNack), 2);
}

#[test]
fn writev_scatters_elements_across_packets() {
    let mut net = Net::new(2);
    let seg = export(&mut net, 1 << 20, rw());
    let h = import(&mut net, 1, Access::READ_WRITE).unwrap();
    // A column of a 1000 × 1000-byte matrix... as 1000 elements of 100 bytes, 1000 apart.
    let data: Vec<u8> = (0..1000u32).flat_map(|i| [i as u8; 100]).collect();
    net.nodes[1].mem_writev(&h, 7, Strided { stride: 1000, elem: 100 }, &data, false).unwrap();
    net.settle();
    assert_eq!(net.stats(1).sent(PacketType::MemWritev), 72, "14 elements of 100 bytes per 1,472-byte packet");
    for i in 0..1000u32 {
        assert_eq!(bytes_of(&net, 0, seg, 7 + i * 1000, 100), vec![i as u8; 100]);
        if i < 999 {
            assert_eq!(bytes_of(&net, 0, seg, 7 + i * 1000 + 100, 900), vec![0; 900], "gaps untouched");
        }
    }
    assert!(matches!(
        net.nodes[1].mem_writev(&h, 0, Strided { stride: 50, elem: 100 }, &data, false),
        Err(Error::Refused(Refusal::Malformed))
    ));
    assert!(matches!(
        net.nodes[1].mem_writev(&h, 100, Strided { stride: 1100, elem: 100 }, &data, false),
        Err(Error::OutOfSegment { .. })
    ));
}

#[test]
fn notification_policies_fill_the_control_channel() {
    let mut net = Net::new(2);
    let never = net.nodes[0].export_segment(Some([1; 16]), 64, rw()).unwrap();
    let always = net.nodes[0].export_segment(Some([2; 16]), 64, SegmentOptions { notify: Notify::Always, ..rw() });
    let cond = net.nodes[0].export_segment(Some([3; 16]), 64, SegmentOptions { notify: Notify::Conditional, ..rw() });
    let (always, cond) = (always.unwrap(), cond.unwrap());
    let dest = anon(&mut net, 1, 8);
    for (seg, name) in [(never, [1; 16]), (always, [2; 16]), (cond, [3; 16])] {
        let now = net.now;
        let op = net.nodes[1].mem_import(now, name, Access::READ_WRITE).unwrap();
        net.settle();
        let Ok(MemOutcome::Import(h)) = finish(&mut net, 1, op) else { panic!() };
        assert_eq!(h.desc, seg);
        net.nodes[1].mem_write(&h, 8, &[1; 4], false).unwrap();
        net.nodes[1].mem_write(&h, 16, &[1; 4], true).unwrap();
        let op = net.nodes[1].mem_read(now, &h, 0, 8, (dest, 0), true).unwrap();
        net.settle();
        finish(&mut net, 1, op).unwrap();
    }
    assert_eq!(net.nodes[0].segment_poll_control(never), Ok(None));
    let mut got = Vec::new();
    while let Some(r) = net.nodes[0].segment_poll_control(always).unwrap() {
        got.push((r.op, r.from, r.offset, r.len));
    }
    assert_eq!(got, [(MemOp::Write, 2, 8, 4), (MemOp::Write, 2, 16, 4), (MemOp::Read, 2, 0, 8)]);
    let mut got = Vec::new();
    while let Some(r) = net.nodes[0].segment_poll_control(cond).unwrap() {
        got.push((r.op, r.offset));
    }
    assert_eq!(got, [(MemOp::Write, 16), (MemOp::Read, 0)], "only requests with the notify bit");
    let notices = net.events.iter().filter(|(n, e)| *n == 0 && matches!(e, Event::MemNotify(_))).count();
    assert_eq!(notices, 2, "one notice when each channel turns non-empty");
    assert_eq!(net.stats(0).rmem_notifications, 5);
}

#[test]
fn writes_to_inhibited_ranges_go_to_the_data_channel() {
    let mut net = Net::new(2);
    let seg = export(&mut net, 256, rw());
    let h = import(&mut net, 1, Access::READ_WRITE).unwrap();
    net.nodes[0].segment_set_inhibit(seg, 100, 50, true).unwrap();
    net.nodes[1].mem_write(&h, 0, &[1; 10], false).unwrap(); // applied
    net.nodes[1].mem_write(&h, 140, &[2; 20], false).unwrap(); // overlaps: queued whole
    net.nodes[1].mem_writev(&h, 90, Strided { stride: 20, elem: 5 }, &[3; 10], false).unwrap(); // touches 110..115
    net.settle();
    assert_eq!(bytes_of(&net, 0, seg, 0, 10), [1; 10]);
    assert_eq!(bytes_of(&net, 0, seg, 90, 70), vec![0; 70]);
    let r = net.nodes[0].segment_poll_data(seg).unwrap().unwrap();
    assert_eq!((r.from, r.offset, r.data.len()), (2, 140, 20));
    let v = net.nodes[0].segment_poll_data(seg).unwrap().unwrap();
    assert_eq!(v.pieces().map(|(o, d)| (o, d.to_vec())).collect::<Vec<_>>(), [(90, vec![3; 5]), (110, vec![3; 5])]);
    assert_eq!(net.nodes[0].segment_poll_data(seg), Ok(None));
    assert_eq!(net.stats(0).rmem_queued, 2);
    // A CAS-II there is refused: it cannot wait in a queue.
    let dest = anon(&mut net, 1, 8);
    let now = net.now;
    let op = net.nodes[1].mem_cas(now, &h, 128, Cas { expect: 0, new: 1, nonce: 1 }, (dest, 0), false).unwrap();
    net.settle();
    assert_eq!(net.nodes[1].mem_poll(op), Some(Err(Error::Refused(Refusal::WriteInhibited))));
    // Reads are not inhibited; lifting inhibition applies writes again.
    let op = net.nodes[1].mem_read(now, &h, 100, 8, (dest, 0), false).unwrap();
    net.settle();
    assert_eq!(net.nodes[1].mem_poll(op), Some(Ok(MemOutcome::Read)));
    net.nodes[0].segment_set_inhibit(seg, 0, 256, false).unwrap();
    net.nodes[1].mem_write(&h, 140, &[2; 20], false).unwrap();
    net.settle();
    assert_eq!(bytes_of(&net, 0, seg, 140, 20), [2; 20]);
    // A full data channel drops (and counts) what does not fit.
    let mut net = Net::with(2, |c| c.rmem_data_queue = 100);
    let seg = export(&mut net, 256, rw());
    let h = import(&mut net, 1, Access::READ_WRITE).unwrap();
    net.nodes[0].segment_set_inhibit(seg, 0, 256, true).unwrap();
    for _ in 0..3 {
        net.nodes[1].mem_write(&h, 0, &[1; 40], false).unwrap();
    }
    net.settle();
    assert_eq!((net.stats(0).rmem_queued, net.stats(0).rmem_data_dropped), (3, 1));
}

/// A stream of reads keeps one timer entry, not one per read (each left
/// stale a few µs later, popped by the thousand under the node's lock); a
/// read started while an earlier one is pending still times out at its own
/// deadline.
#[test]
fn reads_share_one_timer_entry_and_each_times_out_at_its_own_deadline() {
    let mut net = Net::with(2, |c| c.rmem_timeout = Duration::from_millis(50));
    export(&mut net, 64, rw());
    let h = import(&mut net, 1, Access::READ).unwrap();
    let dest = anon(&mut net, 1, 64);
    let before = net.stats(1).timer_entries;
    for _ in 0..1000 {
        let now = net.now;
        let op = net.nodes[1].mem_read(now, &h, 0, 8, (dest, 0), false).unwrap();
        net.settle();
        assert_eq!(net.nodes[1].mem_poll(op), Some(Ok(MemOutcome::Read)));
    }
    assert!(net.stats(1).timer_entries <= before + 1, "{} entries", net.stats(1).timer_entries);
    // No answers any more: two reads 20 ms apart fail 50 ms after each began.
    net.filter = Some(Box::new(|from, _, _| usize::from(from != 0)));
    let now = net.now;
    let first = net.nodes[1].mem_read(now, &h, 0, 8, (dest, 0), false).unwrap();
    net.advance(Duration::from_millis(20));
    let now = net.now;
    let second = net.nodes[1].mem_read(now, &h, 0, 8, (dest, 0), false).unwrap();
    net.advance(Duration::from_millis(31));
    assert_eq!(net.nodes[1].mem_poll(first), Some(Err(Error::Timeout(Pid::new(1, 0)))));
    assert!(net.nodes[1].mem_pending(second), "not at the first one's deadline");
    net.advance(Duration::from_millis(18));
    assert!(net.nodes[1].mem_pending(second));
    net.advance(Duration::from_millis(2));
    assert_eq!(net.nodes[1].mem_poll(second), Some(Err(Error::Timeout(Pid::new(1, 0)))));
    assert_eq!(net.stats(1).rmem_ops_pending, 0);
}

#[test]
fn lost_reads_time_out_and_late_answers_are_dropped() {
    let mut net = Net::with(2, |c| c.rmem_timeout = Duration::from_millis(50));
    export(&mut net, 64, rw());
    let h = import(&mut net, 1, Access::READ).unwrap();
    let dest = anon(&mut net, 1, 64);
    net.filter = Some(Box::new(|from, _, _| usize::from(from != 0)));
    let now = net.now;
    let op = net.nodes[1].mem_read(now, &h, 0, 64, (dest, 0), false).unwrap();
    net.advance(Duration::from_millis(49));
    assert!(net.nodes[1].mem_pending(op));
    net.advance(Duration::from_millis(2));
    assert_eq!(net.nodes[1].mem_poll(op), Some(Err(Error::Timeout(Pid::new(1, 0)))));
    // An operation forgotten before it finishes leaves nothing behind.
    net.filter = None;
    let now = net.now;
    let op = net.nodes[1].mem_read(now, &h, 0, 64, (dest, 0), false).unwrap();
    net.nodes[1].mem_forget(op);
    let stray = net.stats(1).stray;
    net.settle();
    assert_eq!(net.stats(1).stray, stray + 1);
    assert_eq!(net.stats(1).rmem_ops_pending, 0);
}

#[test]
fn own_segments_take_the_local_path() {
    let mut net = Net::new(1);
    let seg = export(&mut net, 64, SegmentOptions { notify: Notify::Always, ..rw() });
    let dest = anon(&mut net, 0, 64);
    let h = import(&mut net, 0, Access::READ_WRITE).unwrap();
    assert_eq!(h.host, 1);
    net.nodes[0].mem_write(&h, 0, &[4; 8], false).unwrap();
    let now = net.now;
    let op = net.nodes[0].mem_read(now, &h, 0, 8, (dest, 8), false).unwrap();
    assert_eq!(net.nodes[0].mem_poll(op), Some(Ok(MemOutcome::Read)));
    assert_eq!(bytes_of(&net, 0, dest, 8, 8), [4; 8]);
    let op = net.nodes[0].mem_cas(now, &h, 8, Cas { expect: 0, new: 3, nonce: 9 }, (dest, 0), false).unwrap();
    assert_eq!(net.nodes[0].mem_poll(op), Some(Ok(MemOutcome::Cas(CasAnswer { value: 0, nonce: 9 }))));
    assert_eq!(net.stats(0).ipc_sent(), 0, "no packet");
    assert_eq!(net.nodes[0].segment_poll_control(seg).unwrap().map(|r| r.op), Some(MemOp::Write));
    // Refusals are returned at once.
    net.nodes[0].segment_set_inhibit(seg, 8, 8, true).unwrap();
    let op = net.nodes[0].mem_cas(now, &h, 8, Cas { expect: 3, new: 4, nonce: 9 }, (dest, 0), false).unwrap();
    assert_eq!(net.nodes[0].mem_poll(op), Some(Err(Error::Refused(Refusal::WriteInhibited))));
    net.nodes[0].unexport_segment(seg).unwrap();
    assert_eq!(net.nodes[0].mem_write(&h, 0, &[1], false), Err(Error::Refused(Refusal::UnknownSegment)));
}

#[test]
fn limits_and_misuse_are_typed_errors() {
    let mut net = Net::with(2, |c| {
        c.rmem_max_segments = 2;
        c.rmem_max_bytes = 1000;
        c.rmem_max_ops = 1;
    });
    let e = &mut net.nodes[0];
    assert!(matches!(e.export_segment(None, 0, rw()), Err(Error::TooLarge { .. })));
    assert!(matches!(e.export_segment(None, 1001, rw()), Err(Error::Limit(_))));
    let a = e.export_segment(Some(NAME), 10, rw()).unwrap();
    assert!(matches!(e.export_segment(Some(NAME), 10, rw()), Err(Error::Unsupported(_))));
    let b = e.export_segment(None, 10, rw()).unwrap();
    assert!(matches!(e.export_segment(None, 10, rw()), Err(Error::Limit(_))));
    assert!(matches!(e.segment_write(a, 5, &[0; 6]), Err(Error::OutOfSegment { .. })));
    assert!(matches!(e.segment_read(a, u32::MAX, &mut [0; 2]), Err(Error::OutOfSegment { .. })));
    assert!(matches!(e.segment_set_inhibit(a, 5, 6, true), Err(Error::OutOfSegment { .. })));
    e.unexport_segment(b).unwrap();
    assert_eq!(e.segment_poll_control(b), Err(Error::NoSuchSegment));
    let h = import(&mut net, 1, Access::READ).unwrap();
    let now = net.now;
    let dest = anon(&mut net, 1, 8);
    assert_eq!(net.nodes[1].mem_read(now, &h, 0, 0, (dest, 0), false), Err(Error::Refused(Refusal::Malformed)));
    assert!(matches!(net.nodes[1].mem_read(now, &h, 0, 8, (dest, 1), false), Err(Error::OutOfSegment { .. })));
    let gone = Descriptor { index: 9, generation: 1 };
    assert_eq!(net.nodes[1].mem_read(now, &h, 0, 8, (gone, 0), false), Err(Error::NoSuchSegment));
    let _op = net.nodes[1].mem_read(now, &h, 0, 8, (dest, 0), false).unwrap();
    assert!(matches!(net.nodes[1].mem_read(now, &h, 0, 8, (dest, 0), false), Err(Error::Limit(_))));
}

/// Deterministic junk: remote-memory packets with random fields against an
/// engine holding segments never panic and never write outside a segment.
#[test]
fn random_remote_memory_packets_never_panic() {
    let mut net = Net::new(2);
    let seg = export(&mut net, 100, SegmentOptions { notify: Notify::Always, ..rw() });
    let a = anon(&mut net, 0, 50);
    net.nodes[0].segment_set_inhibit(seg, 40, 10, true).unwrap();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let types = &PacketType::ALL[PacketType::MemWrite.index()..];
    assert_eq!(types.len(), 7);
    for _ in 0..20_000 {
        let r = next();
        let ptype = types[(r % 7) as usize];
        let small = |v: u64| if v % 3 == 0 { v as u32 } else { (v % 130) as u32 };
        let desc = match (r >> 8) % 4 {
            0 => seg.to_u32(),
            1 => a.to_u32(),
            2 => Descriptor { index: seg.index, generation: seg.generation + 1 }.to_u32(),
            _ => next() as u32,
        };
        let (ra, rb, rc) = (next(), next(), next());
        let len = (next() % 200) as usize;
        raw(
            &mut net,
            1,
            ptype,
            |h| {
                h.flags = Flags((r >> 16) as u16 & (Flags::NOTIFY | Flags::ANSWER));
                h.local_addr = desc;
                h.remote_addr = small(ra);
                h.total_len = small(rb);
                for (i, b) in rc.to_be_bytes().iter().enumerate() {
                    h.message[i * 2] = *b % 16;
                }
                h.message[16] = (r >> 40) as u8;
            },
            &vec![0xee; len],
        );
    }
    let mut buf = [0; 100];
    net.nodes[0].segment_read(seg, 0, &mut buf).unwrap();
    assert!(buf[40..50].iter().all(|b| *b == 0), "the inhibited range was never written");
    let s = net.stats(0);
    assert!(s.rmem_writes_applied > 0 && s.rmem_refused.iter().sum::<u64>() > 1000);
}

/// A block write's packets are built in buffers the runtime handed back
/// (a fresh 64 KB allocation faults its pages in again once the allocator
/// has returned them: a 1 MiB write went three times slower).
#[test]
fn block_writes_are_encoded_into_recycled_buffers() {
    let mut net = Net::with(2, |c| c.max_packet = vipc_wire::MAX_DATAGRAM);
    export(&mut net, 1 << 20, rw());
    let h = import(&mut net, 1, Access::READ_WRITE).unwrap();
    let spare = Vec::with_capacity(vipc_wire::MAX_DATAGRAM);
    let at = spare.as_ptr();
    net.nodes[1].recycle(spare);
    net.nodes[1].mem_write(&h, 0, &vec![3; 200_000], false).unwrap();
    let first = net.nodes[1].poll_transmit().expect("a packet");
    assert_eq!(first.bytes.as_ptr(), at, "the first packet was built in the recycled buffer");
    assert!(first.bytes.len() > 60_000, "packets as large as the path allows");
}

/// A write whose data stay in the caller's buffer: the headers the engine
/// returns, sent with those bytes appended, are packets the owner applies
/// like any write; where the data must be in the packet (this node's own
/// segment, a keyed cluster) or the owner's address is unknown, it declines.
#[test]
fn writes_from_the_callers_buffer_land_like_queued_writes() {
    let mut net = Net::with(2, |c| c.max_packet = vipc_wire::MAX_DATAGRAM);
    let seg = export(&mut net, 1 << 20, rw());
    let h = import(&mut net, 1, Access::READ_WRITE).unwrap();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 13 % 251) as u8).collect();
    let packets = net.nodes[1].mem_write_headers(&h, 1000, data.len(), false).unwrap().expect("a remote write");
    assert_eq!(packets.len(), 4, "200,000 bytes in datagrams of up to 65,435 data bytes");
    assert!(net.nodes[1].poll_transmit().is_none(), "nothing queued: the caller sends");
    let mut covered = 0;
    for p in &packets {
        assert_eq!((p.to, p.data.start), (addr(0), covered), "in order, to the owner");
        covered = p.data.end;
        let mut datagram = p.head.clone();
        datagram.extend_from_slice(&data[p.data.clone()]);
        let now = net.now;
        net.nodes[0].handle_datagram(now, addr(1), &datagram);
    }
    assert_eq!(covered, data.len());
    assert_eq!(bytes_of(&net, 0, seg, 1000, data.len()), data);
    assert_eq!(net.stats(0).rmem_writes_applied, 4);
    assert_eq!((net.stats(1).rmem_writes, net.stats(1).sent(PacketType::MemWrite)), (1, 4));
    // Refused as a queued write would be: out of range.
    assert!(net.nodes[1].mem_write_headers(&h, (1 << 20) - 10, 11, false).is_err());
    // Declined: the owner's own segment.
    let own = import(&mut net, 0, Access::READ_WRITE).unwrap();
    assert_eq!(net.nodes[0].mem_write_headers(&own, 0, 100_000, false), Ok(None));
    // Declined with a key: the MAC covers the data.
    let mut keyed = Net::with(2, |c| c.key = Some(AuthKey::from_bytes([7; 32])));
    keyed.nodes[0].export_segment(Some(NAME), 1 << 20, rw()).unwrap();
    let h = import(&mut keyed, 1, Access::READ_WRITE).unwrap();
    assert_eq!(keyed.nodes[1].mem_write_headers(&h, 0, 100_000, false), Ok(None));
}

/// Node 1's read request for `len` bytes at 0 into `dest`, handed to node 0
/// (its answer is left in node 0's queue).
fn serve_read(net: &mut Net, h: &Imported, len: u32, dest: SegmentId) -> MemOpId {
    let now = net.now;
    let op = net.nodes[1].mem_read(now, h, 0, len, (dest, 0), false).unwrap();
    let request = net.nodes[1].poll_transmit().expect("the read request");
    net.nodes[0].handle_datagram(now, addr(1), &request.bytes);
    op
}

/// A large read answer leaves split — headers, the data still in the
/// segment — and carries the bytes of the moment the read was served: a
/// write to the segment before it is taken joins it first. Small answers
/// and keyed clusters are encoded whole.
#[test]
fn large_read_answers_leave_split_and_carry_the_bytes_served() {
    let mut net = Net::with(2, |c| c.max_packet = vipc_wire::MAX_DATAGRAM);
    let seg = export(&mut net, 1 << 20, rw());
    let h = import(&mut net, 1, Access::READ_WRITE).unwrap();
    let dest = anon(&mut net, 1, 1 << 20);
    prove_address(&mut net, &h, dest);
    let (old, new) = (vec![1u8; 150_000], vec![2u8; 150_000]);
    net.nodes[0].segment_write(seg, 0, &old).unwrap();

    // Served, then overwritten before it leaves: joined first, old bytes.
    serve_read(&mut net, &h, 150_000, dest);
    net.nodes[0].segment_write(seg, 0, &new).unwrap();
    let mut carried = Vec::new();
    while let Some(t) = net.nodes[0].poll_transmit_split() {
        assert!(t.segment.is_none(), "joined before the write");
        carried.extend_from_slice(&t.bytes[vipc_wire::HEADER_LEN..]);
    }
    assert!(carried == old, "the answer carries the bytes of the moment it was served");

    // The same when a remote write changes it (node 1 writes the old bytes back).
    serve_read(&mut net, &h, 150_000, dest);
    let now = net.now;
    net.nodes[1].mem_write(&h, 0, &old, false).unwrap();
    while let Some(w) = net.nodes[1].poll_transmit() {
        net.nodes[0].handle_datagram(now, addr(1), &w.bytes);
    }
    let carried: Vec<u8> = std::iter::from_fn(|| net.nodes[0].poll_transmit_split())
        .flat_map(|t| t.bytes[vipc_wire::HEADER_LEN..].to_vec())
        .collect();
    assert!(carried == new, "the answer carries the bytes of the moment it was served");
    net.nodes[0].segment_write(seg, 0, &new).unwrap();

    // Taken before anything changes: split, the data named in the segment.
    let op = serve_read(&mut net, &h, 150_000, dest);
    let mut parts = Vec::new();
    while let Some(mut t) = net.nodes[0].poll_transmit_split() {
        let s = t.segment.expect("a split answer");
        assert_eq!(t.bytes.len(), vipc_wire::HEADER_LEN);
        assert!(net.nodes[0].segment_slice(&s) == Some(&new[s.offset..s.offset + s.len]));
        assert!(net.nodes[0].join(&mut t) && t.segment.is_none());
        parts.push(t.bytes);
    }
    assert_eq!(parts.len(), 3, "150,000 bytes in datagrams of up to 65,419");
    for p in &parts {
        let now = net.now;
        net.nodes[1].handle_datagram(now, addr(0), p);
    }
    assert_eq!(net.nodes[1].mem_poll(op), Some(Ok(MemOutcome::Read)));
    assert!(bytes_of(&net, 1, dest, 0, 150_000) == new);

    // Unexported before it leaves: joined, still sent.
    serve_read(&mut net, &h, 150_000, dest);
    net.nodes[0].unexport_segment(seg).unwrap();
    let whole: Vec<Transmit> = std::iter::from_fn(|| net.nodes[0].poll_transmit_split()).collect();
    assert!(whole.len() == 3 && whole.iter().all(|t| t.segment.is_none() && t.bytes.len() > vipc_wire::HEADER_LEN));

    // Small answers are encoded whole.
    let seg = export(&mut net, 1 << 20, rw());
    let h = import(&mut net, 1, Access::READ).unwrap();
    let _ = seg;
    serve_read(&mut net, &h, 1000, dest);
    let t = net.nodes[0].poll_transmit_split().expect("the answer");
    assert!(t.segment.is_none() && t.bytes.len() == vipc_wire::HEADER_LEN + 1000);
}

/// Two nodes with datagrams of up to 64 KiB: node 0 exports 1 MiB (its
/// first 100,000 bytes 9s), node 1 imports it with `access` and has a 1 MiB
/// anonymous segment to read into.
fn read_setup(access: Access) -> (Net, Imported, SegmentId) {
    let mut net = Net::with(2, |c| c.max_packet = vipc_wire::MAX_DATAGRAM);
    let seg = export(&mut net, 1 << 20, rw());
    net.nodes[0].segment_write(seg, 0, &vec![9u8; 100_000]).unwrap();
    let h = import(&mut net, 1, access).unwrap();
    let dest = anon(&mut net, 1, 1 << 20);
    prove_address(&mut net, &h, dest);
    (net, h, dest)
}

/// A read of node 0's segment by node 1, settled: node 1 then holds node
/// 0's token for its address, which reads over [`TOKENLESS_READ_MAX`] carry.
fn prove_address(net: &mut Net, h: &Imported, dest: SegmentId) {
    let now = net.now;
    let op = net.nodes[1].mem_read(now, h, 0, 1000, (dest, 0), false).unwrap();
    net.settle();
    assert_eq!(finish(net, 1, op), Ok(MemOutcome::Read));
    assert_eq!(net.stats(1).rmem_token_retries, 1);
}

/// A 100,000-byte read served by node 0: the operation and its two answers, not yet delivered.
fn two_datagram_read(net: &mut Net, h: &Imported, dest: SegmentId) -> (MemOpId, Vec<Transmit>) {
    let op = serve_read(net, h, 100_000, dest);
    let answers: Vec<Transmit> = std::iter::from_fn(|| net.nodes[0].poll_transmit()).collect();
    assert_eq!(answers.len(), 2);
    (op, answers)
}

/// The runtime may borrow the memory of the anonymous segment the next
/// answer is expected in: the oldest pending read's first missing bytes,
/// with room for the header before them. While it is out, the owner's own
/// reads of that segment are refused (the runtime waits instead), answers
/// fed the ordinary way are dropped, and answers fed as lent say where their
/// data go. Nothing is lent when two operations answer into one segment.
#[test]
fn the_memory_an_answer_is_expected_in_is_lent_for_one_receive() {
    let (mut net, h, dest) = read_setup(Access::READ);
    assert!(net.nodes[1].mem_lend().is_none(), "no read pending");
    let (op, answers) = two_datagram_read(&mut net, &h, dest);

    let chunk = answers[0].bytes.len() - vipc_wire::HEADER_LEN;
    let loan = net.nodes[1].mem_lend().expect("the read's destination");
    // The segment's first byte: a header fits before it, and a datagram
    // received there starts half a page from where a page starts.
    let head = loan.at;
    assert_eq!((loan.id, loan.len), (dest, chunk));
    assert!(head >= vipc_wire::HEADER_LEN && loan.mem.len() >= head + (1 << 20));
    assert_eq!((loan.mem.as_ptr() as usize + head - vipc_wire::HEADER_LEN) % 4096, vipc_engine::RECEIVE_PAGE_OFFSET);
    assert!(net.nodes[1].segment_lent(dest) && net.nodes[1].mem_lend().is_none());
    let mut b = [0u8; 4];
    assert_eq!(net.nodes[1].segment_read(dest, 0, &mut b), Err(Error::SegmentBusy));
    // Fed the ordinary way, an answer into lent memory is dropped.
    let now = net.now;
    net.nodes[1].handle_datagram(now, addr(0), &answers[1].bytes);
    assert!(net.nodes[1].mem_pending(op));
    // Fed as lent: the second answer's data go after the first's.
    let placed = net.nodes[1].handle_datagram_lent(now, addr(0), &answers[1].bytes);
    let data = answers[1].bytes.len() - vipc_wire::HEADER_LEN;
    assert_eq!(placed, Some((head + chunk, vipc_wire::HEADER_LEN..vipc_wire::HEADER_LEN + data)));
    net.nodes[1].mem_return(loan);
    assert!(!net.nodes[1].segment_lent(dest));

    // The next loan is the first answer's place; fed there, the read is done.
    let loan = net.nodes[1].mem_lend().expect("the first bytes are still missing");
    assert_eq!((loan.at, loan.len), (head, chunk));
    let placed = net.nodes[1].handle_datagram_lent(now, addr(0), &answers[0].bytes);
    assert_eq!(placed.map(|p| p.0), Some(head));
    net.nodes[1].mem_return(loan);
    assert_eq!(net.nodes[1].mem_poll(op), Some(Ok(MemOutcome::Read)));
    assert!(net.nodes[1].mem_lend().is_none(), "nothing pending");

    // Two reads into one segment, each long enough to be lent alone: nothing is lent.
    let now = net.now;
    net.nodes[1].mem_read(now, &h, 0, 20_000, (dest, 0), false).unwrap();
    net.nodes[1].mem_read(now, &h, 0, 20_000, (dest, 50_000), false).unwrap();
    assert!(net.nodes[1].mem_lend().is_none());
}

/// A read whose answer has partly arrived says so (the runtime polls for
/// the rest instead of sleeping); before its first answer, once done, and
/// for a CAS-II, it does not.
#[test]
fn a_read_whose_answer_is_partly_in_is_arriving() {
    let (mut net, h, dest) = read_setup(Access::READ_WRITE);
    let (op, answers) = two_datagram_read(&mut net, &h, dest);
    assert!(!net.nodes[1].mem_answer_arriving(op), "nothing has arrived");
    let now = net.now;
    net.nodes[1].handle_datagram(now, addr(0), &answers[1].bytes);
    assert!(net.nodes[1].mem_answer_arriving(op), "the second half is in, the first due");
    net.nodes[1].handle_datagram(now, addr(0), &answers[1].bytes);
    assert!(net.nodes[1].mem_answer_arriving(op), "a duplicate completes nothing");
    net.nodes[1].handle_datagram(now, addr(0), &answers[0].bytes);
    assert!(!net.nodes[1].mem_answer_arriving(op), "done");
    assert_eq!(net.nodes[1].mem_poll(op), Some(Ok(MemOutcome::Read)));
    assert!(!net.nodes[1].mem_answer_arriving(op), "collected");

    let now = net.now;
    let cas = net.nodes[1].mem_cas(now, &h, 0, Cas { expect: 0, new: 1, nonce: 2 }, (dest, 0), false).unwrap();
    assert!(!net.nodes[1].mem_answer_arriving(cas), "a CAS-II is answered in one datagram");
}

/// A read shorter than `rmem_lend_min` is copied from the receive buffer,
/// not received in place: nothing is lent for it, unless the limit is 0.
#[test]
fn a_short_read_borrows_no_memory() {
    for (lend_min, lent) in [(8 << 10, false), (0, true)] {
        let mut net = Net::with(2, |c| c.rmem_lend_min = lend_min);
        let seg = export(&mut net, 1 << 16, rw());
        net.nodes[0].segment_write(seg, 0, &[7u8; 8192]).unwrap();
        let h = import(&mut net, 1, Access::READ).unwrap();
        let dest = anon(&mut net, 1, 1 << 16);
        let now = net.now;
        net.nodes[1].mem_read(now, &h, 0, 8191, (dest, 0), false).unwrap();
        assert_eq!(net.nodes[1].mem_lend().is_some(), lent, "8191 bytes, limit {lend_min}");
    }
    let mut net = Net::with(2, |c| c.rmem_lend_min = 8 << 10);
    export(&mut net, 1 << 16, rw());
    let h = import(&mut net, 1, Access::READ).unwrap();
    let dest = anon(&mut net, 1, 1 << 16);
    let now = net.now;
    net.nodes[1].mem_read(now, &h, 0, 8192, (dest, 0), false).unwrap();
    assert!(net.nodes[1].mem_lend().is_some(), "a read of exactly the limit is lent");
    // The default, as documented: 8 KiB reads are copied (faster), 16 KiB lent.
    for (len, lent) in [(8 << 10, false), ((16 << 10) - 1, false), (16 << 10, true)] {
        let mut net = Net::with(2, |_| {});
        export(&mut net, 1 << 16, rw());
        let h = import(&mut net, 1, Access::READ).unwrap();
        let dest = anon(&mut net, 1, 1 << 16);
        let now = net.now;
        net.nodes[1].mem_read(now, &h, 0, len, (dest, 0), false).unwrap();
        assert_eq!(net.nodes[1].mem_lend().is_some(), lent, "{len} bytes, default limit");
    }
}

/// The datagrams node 0 sends in answer to one raw MemRead of `len` bytes
/// from `from` (claiming host 2) carrying `token`.
fn answers_to_raw_read(net: &mut Net, from: SocketAddr, seg: SegmentId, len: u32, token: u64) -> Vec<Transmit> {
    let mut h = Header::new(PacketType::MemRead);
    (h.incarnation, h.seq, h.src, h.dst) = (77, 0xbeef, Pid::new(2, 0), Pid::new(1, 0));
    let dest = Descriptor { index: 0, generation: 1 };
    ReadFields { source: seg, offset: 0, len, dest, dest_offset: 0, token }.put(&mut h);
    let now = net.now;
    net.nodes[0].handle_datagram(now, from, &to_vec(&h, &[], None));
    std::iter::from_fn(|| net.nodes[0].poll_transmit()).collect()
}

/// A read's answer can be 900,000 times its request, and a forged source
/// address would aim it at someone else: a node without a key answers a
/// read of more than TOKENLESS_READ_MAX bytes only if it carries the
/// node's token for the address it came from. Otherwise a MemNack no
/// larger than the request hands that address its token, and nothing is
/// served, notified or counted as served.
#[test]
fn a_large_read_from_an_address_that_has_not_proven_itself_gets_a_token_not_the_data() {
    let mut net = Net::with(2, |c| c.max_packet = vipc_wire::MAX_DATAGRAM);
    let opts = SegmentOptions { notify: Notify::Always, ..rw() };
    let seg = export(&mut net, 1 << 20, opts);
    let victim: SocketAddr = "192.0.2.7:4000".parse().unwrap();
    let token = net.nodes[0].address_token(victim);
    assert_ne!(token, net.nodes[0].address_token("192.0.2.7:4001".parse().unwrap()), "the port counts");
    assert_ne!(token, net.nodes[0].address_token("192.0.2.8:4000".parse().unwrap()), "the host counts");

    for wrong in [0, token ^ 1] {
        let out = answers_to_raw_read(&mut net, victim, seg, 1 << 20, wrong);
        assert_eq!(out.len(), 1, "one MemNack, no data");
        assert!(out[0].to == Destination::Addr(victim) && out[0].bytes.len() == vipc_wire::HEADER_LEN);
        let p = vipc_wire::parse(&out[0].bytes, None).unwrap();
        let n = vipc_wire::rmem::NackFields::get(&p.header);
        assert_eq!((p.header.ptype, n.reason, n.token), (PacketType::MemNack, Refusal::Unvalidated as u8, token));
    }
    assert_eq!(refused(&net, 0, Refusal::Unvalidated), 2);
    assert_eq!(net.stats(0).rmem_reads_served, 0);
    assert_eq!(net.nodes[0].segment_poll_control(seg), Ok(None), "nothing served, nothing notified");

    // With the token the read is served, to that address only.
    let out = answers_to_raw_read(&mut net, victim, seg, 1 << 20, token);
    assert_eq!(out.len(), 17, "1 MiB in datagrams of up to 65,419 bytes");
    assert_eq!(net.stats(0).rmem_reads_served, 1);
    let other: SocketAddr = "192.0.2.8:4000".parse().unwrap();
    assert_eq!(answers_to_raw_read(&mut net, other, seg, 1 << 20, token).len(), 1, "a token is for one address");
    // Up to TOKENLESS_READ_MAX bytes, no token is needed: the answer is at most ~3 × the request.
    let out = answers_to_raw_read(&mut net, victim, seg, TOKENLESS_READ_MAX, 0);
    assert_eq!(out[0].bytes.len(), vipc_wire::HEADER_LEN + TOKENLESS_READ_MAX as usize);
    assert_eq!(refused(&net, 0, Refusal::Unvalidated), 3);

    // A keyed node's packets come from key holders: no tokens.
    let key = AuthKey::from_bytes([7; 32]);
    let mut keyed = Engine::new(Config { key: Some(key.clone()), ..config(1) }, Time::ZERO);
    let seg = keyed.export_segment(Some(NAME), 1 << 16, rw()).unwrap();
    let mut h = Header::new(PacketType::MemRead);
    (h.incarnation, h.seq, h.src, h.dst) = (77, 0xbeef, Pid::new(2, 0), Pid::new(1, 0));
    let dest = Descriptor { index: 0, generation: 1 };
    ReadFields { source: seg, offset: 0, len: 1 << 16, dest, dest_offset: 0, token: 0 }.put(&mut h);
    keyed.handle_datagram(Time::ZERO, victim, &to_vec(&h, &[], Some(&key)));
    let kinds: Vec<PacketType> = std::iter::from_fn(|| keyed.poll_transmit())
        .map(|t| vipc_wire::parse(&t.bytes, Some(&key)).unwrap().header.ptype)
        .filter(|t| *t != PacketType::HostRequest)
        .collect();
    assert_eq!(kinds, vec![PacketType::MemWrite; 48], "64 KiB served in datagrams of 1,472 bytes, no MemNack");
}

/// A reader proves its address once per owner: its first large read is
/// refused with the token and sent again with it at once (the caller sees
/// only the read finish); later reads carry the token from the start.
/// Each reader has its own.
#[test]
fn a_reader_proves_its_address_once_per_owner() {
    let mut net = Net::new(3);
    let seg = export(&mut net, 64 << 10, rw());
    net.nodes[0].segment_write(seg, 0, &[5; 4000]).unwrap();
    for (i, reads) in [(1, 3), (2, 1)] {
        let h = import(&mut net, i, Access::READ).unwrap();
        let dest = anon(&mut net, i, 8192);
        for _ in 0..reads {
            let now = net.now;
            let op = net.nodes[i].mem_read(now, &h, 0, 4000, (dest, 0), false).unwrap();
            net.settle();
            assert_eq!(finish(&mut net, i, op), Ok(MemOutcome::Read));
            assert_eq!(bytes_of(&net, i, dest, 0, 4000), vec![5; 4000]);
        }
        assert_eq!(net.stats(i).rmem_token_retries, 1, "node {i}: one retry, on its first read");
        assert_eq!(net.stats(i).sent(PacketType::MemRead), reads + 1);
    }
    assert_eq!(refused(&net, 0, Refusal::Unvalidated), 2, "one per reader");
    assert_eq!(net.stats(0).rmem_reads_served, 4);
}

/// A read is sent again with a token at most twice (the owner may have
/// restarted in between): a third `Unvalidated` fails it, as does one that
/// carries no token.
#[test]
fn a_read_refused_unvalidated_too_often_fails() {
    for (nacks, token) in [(3, 42), (1, 0)] {
        let (mut net, h, dest) = read_setup(Access::READ);
        let now = net.now;
        let op = net.nodes[1].mem_read(now, &h, 0, 50_000, (dest, 0), false).unwrap();
        let retries = net.stats(1).rmem_token_retries;
        for _ in 0..nacks {
            while net.nodes[1].poll_transmit().is_some() {} // the owner never sees the read
            let mut n = Header::new(PacketType::MemNack);
            (n.incarnation, n.seq, n.src, n.dst) = (77, op.0, Pid::new(1, 0), Pid::new(2, 0));
            let reason = Refusal::Unvalidated as u8;
            let refused = PacketType::MemRead as u8;
            vipc_wire::rmem::NackFields { reason, refused, desc: h.desc, offset: 0, len: 50_000, token }.put(&mut n);
            net.nodes[1].handle_datagram(now, addr(0), &to_vec(&n, &[], None));
        }
        assert_eq!(net.nodes[1].mem_poll(op), Some(Err(Error::Refused(Refusal::Unvalidated))));
        assert_eq!(net.stats(1).rmem_token_retries - retries, nacks - 1);
    }
}
