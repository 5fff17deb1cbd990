//! Packet buffers handed back by the runtime after sending, kept for the
//! next packets: a fresh allocation of a large buffer costs a page fault per
//! page once the allocator has returned the memory to the system, and a
//! small one a malloc and a free.

/// Buffers smaller than this go to the small pool.
pub(super) const RECYCLE_MIN: usize = 16 << 10;
/// Large buffers kept at most (a window's worth of 64 KiB chunks).
const LARGE_MAX: usize = 64;
/// Packets up to this size (control packets, messages, small answers) are
/// built in buffers of at least this capacity: a malloc and a free per
/// packet were a tenth of the engine's cost of a small exchange.
pub(super) const SMALL_BUF: usize = 512;
/// Small buffers kept at most.
const SMALL_MAX: usize = 64;

/// The two pools.
#[derive(Debug, Default)]
pub(super) struct Buffers {
    large: Vec<Vec<u8>>,
    small: Vec<Vec<u8>>,
}

impl Buffers {
    /// Keeps `bytes` for later packets if its pool has room.
    pub fn recycle(&mut self, mut bytes: Vec<u8>) {
        let (pool, max) = if bytes.capacity() >= RECYCLE_MIN {
            (&mut self.large, LARGE_MAX)
        } else if bytes.capacity() >= SMALL_BUF {
            (&mut self.small, SMALL_MAX)
        } else {
            return;
        };
        if pool.len() < max {
            bytes.clear();
            pool.push(bytes);
        }
    }

    /// An empty buffer for `len` bytes: a small one if they fit, else a large
    /// one if it is large enough (bulk chunks of any size), else a fresh one.
    pub fn get(&mut self, len: usize) -> Vec<u8> {
        if len <= SMALL_BUF {
            return self.small.pop().unwrap_or_else(|| Vec::with_capacity(SMALL_BUF));
        }
        match self.large.pop() {
            Some(b) if b.capacity() >= len => b,
            _ => Vec::with_capacity(len),
        }
    }

    /// An empty buffer for an encoded packet of `len` bytes: recycled if
    /// small or large, fresh between (a mid-sized packet built in a recycled
    /// 64 KiB buffer would spread over more memory than the allocator's reuse).
    pub fn for_packet(&mut self, len: usize) -> Vec<u8> {
        if len <= SMALL_BUF || len >= RECYCLE_MIN {
            self.get(len)
        } else {
            Vec::with_capacity(len)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_size_is_served_from_its_pool() {
        let mut b = Buffers::default();
        let (small, large) = (Vec::with_capacity(1000), Vec::with_capacity(64 << 10));
        let (s, l) = (small.as_ptr(), large.as_ptr());
        b.recycle(small);
        b.recycle(large);
        b.recycle(Vec::with_capacity(100)); // too small to keep
        assert_eq!(b.for_packet(5000).capacity(), 5000, "mid-sized: fresh");
        let (first, second) = (b.for_packet(100), b.for_packet(100));
        assert_eq!(first.as_ptr(), s);
        assert_eq!(second.capacity(), SMALL_BUF, "then a fresh small one");
        let chunk = b.get(5000);
        assert_eq!(chunk.as_ptr(), l, "a bulk chunk takes a large buffer");
        for _ in 0..SMALL_MAX + 5 {
            b.recycle(Vec::with_capacity(SMALL_BUF));
        }
        assert_eq!(b.small.len(), SMALL_MAX, "the pool is bounded");
    }
}
