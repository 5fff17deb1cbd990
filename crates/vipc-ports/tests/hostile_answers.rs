//! A server's answers are the other side's word: what a caller allocates
//! because of them must stay within the
//! bounds (256 MiB, `transfer::MAX_ARGUMENTS`), whatever the answer claims.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use vipc::{Node, NodeConfig};
use vipc_ports::rpc::Client;

/// `transfer::MAX_ARGUMENTS` (not exported).
const MAX_ARGUMENTS: usize = 256 << 20;

/// The system allocator, remembering the largest single request.
struct Largest;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed unchanged to `System`, whose contract the
// caller already meets; the only addition is an atomic maximum.
unsafe impl GlobalAlloc for Largest {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LARGEST.fetch_max(l.size(), Ordering::SeqCst);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LARGEST.fetch_max(l.size(), Ordering::SeqCst);
        System.alloc_zeroed(l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LARGEST.fetch_max(new, Ordering::SeqCst);
        System.realloc(p, l, new)
    }
}

#[global_allocator]
static A: Largest = Largest;

/// A failed call's answer claims a 256 MiB + 1 result (status NO_SUCH): the
/// caller recorded that length as its call site's size hint before it
/// looked at the status, and granted (allocated) its next power of two,
/// 512 MiB, on the next call; a claim of u32::MAX made it 4 GiB.
#[test]
fn a_claimed_result_length_does_not_size_the_next_call() {
    let node = Node::start(NodeConfig::fixed(1, "127.0.0.1:0".parse().unwrap(), vec![])).unwrap();
    let (server, _t) = node
        .spawn(|p| {
            let mut buf = vec![0u8; 4096];
            loop {
                let mut m = [0u8; 32];
                let Ok(info) = p.receive_with_segment(&mut m, &mut buf) else { return };
                let mut a = [0u8; 32];
                a[0] = 2; // status NO_SUCH
                a[4..8].copy_from_slice(&0x1000_0001u32.to_le_bytes());
                let _ = p.reply(&a, info.from);
            }
        })
        .unwrap();
    let p = node.attach().unwrap();
    let c = Client::new(&p, server, "Hostile", 1);
    assert!(c.call_raw(0, &[]).is_err());
    let before = LARGEST.load(Ordering::SeqCst);
    assert!(c.call_raw(0, &[]).is_err());
    let largest = LARGEST.load(Ordering::SeqCst);
    assert!(
        largest <= MAX_ARGUMENTS,
        "the caller allocated {largest} bytes (before: {before}) for a failed call's claim"
    );
}
