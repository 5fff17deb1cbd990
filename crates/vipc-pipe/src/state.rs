//! One pipe's state without any I/O: its buffer, its open ends, and the rules
//! for end of file and broken pipes (unit-tested here; `crate::server`
//! drives it with Send/Receive/Reply).
//!
//! The rules, chosen so that a pipe can be used from the shell in either
//! order (writer first or reader first) and reused afterwards:
//! - a read of an empty pipe gets **EOF** once the pipe has had a writer and
//!   none is open now ([`PipeState::at_eof`]); before any writer has come it waits;
//! - a write gets **EPIPE** once the pipe has had a reader and none is open
//!   now ([`PipeState::broken`]); the buffered data are then dropped. Before
//!   any reader has come, writes are buffered (the writer blocks when the
//!   buffer is full), so buffered data outlive their writer as in V;
//! - when no end is open and the buffer is empty the pipe is **fresh** again
//!   ([`PipeState::maybe_reset`]): the next reader waits for the next writer.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Which end of the pipe an end id is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Reads from the pipe.
    Read,
    /// Writes to the pipe.
    Write,
}

/// An open end: its mode and when its owner was last heard from.
#[derive(Clone, Copy, Debug)]
pub struct End {
    /// Reader or writer.
    pub mode: Mode,
    /// The last request or heartbeat naming this end.
    pub last_seen: Instant,
}

/// The buffer and the ends of one pipe.
#[derive(Debug)]
pub struct PipeState {
    /// Bytes written and not yet read, oldest first.
    pub buf: VecDeque<u8>,
    capacity: usize,
    max_ends: usize,
    ends: HashMap<u32, End>,
    next_id: u32,
    readers: usize,
    writers: usize,
    had_reader: bool,
    had_writer: bool,
}

impl PipeState {
    /// An empty, fresh pipe holding at most `capacity` bytes and `max_ends` open ends.
    pub fn new(capacity: usize, max_ends: usize, seed: u32) -> PipeState {
        PipeState {
            buf: VecDeque::with_capacity(capacity.min(1 << 20)),
            capacity,
            max_ends,
            ends: HashMap::new(),
            next_id: seed | 1,
            readers: 0,
            writers: 0,
            had_reader: false,
            had_writer: false,
        }
    }

    /// Most bytes the buffer holds (and the largest atomic write).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Free bytes in the buffer.
    pub fn room(&self) -> usize {
        // `buf` is public: a caller may have filled it past the capacity.
        self.capacity.saturating_sub(self.buf.len())
    }

    /// Open readers and writers.
    pub fn counts(&self) -> (usize, usize) {
        (self.readers, self.writers)
    }

    /// Opens an end; `None` if `max_ends` are open.
    pub fn open(&mut self, mode: Mode, now: Instant) -> Option<u32> {
        if self.ends.len() >= self.max_ends {
            return None;
        }
        let mut id = self.next_id;
        while id == 0 || self.ends.contains_key(&id) {
            id = id.wrapping_add(1);
        }
        self.next_id = id.wrapping_add(1);
        self.ends.insert(id, End { mode, last_seen: now });
        match mode {
            Mode::Read => {
                self.readers += 1;
                self.had_reader = true;
            }
            Mode::Write => {
                self.writers += 1;
                self.had_writer = true;
            }
        }
        Some(id)
    }

    /// Notes that end `id` was heard from; its mode, or `None` if it is not open.
    pub fn touch(&mut self, id: u32, now: Instant) -> Option<Mode> {
        let e = self.ends.get_mut(&id)?;
        e.last_seen = now;
        Some(e.mode)
    }

    /// Closes end `id`; its mode, or `None` if it was not open. When the last
    /// reader goes the buffered data are dropped (nobody can read them).
    pub fn close(&mut self, id: u32) -> Option<Mode> {
        let e = self.ends.remove(&id)?;
        match e.mode {
            Mode::Read => {
                self.readers -= 1;
                if self.readers == 0 {
                    self.buf.clear();
                }
            }
            Mode::Write => self.writers -= 1,
        }
        Some(e.mode)
    }

    /// Ends not heard from for longer than `lease`.
    pub fn expired(&self, now: Instant, lease: Duration) -> Vec<u32> {
        let mut v: Vec<u32> =
            self.ends.iter().filter(|(_, e)| now.duration_since(e.last_seen) > lease).map(|(id, _)| *id).collect();
        v.sort_unstable();
        v
    }

    /// A read of the empty pipe gets end of file.
    pub fn at_eof(&self) -> bool {
        self.buf.is_empty() && self.writers == 0 && self.had_writer
    }

    /// A write gets EPIPE: the pipe has had readers and all have gone.
    pub fn broken(&self) -> bool {
        self.readers == 0 && self.had_reader
    }

    /// Makes the pipe fresh again when no end is open and nothing is buffered.
    pub fn maybe_reset(&mut self) {
        if self.readers == 0 && self.writers == 0 && self.buf.is_empty() {
            self.had_reader = false;
            self.had_writer = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Instant {
        Instant::now()
    }

    #[test]
    fn reader_first_waits_then_eof_after_the_writer() {
        let mut s = PipeState::new(8, 10, 1);
        let r = s.open(Mode::Read, now()).unwrap();
        assert!(!s.at_eof(), "no writer yet: wait");
        let w = s.open(Mode::Write, now()).unwrap();
        assert_ne!(r, w);
        s.buf.extend(b"hi");
        assert_eq!(s.close(w), Some(Mode::Write));
        assert!(!s.at_eof(), "data first");
        s.buf.clear();
        assert!(s.at_eof());
        assert!(!s.broken());
        assert_eq!(s.close(r), Some(Mode::Read));
        assert_eq!(s.close(r), None);
        s.maybe_reset();
        assert!(!s.at_eof(), "fresh again");
        assert!(!s.broken());
    }

    /// `buf` is public: filled past the capacity, there is no room (it underflowed).
    #[test]
    fn an_overfull_buffer_has_no_room() {
        let mut s = PipeState::new(4, 4, 1);
        s.buf.extend([0u8; 8]);
        assert_eq!(s.room(), 0);
    }

    #[test]
    fn writer_first_buffers_and_data_outlive_it() {
        let mut s = PipeState::new(8, 10, 1);
        let w = s.open(Mode::Write, now()).unwrap();
        assert!(!s.broken(), "no reader yet: buffer");
        s.buf.extend(b"abc");
        s.close(w);
        s.maybe_reset();
        assert_eq!(s.buf.len(), 3, "kept");
        let r = s.open(Mode::Read, now()).unwrap();
        assert!(!s.at_eof());
        s.buf.clear();
        assert!(s.at_eof());
        s.close(r);
        s.maybe_reset();
        assert!(!s.at_eof());
    }

    #[test]
    fn last_reader_gone_breaks_the_pipe_and_drops_data() {
        let mut s = PipeState::new(8, 10, 1);
        let w = s.open(Mode::Write, now()).unwrap();
        let r1 = s.open(Mode::Read, now()).unwrap();
        let r2 = s.open(Mode::Read, now()).unwrap();
        s.buf.extend(b"xyz");
        assert_eq!(s.room(), 5);
        s.close(r1);
        assert!(!s.broken());
        assert_eq!(s.buf.len(), 3);
        s.close(r2);
        assert!(s.broken());
        assert!(s.buf.is_empty());
        assert_eq!(s.counts(), (0, 1));
        s.close(w);
        s.maybe_reset();
        assert!(!s.broken());
    }

    #[test]
    fn ends_expire_and_are_limited() {
        let mut s = PipeState::new(8, 2, 1);
        let t0 = now();
        let a = s.open(Mode::Read, t0).unwrap();
        let b = s.open(Mode::Write, t0).unwrap();
        assert!(s.open(Mode::Write, t0).is_none(), "limit");
        let later = t0 + Duration::from_secs(10);
        assert_eq!(s.touch(b, later), Some(Mode::Write));
        assert_eq!(s.expired(later, Duration::from_secs(5)), vec![a]);
        assert_eq!(s.touch(12345, later), None);
    }
}
