//! Criterion micro-benchmarks of the engine's hot paths, sans IO:
//! - a local exchange (Receive, Send, Reply) through one engine;
//! - a remote Send→Reply through two engines passing the bytes directly;
//! - `handle_datagram` of a fresh Send (only that call is timed).
//!
//! `cargo bench -p vipc-bench --bench engine`

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use vipc_engine::{Config, Engine, HostIdConfig, SendOptions, Time};
use vipc_wire::{to_vec, Header, PacketType, Pid};

fn engine(host: u16) -> Engine {
    Engine::new(Config { host_id: HostIdConfig::Fixed(host), seed: u64::from(host), ..Config::default() }, Time::ZERO)
}

fn drain(e: &mut Engine) -> Option<Vec<u8>> {
    while e.poll_event().is_some() {}
    let mut last = None;
    while let Some(t) = e.poll_transmit() {
        last = Some(t.bytes);
    }
    last
}

fn local_exchange(c: &mut Criterion) {
    let mut e = engine(1);
    drain(&mut e);
    let server = e.create_process().expect("process");
    let client = e.create_process().expect("process");
    let mut now = 1u64;
    c.bench_function("engine/local_exchange", |b| {
        b.iter(|| {
            now += 1;
            let t = Time(now);
            let _ = e.receive(t, server, None, 0);
            let _ = e.send(t, client, server, black_box([1; 32]), SendOptions::default(), None);
            drain(&mut e);
            let _ = e.reply(t, server, client, black_box([2; 32]), None);
            drain(&mut e);
        })
    });
}

struct Pair {
    a: Engine,
    b: Engine,
    server: Pid,
    client: Pid,
    now: u64,
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

impl Pair {
    fn new() -> Pair {
        let (mut a, mut b) = (engine(1), engine(2));
        drain(&mut a);
        drain(&mut b);
        let server = a.create_process().expect("process");
        let client = b.create_process().expect("process");
        let mut p = Pair { a, b, server, client, now: 1 };
        p.exchange(); // the client's node learns where host 1 is
        p
    }

    /// One remote Send→Receive→Reply; the bytes go straight from engine to engine.
    fn exchange(&mut self) {
        self.now += 1_000;
        let t = Time(self.now);
        let _ = self.a.receive(t, self.server, None, 0);
        drain(&mut self.a);
        let _ = self.b.send(t, self.client, self.server, [1; 32], SendOptions::default(), None);
        if let Some(send) = drain(&mut self.b) {
            self.a.handle_datagram(t, addr(7002), &send);
        }
        drain(&mut self.a);
        let _ = self.a.reply(t, self.server, self.client, [2; 32], None);
        if let Some(reply) = drain(&mut self.a) {
            self.b.handle_datagram(t, addr(7001), &reply);
        }
        drain(&mut self.b);
    }
}

fn remote_exchange(c: &mut Criterion) {
    let mut p = Pair::new();
    c.bench_function("engine/remote_send_reply", |b| b.iter(|| p.exchange()));
}

fn handle_send(c: &mut Criterion) {
    let mut p = Pair::new();
    let from = addr(7002);
    // The client's next Send, crafted with a fresh sequence number each time.
    let template = {
        let _ = p.b.send(Time(p.now), p.client, p.server, [1; 32], SendOptions::default(), None);
        drain(&mut p.b).unwrap_or_default()
    };
    let Ok(parsed) = vipc_wire::parse(&template, None) else { return };
    let mut h: Header = parsed.header;
    assert_eq!(h.ptype, PacketType::Send);
    c.bench_function("engine/handle_datagram_send", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                p.now += 1_000;
                let t = Time(p.now);
                h.seq = h.seq.wrapping_add(1);
                let bytes = to_vec(&h, &[], None);
                let _ = p.a.receive(t, p.server, None, 0);
                drain(&mut p.a);
                let start = Instant::now();
                p.a.handle_datagram(t, from, black_box(&bytes));
                total += start.elapsed();
                drain(&mut p.a);
                let _ = p.a.reply(t, p.server, h.src, [2; 32], None);
                drain(&mut p.a);
            }
            total
        })
    });
}

criterion_group!(benches, local_exchange, remote_exchange, handle_send);
criterion_main!(benches);
