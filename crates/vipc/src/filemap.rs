//! MoveTo straight from a file's page cache ([`crate::Process::move_to_from_file`]).
//!
//! A file server answering a large read used to `pread` the bytes into a
//! buffer and MoveTo them from there: two copies of every byte, the first
//! serialised with the next read. A [`FileWindow`] maps the bytes
//! read-only and lends the mapping to the MoveTo, whose datagrams the
//! kernel fills from the page cache: one copy. (256 MB by `vipc cp`:
//! 0.77–1.08 → 1.44–1.58 GB/s in three alternating pairs of bench runs; the
//! server's CPU for it 160–230 → 130–150 ms.)
//!
//! The mapping is never read by this process, only by the kernel inside
//! `sendmsg`, so a file cut short meanwhile cannot raise SIGBUS: the send
//! fails with EFAULT instead, and that datagram's bytes are then read with
//! `pread`, zeros past the new end (as a read racing a truncate may see).
//! A page the kernel cannot read from the disk fails the same way; the
//! `pread` then reports the error, which the MoveTo returns once done.

use crate::gso::{Gso, Part, Run};
use nix::sys::socket::{SockaddrLike, SockaddrStorage};
use std::cell::Cell;
use std::fs::File;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::ptr::NonNull;

/// The page size mappings are aligned to (4 KiB on every Linux target vipc
/// runs on; a larger page only makes `map` fail, and the caller copies).
const PAGE: u64 = 4096;

/// `len` bytes of a file from `offset`, mapped read-only and shared.
pub(crate) struct FileWindow<'a> {
    file: &'a File,
    offset: u64,
    /// The mapping: page-aligned, `skip + len` bytes.
    base: NonNull<libc::c_void>,
    /// Bytes of the mapping before the window's first byte.
    skip: usize,
    len: usize,
    /// The first error reading the file (the datagram went with zeros).
    failed: Cell<Option<std::io::Error>>,
}

impl<'a> FileWindow<'a> {
    /// Maps `len` (> 0) bytes of `file` from `offset`. Bytes past the end of
    /// the file are not an error here: sending them falls back to `pread`.
    pub(crate) fn map(file: &'a File, offset: u64, len: usize) -> std::io::Result<FileWindow<'a>> {
        let aligned = offset & !(PAGE - 1);
        let skip = (offset - aligned) as usize;
        let size = std::num::NonZeroUsize::new(skip + len).ok_or(std::io::ErrorKind::InvalidInput)?;
        let at = libc::off_t::try_from(aligned).map_err(|_| std::io::ErrorKind::InvalidInput)?;
        // SAFETY: a fresh read-only mapping at an address of the kernel's
        // choosing overlaps no memory Rust knows of. Its bytes are never
        // read by this process (no reference to them is ever made, see
        // `send`), so neither a truncation of the file (SIGBUS on a user
        // read) nor a concurrent write to it can break Rust's rules; it is
        // unmapped exactly once, in `drop`.
        let base = unsafe {
            nix::sys::mman::mmap(
                None,
                size,
                nix::sys::mman::ProtFlags::PROT_READ,
                nix::sys::mman::MapFlags::MAP_SHARED,
                file,
                at,
            )
        }?;
        Ok(FileWindow { file, offset, base, skip, len, failed: Cell::new(None) })
    }

    /// Sends datagrams (to, head, at, n), each `head` then the window's
    /// bytes `at..at + n`, in runs ([`crate::gso`]); a run the kernel
    /// refuses (EFAULT: the file was cut short) goes datagram by datagram.
    pub(crate) fn send_all<'h>(
        &self,
        sock: &UdpSocket,
        gso: &Gso,
        chunks: impl Iterator<Item = (SocketAddr, &'h [u8], usize, usize)>,
    ) {
        // Each datagram's tag is its own (head, at, n), for sending it alone.
        let mut run = Run::new(sock, gso, |to, chunk: Option<(&'h [u8], usize, usize)>, _| {
            if let Some((head, at, n)) = chunk {
                self.send(sock, to, head, at, n);
            }
            true
        });
        for (to, head, at, n) in chunks {
            match self.part(at, n) {
                Some(data) => run.push(to, Part::from(head), data, Some((head, at, n))),
                None => tracing::debug!("a lent chunk beyond the file window"),
            }
        }
        run.finish();
    }

    /// The window's bytes `at..at + n`, for the kernel to read.
    fn part(&self, at: usize, n: usize) -> Option<Part<'_>> {
        at.checked_add(n).filter(|&e| e <= self.len)?;
        // SAFETY: inside the mapping (checked above), which stays mapped
        // while `self` lives; the kernel alone reads it (see the module docs).
        Some(unsafe { Part::raw(self.base.as_ptr().cast::<u8>().wrapping_add(self.skip + at), n) })
    }

    /// Sends one datagram to `to`: `head`, then the window's bytes `at..at + n`.
    fn send(&self, sock: &UdpSocket, to: SocketAddr, head: &[u8], at: usize, n: usize) {
        let Some(end) = at.checked_add(n).filter(|&e| e <= self.len) else {
            tracing::debug!("a lent chunk beyond the file window");
            return;
        };
        match self.send_mapped(sock, to, head, at, n) {
            Ok(()) => {}
            // The file shrank under the window: its pages are gone.
            Err(e) if e.raw_os_error() == Some(libc::EFAULT) => {
                let mut data = vec![0u8; end - at];
                if let Err(e) = read_full(self.file, self.offset + at as u64, &mut data) {
                    let first = self.failed.take().unwrap_or(e);
                    self.failed.set(Some(first));
                }
                crate::gso::send_logged(sock, to, &[Part::from(head), Part::from(&data[..])]);
            }
            Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {}
            Err(e) => tracing::debug!("send to {to} failed: {e}"),
        }
    }

    /// The first error met reading the file, if any: the bytes sent in its
    /// place were zeros.
    pub(crate) fn take_error(&self) -> Option<std::io::Error> {
        self.failed.take()
    }

    fn send_mapped(&self, sock: &UdpSocket, to: SocketAddr, head: &[u8], at: usize, n: usize) -> std::io::Result<()> {
        let addr = SockaddrStorage::from(to);
        let mut iov = [
            libc::iovec { iov_base: head.as_ptr() as *mut libc::c_void, iov_len: head.len() },
            // Inside the mapping: `send` checked at + n <= len.
            libc::iovec { iov_base: self.base.as_ptr().cast::<u8>().wrapping_add(self.skip + at).cast(), iov_len: n },
        ];
        // SAFETY: msghdr is plain data; all-zero is a valid empty header.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = addr.as_ptr() as *mut libc::c_void;
        msg.msg_namelen = addr.len();
        msg.msg_iov = iov.as_mut_ptr();
        msg.msg_iovlen = iov.len() as _;
        // SAFETY: every pointer in `msg` points into memory that outlives the
        // call: `addr`, `iov`, `head`, and the mapping (unmapped only on
        // drop). The kernel only reads through them; a page of the mapping
        // it cannot read makes the call fail with EFAULT, handled in `send`.
        let r = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, 0) };
        if r < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            Ok(())
        }
    }
}

impl Drop for FileWindow<'_> {
    fn drop(&mut self) {
        // SAFETY: `base` and `skip + len` are exactly what `map` mapped, and
        // no pointer into the mapping outlives `self` (`send` keeps none).
        if let Err(e) = unsafe { nix::sys::mman::munmap(self.base, self.skip + self.len) } {
            tracing::warn!("munmap of a file window failed: {e}");
        }
    }
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
    let page = PAGE as usize;
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
    use super::{page_aligned, FileWindow};
    use crate::gso::Gso;
    use std::net::UdpSocket;

    #[test]
    fn a_run_from_a_window_cut_short_goes_datagram_by_datagram() {
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, &[7u8; 4 * 4096]).unwrap();
        let window = FileWindow::map(&f, 0, 4 * 4096).unwrap();
        let (tx, rx) = (UdpSocket::bind("127.0.0.1:0").unwrap(), UdpSocket::bind("127.0.0.1:0").unwrap());
        rx.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
        let to = rx.local_addr().unwrap();
        let gso = Gso::new();
        let chunks = || (0..4).map(move |i| (to, &b"head"[..], i * 4000, 4000));
        let mut got = vec![0u8; 8192];
        // Whole: one run (four datagrams in one send), each head then its bytes.
        window.send_all(&tx, &gso, chunks());
        for _ in 0..4 {
            assert_eq!(rx.recv(&mut got).unwrap(), 4004);
            assert!(&got[..4] == b"head" && got[4..4004].iter().all(|&b| b == 7));
        }
        // Cut to one page: the run's send faults, and each datagram goes on
        // its own, the bytes past the new end as zeros.
        f.set_len(4096).unwrap();
        window.send_all(&tx, &gso, chunks());
        let mut bytes = Vec::new();
        for _ in 0..4 {
            assert_eq!(rx.recv(&mut got).unwrap(), 4004);
            assert_eq!(&got[..4], b"head");
            bytes.extend_from_slice(&got[4..4004]);
        }
        assert!(bytes[..4096].iter().all(|&b| b == 7) && bytes[4096..].iter().all(|&b| b == 0));
        assert!(window.take_error().is_none(), "the pread worked");
        gso.runs_allowed(4004);
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
    fn a_page_it_cannot_read_goes_as_zeros_and_its_error_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let write_only = std::fs::File::create(dir.path().join("w")).unwrap();
        let mut f = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut f, &[7u8; 3 * 4096]).unwrap();
        let mut window = FileWindow::map(&f, 100, 8192).unwrap();
        // Cut short under the mapping: its pages are gone (EFAULT), and the
        // pread that takes over fails too (a write-only descriptor).
        f.set_len(0).unwrap();
        window.file = &write_only;
        let (tx, rx) = (UdpSocket::bind("127.0.0.1:0").unwrap(), UdpSocket::bind("127.0.0.1:0").unwrap());
        window.send(&tx, rx.local_addr().unwrap(), b"head", 10, 1000);
        let mut got = [0xEEu8; 2000];
        assert_eq!(rx.recv(&mut got).unwrap(), 1004, "the datagram still goes");
        assert_eq!(&got[..4], b"head");
        assert!(got[4..1004].iter().all(|&b| b == 0), "as zeros");
        let e = window.take_error().expect("the read failure is kept for the MoveTo");
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
        assert!(window.take_error().is_none(), "reported once");
    }
}
