//! Pipe ends for clients on any node: [`PipeReader`] and [`PipeWriter`].
//!
//! Each end is a V process of the caller's node plus a heartbeat process
//! that tells the server every quarter lease that the end's owner is alive,
//! so that a reader or writer whose program died is noticed even when it is
//! not blocked in the server.

use crate::error::{PipeError, PipeResult};
use crate::proto::{self, get};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;
use vipc::{Message, Node, Pid, Process, Scope, SegmentRef, SendOptions};

/// Largest write the client sends in one request (less if the pipe is smaller).
pub const WRITE_CHUNK: usize = 256 * 1024;

/// One open end: the process that talks to the server and the heartbeat's stop switch.
#[derive(Debug)]
struct End {
    p: Process,
    server: Pid,
    id: u32,
    capacity: usize,
    heartbeat: Option<mpsc::Sender<()>>,
    closed: bool,
}

/// Finds the server of pipe `name` from a process of `node`.
pub fn lookup(p: &Process, name: &str) -> PipeResult<Pid> {
    if name.is_empty() || name.len() > proto::MAX_NAME {
        return Err(PipeError::BadName(name.to_string()));
    }
    p.get_pid(&proto::service_name(name), Scope::Any)?.ok_or_else(|| PipeError::NotFound(name.to_string()))
}

fn status(m: &Message) -> PipeResult<()> {
    match m[0] {
        proto::OK => Ok(()),
        e => Err(PipeError::Errno(e)),
    }
}

/// [`status`] of a read or write on an end this client holds open: EBADF
/// then means the server lost it.
fn end_status(m: &Message) -> PipeResult<()> {
    match m[0] {
        proto::EBADF => Err(PipeError::EndLost),
        _ => status(m),
    }
}

impl End {
    fn open(node: &Node, name: &str, mode: u32) -> PipeResult<End> {
        let p = node.attach()?;
        let server = lookup(&p, name)?;
        let mut m = proto::request(proto::OP_OPEN, 0, mode);
        p.send(&mut m, server)?;
        status(&m)?;
        let (id, capacity, lease_ms) = (get(&m, 4), get(&m, 8) as usize, get(&m, 12));
        if id == 0 || capacity == 0 || lease_ms == 0 {
            return Err(PipeError::Protocol(format!("open answered end {id}, capacity {capacity}, lease {lease_ms}")));
        }
        let (tx, rx) = mpsc::channel::<()>();
        let every = Duration::from_millis(u64::from(lease_ms) / 4).max(Duration::from_millis(10));
        node.spawn(move |hp| loop {
            match rx.recv_timeout(every) {
                Err(RecvTimeoutError::Timeout) => {
                    let mut m = proto::request(proto::OP_HEARTBEAT, id, 0);
                    if hp.send(&mut m, server).is_err() || m[0] != proto::OK {
                        return;
                    }
                }
                _ => return,
            }
        })?;
        Ok(End { p, server, id, capacity, heartbeat: Some(tx), closed: false })
    }

    fn close(&mut self) -> PipeResult<()> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        self.heartbeat = None;
        let mut m = proto::request(proto::OP_CLOSE, self.id, 0);
        self.p.send(&mut m, self.server)?;
        status(&m)
    }
}

impl Drop for End {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

/// The reading end of a pipe. Reads block until data arrive or the pipe is at end of file.
#[derive(Debug)]
pub struct PipeReader {
    end: End,
}

impl PipeReader {
    /// Opens pipe `name` (served anywhere in the cluster) for reading, from `node`.
    pub fn open(node: &Node, name: &str) -> PipeResult<PipeReader> {
        Ok(PipeReader { end: End::open(node, name, proto::MODE_READ)? })
    }

    /// The pipe's capacity: reads larger than this return at most this much.
    pub fn capacity(&self) -> usize {
        self.end.capacity
    }

    /// The server's id for this end.
    pub fn end_id(&self) -> u32 {
        self.end.id
    }

    /// Reads what is buffered (up to `buf.len()`), waiting if the pipe is
    /// empty; 0 means end of file (or an empty `buf`).
    pub fn read_chunk(&mut self, buf: &mut [u8]) -> PipeResult<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.end.closed {
            return Err(PipeError::Errno(proto::EBADF));
        }
        let n = buf.len().min(self.end.capacity);
        let mut m = proto::request(proto::OP_READ, self.end.id, 0);
        let e = &self.end;
        e.p.send_with(&mut m, e.server, Some(SegmentRef::Write(&mut buf[..n])), SendOptions::default())?;
        match m[0] {
            proto::EOF => Ok(0),
            _ => {
                end_status(&m)?;
                let got = get(&m, 8) as usize;
                if got == 0 || got > n {
                    return Err(PipeError::Protocol(format!("read of {n} bytes answered {got}")));
                }
                Ok(got)
            }
        }
    }

    /// Closes the end, reporting a failure that dropping would ignore.
    pub fn close(mut self) -> PipeResult<()> {
        self.end.close()
    }
}

impl std::io::Read for PipeReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        Ok(self.read_chunk(buf)?)
    }
}

/// The writing end of a pipe. A write blocks while the pipe is full.
#[derive(Debug)]
pub struct PipeWriter {
    end: End,
}

impl PipeWriter {
    /// Opens pipe `name` (served anywhere in the cluster) for writing, from `node`.
    pub fn open(node: &Node, name: &str) -> PipeResult<PipeWriter> {
        Ok(PipeWriter { end: End::open(node, name, proto::MODE_WRITE)? })
    }

    /// The pipe's capacity: writes up to this size are atomic.
    pub fn capacity(&self) -> usize {
        self.end.capacity
    }

    /// The server's id for this end.
    pub fn end_id(&self) -> u32 {
        self.end.id
    }

    /// Writes the first `min(data.len(), capacity, WRITE_CHUNK)` bytes as one
    /// atomic piece, waiting for room; returns how many. EPIPE once every reader has gone.
    pub fn write_chunk(&mut self, data: &[u8]) -> PipeResult<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        if self.end.closed {
            return Err(PipeError::Errno(proto::EBADF));
        }
        let n = data.len().min(self.end.capacity).min(WRITE_CHUNK);
        let mut m = proto::request(proto::OP_WRITE, self.end.id, 0);
        let e = &self.end;
        e.p.send_with(&mut m, e.server, Some(SegmentRef::Read(&data[..n])), SendOptions::default())?;
        end_status(&m)?;
        let took = get(&m, 8) as usize;
        if took != n {
            return Err(PipeError::Protocol(format!("write of {n} bytes answered {took}")));
        }
        Ok(n)
    }

    /// Writes all of `data`.
    pub fn write_all_chunks(&mut self, mut data: &[u8]) -> PipeResult<()> {
        while !data.is_empty() {
            let n = self.write_chunk(data)?;
            data = &data[n..];
        }
        Ok(())
    }

    /// Closes the end (readers get end of file once all writers have closed).
    pub fn close(mut self) -> PipeResult<()> {
        self.end.close()
    }
}

impl std::io::Write for PipeWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Ok(self.write_chunk(buf)?)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A pipe's counters as the server reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipeStat {
    /// Bytes buffered.
    pub buffered: usize,
    /// Open readers.
    pub readers: usize,
    /// Open writers.
    pub writers: usize,
    /// Read requests the server is holding (readers waiting for data).
    pub held_reads: usize,
    /// Write requests the server is holding (writers waiting for room).
    pub held_writes: usize,
    /// The pipe's capacity.
    pub capacity: usize,
}

/// Asks the server of pipe `name` for its counters, from process `p`.
pub fn stat(p: &Process, name: &str) -> PipeResult<PipeStat> {
    let server = lookup(p, name)?;
    let mut m = proto::request(proto::OP_STAT, 0, 0);
    p.send(&mut m, server)?;
    status(&m)?;
    Ok(PipeStat {
        buffered: get(&m, 8) as usize,
        readers: get(&m, 12) as usize,
        writers: get(&m, 16) as usize,
        held_reads: get(&m, 20) as usize,
        held_writes: get(&m, 24) as usize,
        capacity: get(&m, 28) as usize,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ebadf_on_an_open_end_says_the_server_lost_it() {
        let mut m: Message = [0; 32];
        m[0] = proto::EBADF;
        let e = end_status(&m).unwrap_err();
        assert!(matches!(e, PipeError::EndLost), "{e}");
        assert_eq!(e.errno(), 9, "EBADF");
        assert!(e.to_string().contains("restarted"), "{e}");
        assert!(matches!(status(&m), Err(PipeError::Errno(proto::EBADF))), "elsewhere it stays the errno");
        m[0] = proto::EPIPE;
        assert!(end_status(&m).unwrap_err().is_broken_pipe());
    }
}
