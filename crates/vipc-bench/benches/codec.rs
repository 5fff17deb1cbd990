//! Criterion micro-benchmarks of the wire codec: encode and parse a Send
//! packet, with and without the keyed BLAKE3 MAC, with no data and with 1 KB.
//!
//! `cargo bench -p vipc-bench --bench codec`

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use vipc_wire::{encode, parse, to_vec, AuthKey, Header, PacketType, Pid};

fn header() -> Header {
    let mut h = Header::new(PacketType::Send);
    h.incarnation = 0x1234;
    h.seq = 7;
    h.src = Pid::new(2, 3);
    h.dst = Pid::new(1, 4);
    h.fwd = h.src;
    h.message = [0x5a; 32];
    h
}

fn codec(c: &mut Criterion) {
    let key = AuthKey::from_bytes([7; 32]);
    let h = header();
    let mut g = c.benchmark_group("codec");
    for (size, data) in [("32B", Vec::new()), ("1KB", vec![0x33u8; 1024])] {
        for (mac, k) in [("nomac", None), ("mac", Some(&key))] {
            let bytes = to_vec(&h, &data, k);
            g.throughput(Throughput::Bytes(bytes.len() as u64));
            let mut out = Vec::with_capacity(bytes.len());
            g.bench_function(format!("encode/{size}/{mac}"), |b| {
                b.iter(|| {
                    out.clear();
                    encode(black_box(&h), black_box(&data), k, &mut out);
                    black_box(out.len())
                })
            });
            g.bench_function(format!("parse/{size}/{mac}"), |b| {
                b.iter(|| black_box(parse(black_box(&bytes), k).is_ok()))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
