//! RAPID-style remote procedure call on remote memory (003 §5.2–5.4).
//!
//! The server ([`RapidServer`]) exports one segment: a CAS-II claim cell per
//! argument stack, then the stacks. A client ([`RapidClient`]) claims a
//! stack with a CAS-II at bind time and exports a small result segment.
//! A call is **one remote write** into the client's stack: the header —
//! the flag word (the call's sequence number, non-zero), the client's
//! nonce, the procedure, the argument length, a check word and the name of
//! the result segment — and the arguments, in the same datagram when they
//! fit, with the notify bit. The server polls the flag words (and sleeps on
//! the segment's control channel when idle), write-protects the stack while
//! the procedure runs (003's `rr_setprot`: a client cannot change arguments
//! under the running procedure; its writes meanwhile are queued, and
//! applied afterwards), writes the result with a check word into the
//! client's result segment, and clears the flag word. The client spins on
//! its result segment for a while, then blocks on it.
//!
//! Why sequence numbers: a lost call or a lost result is recovered by the
//! client writing the same call again after a timeout. The server runs a
//! call only if its sequence number is newer than the last it ran for that
//! stack and nonce, and answers a repeat of the last one from the result it
//! kept — so a procedure runs at most once per call, exactly once if the
//! call returns `Ok`.
//!
//! ```
//! use std::time::Duration;
//! use vipc::{Node, NodeConfig};
//! use vipc_rmem_layers::rapid::{RapidClient, RapidParams, RapidServer};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (a1, a2) = ("127.0.0.1:0".parse()?, "127.0.0.1:0".parse()?);
//! let a = Node::start(NodeConfig::fixed(1, a1, vec![]))?;
//! let b = Node::start(NodeConfig::fixed(2, a2, vec![a.local_addr()]))?;
//! let mut server = RapidServer::export(&a, RapidParams::default())?;
//! let name = server.name();
//! let t = std::thread::spawn(move || {
//!     // Procedure 1: the sum of the argument bytes.
//!     server.serve_for(Duration::from_secs(2), |proc, args| match proc {
//!         1 => Ok(args.iter().map(|&b| u32::from(b)).sum::<u32>().to_le_bytes().to_vec()),
//!         _ => Err(1),
//!     })
//! });
//! let mut client = RapidClient::bind(&b, name, Duration::from_secs(2))?;
//! assert_eq!(client.call(1, &[1, 2, 3], Duration::from_secs(2))?, 6u32.to_le_bytes());
//! drop(client);
//! t.join().unwrap()?;
//! # Ok(()) }
//! ```

mod client;
mod server;

pub use client::{ClientStats, RapidClient};
pub use server::{RapidServer, ServerStats};

use crate::common::{get32, put32};

/// How a server lays out its segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RapidParams {
    /// Argument stacks: clients bound at once.
    pub slots: usize,
    /// Largest argument block of a call.
    pub max_args: usize,
    /// Largest result of a call.
    pub max_result: usize,
}

impl Default for RapidParams {
    /// 8 stacks, arguments and results of up to 1 KiB (a call fits one datagram anywhere).
    fn default() -> RapidParams {
        RapidParams { slots: 8, max_args: 1024, max_result: 1024 }
    }
}

impl RapidParams {
    /// Bytes of one stack, a multiple of 8.
    fn stack_size(&self) -> usize {
        (ARGS_AT + self.max_args).next_multiple_of(8)
    }

    /// Offset of slot `i`'s claim cell.
    fn claim(i: usize) -> usize {
        HEADER + 8 * i
    }

    /// Offset of stack `i`.
    fn stack(&self, i: usize) -> usize {
        (HEADER + 8 * self.slots).next_multiple_of(8) + i * self.stack_size()
    }

    /// The server segment's size.
    fn size(&self) -> usize {
        self.stack(self.slots)
    }

    /// Whether a server may use these parameters: at least one stack,
    /// arguments and results of at most 16 MiB, and a segment of at most
    /// 4 GiB − 1. A client checks what it reads from a server's header the
    /// same way before it computes anything from it.
    fn valid(&self) -> bool {
        let limit = 1u64 << 24;
        if self.slots == 0 || self.max_args as u64 > limit || self.max_result as u64 > limit {
            return false;
        }
        // Checked: a huge slot count must fail here, not wrap to a small size.
        let stack = (ARGS_AT as u64 + self.max_args as u64).next_multiple_of(8);
        let slots = self.slots as u64;
        let size = slots
            .checked_mul(8)
            .and_then(|table| (HEADER as u64).checked_add(table))
            .map(|head| head.next_multiple_of(8))
            .zip(slots.checked_mul(stack))
            .and_then(|(head, stacks)| head.checked_add(stacks));
        size.is_some_and(|size| size <= u64::from(u32::MAX))
    }
}

/// `VRPD`: the server's header starts with it.
const MAGIC: u32 = 0x4450_5256;
/// Server header: magic, slots, max_args, max_result.
const HEADER: usize = 16;
/// A stack: flag word (sequence number), nonce, procedure, length, check word, pad, result segment name, arguments.
const ARGS_AT: usize = 40;
/// A result: sequence number, status, length, check word, bytes.
const RESULT_AT: usize = 16;
/// The status of a result longer than the server's `max_result`.
pub const RESULT_TOO_LARGE: u32 = u32::MAX;

/// A call's header, as written at the top of its stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Call {
    seq: u32,
    nonce: u32,
    proc: u32,
    len: u32,
    check: u32,
    reply_to: [u8; 16],
}

impl Call {
    fn check_of(&self, args: &[u8]) -> u32 {
        let seed = (u64::from(self.nonce) << 32) | u64::from(self.seq);
        crate::check::check(seed, &[&self.proc.to_le_bytes(), &self.len.to_le_bytes(), &self.reply_to, args])
    }

    fn put(&self, b: &mut [u8]) {
        put32(b, 0, self.seq);
        put32(b, 4, self.nonce);
        put32(b, 8, self.proc);
        put32(b, 12, self.len);
        put32(b, 16, self.check);
        put32(b, 20, 0);
        b[24..40].copy_from_slice(&self.reply_to);
    }

    fn get(b: &[u8]) -> Call {
        let mut reply_to = [0u8; 16];
        reply_to.copy_from_slice(&b[24..40]);
        Call {
            seq: get32(b, 0),
            nonce: get32(b, 4),
            proc: get32(b, 8),
            len: get32(b, 12),
            check: get32(b, 16),
            reply_to,
        }
    }
}

/// A result's check word: over the call it answers and the bytes.
fn result_check(nonce: u32, seq: u32, status: u32, bytes: &[u8]) -> u32 {
    let seed = (u64::from(nonce) << 32) | u64::from(seq);
    crate::check::check(seed, &[&status.to_le_bytes(), &(bytes.len() as u32).to_le_bytes(), bytes])
}

/// `a` is after `b` (sequence numbers wrap).
fn newer(a: u32, b: u32) -> bool {
    a != b && a.wrapping_sub(b) < 1 << 31
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A slot count whose segment size overflows is invalid (it wrapped to
    /// a small size in release builds and panicked in debug ones).
    #[test]
    fn huge_slot_counts_are_invalid() {
        assert!(RapidParams::default().valid());
        for slots in [usize::MAX, 1 << 61, 1 << 40] {
            assert!(!RapidParams { slots, ..RapidParams::default() }.valid(), "{slots} slots");
        }
        assert!(!RapidParams { slots: 0, ..RapidParams::default() }.valid());
    }
}
