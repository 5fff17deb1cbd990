//! `vipc ping`: exchange latency with a process.

use crate::error::CliResult;
use crate::opts::NodeArgs;
use crate::target::{exchange_error, Target};
use std::time::{Duration, Instant};
use vipc::{services, Node, SegmentRef, SendOptions, Stats};

fn packets(s: &Stats) -> (u64, u64) {
    (s.ipc_sent(), s.ipc_received())
}

/// The `q`-quantile of sorted samples.
pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn us(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6)
}

/// Most exchanges one `vipc ping` times (each latency is kept for the percentiles).
const MAX_COUNT: u32 = 10_000_000;

/// Pings `target` `count` times with a `size`-byte read-write segment.
pub fn run(target: &str, count: u32, size: usize, args: &NodeArgs) -> CliResult<()> {
    if count == 0 || count > MAX_COUNT {
        return Err(format!("--count must be 1 to {MAX_COUNT}").into());
    }
    if size > u32::MAX as usize {
        return Err(format!("--size must be at most {} bytes (a segment's limit)", u32::MAX).into());
    }
    let target = Target::parse(target, false)?;
    let node = Node::start(args.build()?)?;
    let p = node.attach()?;
    let pid = target.resolve(&p)?;
    let mut seg = vec![0x5au8; size];
    let mut exchange = |i: u32| -> CliResult<()> {
        let mut msg = [0u8; 32];
        msg[0] = services::OP_PING;
        msg[8..12].copy_from_slice(&i.to_le_bytes());
        let r = if size > 0 {
            p.send_with(&mut msg, pid, Some(SegmentRef::ReadWrite(&mut seg)), SendOptions::default())
        } else {
            p.send(&mut msg, pid)
        };
        r.map(|_| ()).map_err(|e| exchange_error(&target, e))
    };
    // One exchange first, so that the location cache is warm and not counted.
    exchange(u32::MAX)?;
    let before = packets(&node.stats());
    let mut lat = Vec::with_capacity(count as usize);
    for i in 0..count {
        let t = Instant::now();
        exchange(i)?;
        lat.push(t.elapsed());
    }
    let after = packets(&node.stats());
    lat.sort();
    let (out, inn) = (after.0 - before.0, after.1 - before.1);
    say!("vipc ping: {pid} ({target}) from {}: {count} exchanges, 32-byte message, {size}-byte segment", p.pid());
    say!(
        "latency µs: min {}  median {}  p99 {}  max {}",
        us(lat[0]),
        us(quantile(&lat, 0.5)),
        us(quantile(&lat, 0.99)),
        us(lat[lat.len() - 1])
    );
    say!("packets per exchange: {:.2} (out {out}, in {inn})", (out + inn) as f64 / f64::from(count));
    drop(p);
    node.shutdown();
    Ok(())
}
