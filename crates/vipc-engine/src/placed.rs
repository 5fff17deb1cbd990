//! Memory that datagrams are received straight into, placed in its page.
//!
//! A large datagram reaches the receiver in page fragments whose data start
//! at the beginning of a page, and the kernel copies it out with `rep movsb`.
//! That copy stalls on false store-to-load dependencies (4K aliasing) when
//! its destination runs a few bytes ahead of its source modulo 4 KiB. On
//! this project's VM, reader and owner on one CPU: a 32 KiB remote read
//! received 16 bytes into a page took 30–47 µs, half a page in 19.5 µs (37 µs
//! against 47 µs with a cluster key, where answers go through the runtime's
//! receive buffer). Where a buffer starts is otherwise the allocator's
//! choice; these start half a page in.

/// Where in a page the memory [`placed_buffer`] returns starts.
pub const RECEIVE_PAGE_OFFSET: usize = 2048;
const PAGE: usize = 4096;

/// `len` zeroed bytes at `mem[start..]`, with `mem[start]` at
/// [`RECEIVE_PAGE_OFFSET`] in its page; returns `(mem, start)`. `mem` is
/// exactly `start + len` long, and moving it keeps the placement.
pub fn placed_buffer(len: usize) -> (Vec<u8>, usize) {
    let mut mem = vec![0u8; PAGE + len];
    let start = (RECEIVE_PAGE_OFFSET + PAGE - mem.as_ptr() as usize % PAGE) % PAGE;
    mem.truncate(start + len);
    (mem, start)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placed_buffers_start_half_a_page_in() {
        for len in [0, 1, 72, 65_536, 1 << 20] {
            let (mem, start) = placed_buffer(len);
            assert_eq!(mem.len(), start + len);
            assert!(start < PAGE);
            assert_eq!((mem.as_ptr() as usize + start) % PAGE, RECEIVE_PAGE_OFFSET);
            assert!(mem.iter().all(|&b| b == 0));
        }
    }
}
