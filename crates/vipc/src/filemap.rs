//! MoveTo straight from a file ([`crate::Process::move_to_from_file`]).
//!
//! A file server answering a large read once read all of it into a fresh
//! buffer and moved it from there: every byte copied twice, the second
//! time from memory long out of the CPU's caches, and a fresh megabyte's
//! pages faulted in for each read. Then it mapped the file and lent the
//! mapping to the MoveTo (one copy), but mapping and unmapping the pages
//! cost the kernel more than the copy saved. A [`FileWindow`] reads the
//! bytes of each run of datagrams with `pread` just before the run goes,
//! into a buffer of two runs' size that stays in the cache. Measured in C on
//! this machine, 256 MB sent from the page cache in 65,000-byte datagrams
//! to a receiver on loopback, three runs each: `pread` per datagram
//! 4.0–4.4 GB/s (the sender's CPU 57–64 ms), the file mapped megabyte by
//! megabyte 2.9–3.2 GB/s (74–92 ms), `sendfile` after a corked header
//! 3.5–3.6 GB/s (67–73 ms).
//!
//! A retransmitted datagram's bytes are read again. Bytes past the end of
//! the file, also of one cut short during the move, go as zeros (as a read
//! racing a truncate may see); a failure to read the file sends zeros too,
//! and the MoveTo returns the error once done.

use crate::gso::{send_logged, Gso, Part, Run, MAX_SEGMENTS};
use std::cell::{Cell, RefCell};
use std::fs::File;
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::fs::FileExt;

/// Page size: where reads into the buffer start within a page (see [`page_aligned`]).
const PAGE: usize = 4096;
/// Bytes of the read buffer: two runs of the largest datagrams, or a run
/// of small ones each at its own page offset.
const SCRATCH: usize = 2 * vipc_wire::MAX_DATAGRAM + 2 * PAGE;

/// `len` bytes of a file from `offset`, lent to one MoveTo.
pub(crate) struct FileWindow<'a> {
    file: &'a File,
    offset: u64,
    len: usize,
    /// Where the bytes of a batch of datagrams are read: `SCRATCH` bytes from a page boundary.
    scratch: RefCell<(Vec<u8>, usize)>,
    /// The first error reading the file (the datagram went with zeros).
    failed: Cell<Option<std::io::Error>>,
}

/// A datagram of a batch: where it goes, its header, and its bytes (at
/// `at` of the window, `n` long) at `pos` of the read buffer.
#[derive(Clone, Copy)]
struct Queued<'h> {
    to: SocketAddr,
    head: &'h [u8],
    at: usize,
    n: usize,
    pos: usize,
}

impl Queued<'_> {
    /// Where its bytes end in the window.
    fn end(&self) -> usize {
        self.at + self.n
    }
}

impl<'a> FileWindow<'a> {
    /// The window of `len` bytes of `file` from `offset`; an error if they
    /// reach past the largest file offset.
    pub(crate) fn new(file: &'a File, offset: u64, len: usize) -> std::io::Result<FileWindow<'a>> {
        offset
            .checked_add(len as u64)
            .filter(|&end| i64::try_from(end).is_ok())
            .ok_or(std::io::ErrorKind::InvalidInput)?;
        Ok(FileWindow { file, offset, len, scratch: RefCell::new((Vec::new(), 0)), failed: Cell::new(None) })
    }

    /// Sends datagrams (to, head, at, n), each `head` then the window's
    /// bytes `at..at + n`, in runs ([`crate::gso`]): the bytes of a batch
    /// are read, then the batch is sent.
    pub(crate) fn send_all<'h>(
        &self,
        sock: &UdpSocket,
        gso: &Gso,
        chunks: impl Iterator<Item = (SocketAddr, &'h [u8], usize, usize)>,
    ) {
        let mut batch: Vec<Queued<'h>> = Vec::with_capacity(MAX_SEGMENTS);
        for (to, head, at, n) in chunks {
            if at.checked_add(n).is_none_or(|end| end > self.len) {
                tracing::debug!("a lent chunk beyond the file window");
                continue;
            }
            let pos = match batch.last() {
                Some(last) => match place_after(last, self.offset, at, n) {
                    Some(pos) if batch.len() < MAX_SEGMENTS => pos,
                    _ => {
                        self.send_batch(sock, gso, &mut batch);
                        first_place(self.offset, at)
                    }
                },
                None => first_place(self.offset, at),
            };
            batch.push(Queued { to, head, at, n, pos });
        }
        self.send_batch(sock, gso, &mut batch);
    }

    /// Reads the bytes of `batch` and sends it; empties it.
    fn send_batch(&self, sock: &UdpSocket, gso: &Gso, batch: &mut Vec<Queued<'_>>) {
        if batch.is_empty() {
            return;
        }
        let mut guard = self.scratch.borrow_mut();
        let (raw, start) = &mut *guard;
        if raw.is_empty() {
            (*raw, *start) = page_aligned(SCRATCH);
        }
        let buf = &mut raw[*start..*start + SCRATCH];
        // Consecutive bytes lie together in the buffer: one read each.
        let mut i = 0;
        while i < batch.len() {
            let first = batch[i];
            let mut end = i + 1;
            while end < batch.len() && batch[end].at == batch[end - 1].end() {
                end += 1;
            }
            let len = batch[end - 1].end() - first.at;
            self.read(first.at, &mut buf[first.pos..first.pos + len]);
            i = end;
        }
        let buf = &*buf;
        let mut run = Run::new(sock, gso, |to, (), parts| send_logged(sock, to, parts));
        for q in batch.iter() {
            run.push(q.to, Part::new(q.head), Part::new(&buf[q.pos..q.pos + q.n]), ());
        }
        run.finish();
        batch.clear();
    }

    /// Fills `buf` with the window's bytes from `at`: zeros past the end of
    /// the file, and where it cannot be read (the first error is kept).
    fn read(&self, at: usize, buf: &mut [u8]) {
        let got = match read_full(self.file, self.offset + at as u64, buf) {
            Ok(got) => got,
            Err(e) => {
                let first = self.failed.take().unwrap_or(e);
                self.failed.set(Some(first));
                0
            }
        };
        buf[got..].fill(0);
    }

    /// The first error met reading the file, if any: the bytes sent in its
    /// place were zeros.
    pub(crate) fn take_error(&self) -> Option<std::io::Error> {
        self.failed.take()
    }
}

/// Where in the read buffer the bytes of window offset `at` go when they
/// start a batch or a stretch of it: at the file offset's place in its
/// page (copying to a destination just ahead of the source, modulo a
/// page, is slow: see [`page_aligned`]).
fn first_place(offset: u64, at: usize) -> usize {
    ((offset + at as u64) % PAGE as u64) as usize
}

/// Where `n` bytes at window offset `at` go in the buffer after `last`:
/// right after it if they continue it, else past the next page boundary at
/// their own place in a page; `None` if the buffer has no room for them.
fn place_after(last: &Queued<'_>, offset: u64, at: usize, n: usize) -> Option<usize> {
    let after = last.pos + last.n;
    let pos = if last.end() == at { after } else { after.next_multiple_of(PAGE) + first_place(offset, at) };
    (pos + n <= SCRATCH).then_some(pos)
}

/// `len` zero bytes starting on a page boundary: the vector, and where in it
/// they start (`&v[at..at + len]`). Read files into such a buffer: the
/// kernel's copy from the page cache ran 3–4 × slower into one 1–31 bytes
/// past a page boundary, which is where a fresh process's large allocations
/// start (glibc puts them 16 bytes into their mapping). Measured on the AMD
/// EPYC vipc is developed on, whose `rep movsb` slows down when the
/// destination is just ahead of the source modulo 4 KiB: `pread` of 1 MiB
/// at 1.3–1.5 GB/s, against 4.4–5.5 GB/s page-aligned.
///
/// # Panics
/// As `vec![0; len]` does, when `len` bytes cannot be allocated.
pub fn page_aligned(len: usize) -> (Vec<u8>, usize) {
    let page = PAGE;
    // Saturating: a length near usize::MAX fails the allocation, not the sum.
    let raw = vec![0u8; len.saturating_add(page)];
    let at = raw.as_ptr().align_offset(page).min(page);
    (raw, at)
}

/// Reads into `buf` from `offset` until it is full or the file ends; the
/// rest stays as it was. Returns the bytes read.
pub(crate) fn read_full(file: &File, offset: u64, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        let at = offset.checked_add(got as u64).ok_or(std::io::ErrorKind::InvalidInput)?;
        match file.read_at(&mut buf[got..], at) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::{page_aligned, FileWindow, SCRATCH};
    use crate::gso::Gso;
    use std::net::{SocketAddr, UdpSocket};

    /// A file of `len` bytes, byte `i` being `i % 251`, and a receiver.
    fn file_and_receiver(len: usize) -> (std::fs::File, Vec<u8>, UdpSocket, UdpSocket) {
        let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, &bytes).unwrap();
        let (tx, rx) = (UdpSocket::bind("127.0.0.1:0").unwrap(), UdpSocket::bind("127.0.0.1:0").unwrap());
        rx.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        (f, bytes, tx, rx)
    }

    /// Receives `count` datagrams of `len` bytes, each "head" then data; their data.
    fn received(rx: &UdpSocket, count: usize, len: usize) -> Vec<Vec<u8>> {
        let mut got = vec![0u8; 70_000];
        (0..count)
            .map(|_| {
                assert_eq!(rx.recv(&mut got).unwrap(), 4 + len);
                assert_eq!(&got[..4], b"head");
                got[4..4 + len].to_vec()
            })
            .collect()
    }

    #[test]
    fn a_window_sends_the_files_bytes_in_one_run_and_zeros_past_a_cut() {
        const AT: u64 = 5; // the window starts inside a page
        let (f, bytes, tx, rx) = file_and_receiver(5 * 4096);
        let window = FileWindow::new(&f, AT, 16_000).unwrap();
        let to = rx.local_addr().unwrap();
        let gso = Gso::new();
        let chunks = || (0..4).map(move |i| (to, &b"head"[..], i * 4000, 4000));
        window.send_all(&tx, &gso, chunks());
        assert_eq!(gso.runs_sent(), 1, "four datagrams in one send");
        for (i, d) in received(&rx, 4, 4000).iter().enumerate() {
            let from = AT as usize + i * 4000;
            assert!(d[..] == bytes[from..from + 4000], "datagram {i} carries its bytes");
        }
        // Cut to one page: the bytes past the new end go as zeros.
        f.set_len(4096).unwrap();
        window.send_all(&tx, &gso, chunks());
        let sent = received(&rx, 4, 4000).concat();
        let kept = 4096 - AT as usize;
        assert!(sent[..kept] == bytes[AT as usize..4096] && sent[kept..].iter().all(|&b| b == 0));
        assert!(window.take_error().is_none(), "the pread worked");
        gso.runs_allowed(4004);
    }

    #[test]
    fn datagrams_out_of_order_and_more_than_the_buffer_holds_carry_their_own_bytes() {
        let (f, bytes, tx, rx) = file_and_receiver(1 << 20);
        let window = FileWindow::new(&f, 3, (1 << 20) - 3).unwrap();
        let to: SocketAddr = rx.local_addr().unwrap();
        // Retransmissions (apart), then a stretch in order, then large
        // datagrams: more bytes than one read buffer holds.
        let mut chunks: Vec<(usize, usize)> = vec![(8000, 1000), (100, 1000), (50_000, 1000)];
        chunks.extend((0..10).map(|i| (200_000 + i * 1400, 1400)));
        chunks.extend((0..2).map(|i| (400_000 + i * 62_000, 62_000)));
        assert!(chunks.iter().map(|c| c.1).sum::<usize>() > SCRATCH);
        // Received meanwhile, into a buffer as large as allowed: less than a
        // default socket buffer (208 KiB) holds, but not by much.
        let _ = socket2::SockRef::from(&rx).set_recv_buffer_size(1 << 20);
        let sizes: Vec<usize> = chunks.iter().map(|c| c.1).collect();
        let receiver = std::thread::spawn(move || sizes.iter().map(|&n| received(&rx, 1, n).remove(0)).collect());
        window.send_all(&tx, &Gso::new(), chunks.iter().map(|&(at, n)| (to, &b"head"[..], at, n)));
        let got: Vec<Vec<u8>> = receiver.join().unwrap();
        for (&(at, n), d) in chunks.iter().zip(&got) {
            assert!(d[..] == bytes[3 + at..3 + at + n], "the {n} bytes at {at}");
        }
        assert!(window.take_error().is_none());
    }

    #[test]
    fn page_aligned_bytes_start_on_a_page_boundary() {
        for len in [0, 1, 4096, 1 << 20, 3 << 20] {
            let (raw, at) = page_aligned(len);
            assert!(raw.len() >= at + len);
            assert_eq!(raw[at..].as_ptr() as usize % 4096, 0, "{len} bytes");
        }
    }

    #[test]
    fn bytes_it_cannot_read_go_as_zeros_and_the_error_is_kept() {
        let (f, _, tx, rx) = file_and_receiver(3 * 4096);
        drop(f);
        let dir = tempfile::tempdir().unwrap();
        let write_only = std::fs::File::create(dir.path().join("w")).unwrap();
        let window = FileWindow::new(&write_only, 100, 8192).unwrap();
        let to = rx.local_addr().unwrap();
        window.send_all(&tx, &Gso::new(), [(to, &b"head"[..], 10, 1000)].into_iter());
        assert!(received(&rx, 1, 1000)[0].iter().all(|&b| b == 0), "the datagram still goes, as zeros");
        let e = window.take_error().expect("the read failure is kept for the MoveTo");
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
        assert!(window.take_error().is_none(), "reported once");
    }

    #[test]
    fn a_window_past_the_largest_file_offset_is_refused() {
        let f = tempfile::tempfile().unwrap();
        assert!(FileWindow::new(&f, u64::MAX - 10, 1000).is_err());
        assert!(FileWindow::new(&f, i64::MAX as u64 - 1000, 1000).is_ok());
    }
}
