//! `vipc ping`: exchange latency with a process.

use crate::error::{CliError, CliResult};
use crate::opts::NodeArgs;
use crate::target::{exchange_error, Target};
use std::time::{Duration, Instant};
use vipc::{services, Node, SegmentRef, SendOptions, Stats};

/// Packets sent and received, and bytes received.
fn packets(s: &Stats) -> (u64, u64, u64) {
    (s.ipc_sent(), s.ipc_received(), s.bytes_in)
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

/// Where the echoed segment differs from what was sent, if anywhere.
fn first_difference(sent: &[u8], echoed: &[u8]) -> Option<usize> {
    sent.iter()
        .zip(echoed)
        .position(|(a, b)| a != b)
        .or((sent.len() != echoed.len()).then(|| sent.len().min(echoed.len())))
}

/// Checks the reply of exchange `i`: every service answering a ping (the
/// echo service, a kernel server) replies with the request, bytes 8..12 (the
/// exchange's number) included.
fn check_reply(i: u32, reply: &[u8; 32]) -> Result<(), String> {
    let got = u32::from_le_bytes(reply[8..12].try_into().expect("4 bytes"));
    if got == i {
        Ok(())
    } else {
        Err(format!(
            "the reply to exchange {i} came back numbered {got}: the target does not answer pings \
             (an echo service or a kernel server does)"
        ))
    }
}

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
    let sent = crate::demo::pattern(size, 0x5a);
    let mut seg = sent.clone();
    let mut exchange = |i: u32| -> CliResult<()> {
        let mut msg = [0u8; 32];
        msg[0] = services::OP_PING;
        msg[8..12].copy_from_slice(&i.to_le_bytes());
        let r = if size > 0 {
            p.send_with(&mut msg, pid, Some(SegmentRef::ReadWrite(&mut seg)), SendOptions::default())
        } else {
            p.send(&mut msg, pid)
        };
        r.map_err(|e| exchange_error(&target, e))?;
        check_reply(i, &msg).map_err(|e| CliError(format!("{target}: {e}")))
    };
    let check_segment = |seg: &[u8]| -> CliResult<()> {
        match first_difference(&sent, seg) {
            None => Ok(()),
            Some(at) => Err(format!("{target}: the echoed segment differs from the one sent at byte {at}").into()),
        }
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
    // Bytes moved wrong in any exchange are moved back as they are: one look suffices.
    check_segment(&seg)?;
    lat.sort();
    let (out, inn, bytes_in) = (after.0 - before.0, after.1 - before.1, after.2 - before.2);
    say!("vipc ping: {pid} ({target}) from {}: {count} exchanges, 32-byte message, {size}-byte segment", p.pid());
    say!(
        "latency µs: min {}  median {}  p99 {}  max {}",
        us(lat[0]),
        us(quantile(&lat, 0.5)),
        us(quantile(&lat, 0.99)),
        us(lat[lat.len() - 1])
    );
    say!("packets per exchange: {:.2} (out {out}, in {inn})", (out + inn) as f64 / f64::from(count));
    // The segment came back only if at least its bytes arrived per exchange.
    let segment = match size {
        0 => "",
        _ if bytes_in >= size as u64 * u64::from(count) => "; the segment came back unchanged",
        _ => "; the segment was not sent back (the target only replied)",
    };
    say!("every reply answered its own exchange{segment}");
    drop(p);
    node.shutdown();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_of_another_exchange_is_an_error() {
        let mut r = [0u8; 32];
        r[8..12].copy_from_slice(&7u32.to_le_bytes());
        assert!(check_reply(7, &r).is_ok());
        assert!(check_reply(8, &r).unwrap_err().starts_with("the reply to exchange 8 came back numbered 7: "));
    }

    #[test]
    fn a_changed_or_moved_byte_is_found() {
        let sent = crate::demo::pattern(70_000, 0x5a);
        assert_eq!(first_difference(&sent, &sent), None);
        let mut moved = sent.clone();
        moved.copy_within(1400..2800, 0); // one packet's data at another packet's place
        assert_eq!(first_difference(&sent, &moved), Some(0));
        let mut flipped = sent.clone();
        flipped[65_536] ^= 1;
        assert_eq!(first_difference(&sent, &flipped), Some(65_536));
        assert_eq!(first_difference(&sent, &sent[..100]), Some(100));
    }
}
