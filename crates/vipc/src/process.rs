//! V processes: a thread with a pid, and the IPC primitives it calls.

use crate::filemap::{read_full, FileWindow};
use crate::runtime::{Lead, Lend, Shared};
use crate::{Error, Result};
use std::fs::File;
use std::sync::{Arc, Mutex};
use vipc_engine::{
    Access, AliveHosts, Completion, GroupOutcome, HostId, Message, Pid, Reliable, ReplyMode, Scope, Segment,
    SendOptions, Stats,
};

/// A segment of the caller's memory lent to the receiver for one Send.
///
/// The bytes are copied into the node when the Send starts (into an
/// allocation the process reuses); with write access they are copied back
/// into the caller's buffer when the reply arrives. A read-only segment sent
/// to a remote process is also lent as it is: the receiver's MoveFrom
/// chunks are sent straight from the caller's buffer.
#[derive(Debug)]
pub enum SegmentRef<'a> {
    /// The receiver may read (MoveFrom) the segment; its first part travels with the Send.
    Read(&'a [u8]),
    /// The receiver may write (MoveTo, reply with segment) the segment.
    Write(&'a mut [u8]),
    /// The receiver may read and write the segment.
    ReadWrite(&'a mut [u8]),
}

/// What [`Process::receive_with_segment`] returns besides the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiveInfo {
    /// The original sender: the process to reply to.
    pub from: Pid,
    /// The process that forwarded the message (equal to `from` if not forwarded).
    pub forwarder: Pid,
    /// Bytes of the appended segment placed at the start of the buffer.
    pub len: usize,
    /// Size of the whole segment the sender granted (0 if none).
    pub segment_size: u32,
    /// Access the sender granted to it.
    pub access: Access,
}

/// A V process: a pid on a node, used by one thread at a time. Blocking
/// primitives block the calling thread; another thread's blocking call on
/// the same process meanwhile is refused with
/// [`ProtocolError::Busy`](crate::ProtocolError::Busy). Dropping it destroys the process:
/// senders waiting on it fail at once and its own exchanges are cleaned up.
pub struct Process {
    shared: Arc<Shared>,
    pid: Pid,
    /// The allocation of the last segment, kept for the next one: a fresh
    /// allocation of a large segment costs a page fault per page.
    spare: Mutex<Vec<u8>>,
}

/// Largest segment allocation a process keeps for reuse.
const SPARE_SEGMENT_MAX: usize = 32 << 20;

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process").field("pid", &self.pid).finish()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.shared.destroy_process(self.pid);
    }
}

/// `len` as a u32 (offsets and lengths on the wire are 32 bits).
fn u32_len(len: usize, what: &'static str) -> Result<u32> {
    u32::try_from(len)
        .map_err(|_| vipc_engine::Error::TooLarge { what, len: len as u64, limit: u32::MAX as u64 }.into())
}

fn mismatch(what: &str, c: &Completion) -> Error {
    Error::Internal(format!("{what} completed with {c:?}"))
}

/// The result of a MoveTo's completion.
fn moved(what: &str, c: Completion) -> Result<()> {
    match c {
        Completion::Move(Ok(_)) => Ok(()),
        Completion::Move(Err(e)) => Err(e.into()),
        c => Err(mismatch(what, &c)),
    }
}

impl Process {
    pub(crate) fn new(shared: Arc<Shared>, pid: Pid) -> Process {
        Process { shared, pid, spare: Mutex::new(Vec::new()) }
    }

    /// The node's copy of a segment, in the spare allocation if there is one.
    fn copy_in(&self, b: &[u8]) -> Vec<u8> {
        let mut v = std::mem::take(&mut *self.spare.lock().unwrap_or_else(|e| e.into_inner()));
        v.clear();
        v.extend_from_slice(b);
        v
    }

    /// Keeps a segment's allocation for the next Send.
    fn recycle(&self, v: Vec<u8>) {
        if v.capacity() <= SPARE_SEGMENT_MAX {
            *self.spare.lock().unwrap_or_else(|e| e.into_inner()) = v;
        }
    }

    /// Whether a call answered by `peer` completes from the network: then
    /// this thread reads the socket while it waits (see [`crate::Node`]).
    fn lead_to(&self, peer: Pid) -> Lead {
        if peer.host() == self.pid.host() {
            Lead::No
        } else {
            Lead::Yes
        }
    }

    /// This process's pid.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// The counters of the node this process lives on.
    pub fn node_stats(&self) -> Stats {
        self.shared.stats()
    }

    /// The pid registered on this node under `name`, as a GetPid from another
    /// node (`remote`) or from this one would see it; never blocks.
    pub fn registered(&self, name: &str, remote: bool) -> Result<Option<Pid>> {
        self.shared.call(Some(self.pid), |e, _| Ok(e.registered(name.as_bytes(), remote)))
    }

    /// Whether `pid` is a live process of this process's node (false for
    /// any other host's pid: a node knows only its own processes). A server
    /// holding work for a local process uses it to notice the process gone.
    pub fn is_local_process(&self, pid: Pid) -> Result<bool> {
        self.shared.call(Some(self.pid), |e, _| Ok(e.is_alive(pid)))
    }

    /// The alive-host table of this process's node (see [`crate::Node::alive_hosts`]).
    pub fn alive_hosts(&self) -> Result<AliveHosts> {
        self.shared.call(Some(self.pid), |e, _| Ok(e.alive_hosts()))
    }

    /// The host in row `row` of the alive-host table as read under sequence
    /// number `seq` (fails with `StaleTable` if the table changed since).
    pub fn alive_host_at(&self, row: usize, seq: u32) -> Result<HostId> {
        self.shared.call(Some(self.pid), |e, _| e.alive_host_at(row, seq))
    }

    /// Forgets every host of the alive-host table and asks them to announce
    /// themselves again (they are back within about 10 ms).
    pub fn reset_alive_hosts(&self) -> Result<()> {
        self.shared.call(Some(self.pid), |e, now| {
            e.reset_alive(now);
            Ok(())
        })
    }

    /// Send: sends the 32-byte `msg` to `to` and blocks until the reply, which
    /// overwrites `msg`. Returns the replier (differs from `to` after a Forward).
    pub fn send(&self, msg: &mut Message, to: Pid) -> Result<Pid> {
        self.send_with(msg, to, None, SendOptions::default())
    }

    /// Send with a segment of the caller's memory lent to the receiver and/or options.
    pub fn send_with(
        &self,
        msg: &mut Message,
        to: Pid,
        segment: Option<SegmentRef<'_>>,
        opts: SendOptions,
    ) -> Result<Pid> {
        let (me, m) = (self.pid, *msg);
        let lead = self.lead_to(to);
        let completion = match segment {
            // A read-only segment to a remote process: this thread lends `b`
            // for the exchange; the node copies only what the Send packet
            // appends, and MoveFrom chunks leave straight from `b`.
            Some(SegmentRef::Read(b)) if lead == Lead::Yes && self.shared.lends() => {
                self.shared.block(me, lead, Lend::Read(b), |e, now| e.send_lending(now, me, to, m, opts, b))?
            }
            // A write-only segment to a remote process: the node keeps no copy;
            // what the receiver writes is placed straight into `b`, lent
            // for the exchange (nothing to copy in, nothing to copy back).
            Some(SegmentRef::Write(b)) if lead == Lead::Yes => {
                let size = u32_len(b.len(), "segment")?;
                let lend = Lend::Write(b);
                self.shared.block(me, lead, lend, |e, now| e.send_lending_write(now, me, to, m, opts, size))?
            }
            segment => {
                let (seg, back) = self.segment_in(segment);
                let c = self.shared.block(me, lead, Lend::None, |e, now| e.send(now, me, to, m, opts, seg))?;
                copy_back(&c, back);
                c
            }
        };
        self.send_outcome(msg, completion, "send")
    }

    /// The node's copy of a segment the caller grants, and the buffer its
    /// written bytes go back to when the Send completes (if write-granted).
    fn segment_in<'a>(&self, segment: Option<SegmentRef<'a>>) -> (Option<Segment>, Option<&'a mut [u8]>) {
        match segment {
            None => (None, None),
            Some(SegmentRef::Read(b)) => (Some(Segment { data: self.copy_in(b), access: Access::READ }), None),
            Some(SegmentRef::Write(b)) => (Some(Segment { data: self.copy_in(b), access: Access::WRITE }), Some(b)),
            Some(SegmentRef::ReadWrite(b)) => {
                (Some(Segment { data: self.copy_in(b), access: Access::READ_WRITE }), Some(b))
            }
        }
    }

    /// The reply of a completed Send: overwrites `msg`, returns the replier.
    fn send_outcome(&self, msg: &mut Message, completion: Completion, what: &'static str) -> Result<Pid> {
        match completion {
            Completion::Send(Ok(o)) => {
                *msg = o.reply;
                if let Some(s) = o.segment {
                    self.recycle(s.data);
                }
                Ok(o.replier)
            }
            Completion::Send(Err(e)) => Err(e.into()),
            c => Err(mismatch(what, &c)),
        }
    }

    /// Receive: blocks until a message arrives (first come, first served),
    /// places it in `msg` and returns the sender.
    pub fn receive(&self, msg: &mut Message) -> Result<Pid> {
        Ok(self.receive_inner(msg, None, &mut [])?.from)
    }

    /// ReceiveSpecific: like [`Process::receive`], but only from `from`.
    pub fn receive_specific(&self, msg: &mut Message, from: Pid) -> Result<Pid> {
        Ok(self.receive_inner(msg, Some(from), &mut [])?.from)
    }

    /// ReceiveWithSegment: like [`Process::receive`], and places up to
    /// `buf.len()` bytes of the segment appended by the sender (the first part
    /// of a read-granted segment) at the start of `buf`.
    pub fn receive_with_segment(&self, msg: &mut Message, buf: &mut [u8]) -> Result<ReceiveInfo> {
        self.receive_inner(msg, None, buf)
    }

    fn receive_inner(&self, msg: &mut Message, only: Option<Pid>, buf: &mut [u8]) -> Result<ReceiveInfo> {
        let (me, cap) = (self.pid, buf.len());
        match self.shared.block(me, Lead::IfHot, Lend::None, |e, now| e.receive(now, me, only, cap))? {
            Completion::Receive(Ok(r)) => {
                *msg = r.msg;
                let len = r.segment.len().min(buf.len());
                buf[..len].copy_from_slice(&r.segment[..len]);
                Ok(ReceiveInfo {
                    from: r.from,
                    forwarder: r.forwarder,
                    len,
                    segment_size: r.segment_size,
                    access: r.access,
                })
            }
            Completion::Receive(Err(e)) => Err(e.into()),
            c => Err(mismatch("receive", &c)),
        }
    }

    /// Reply: sends `msg` as the reply to `to`, which must be awaiting a reply
    /// from this process. Never blocks.
    pub fn reply(&self, msg: &Message, to: Pid) -> Result<()> {
        let (me, m) = (self.pid, *msg);
        self.shared.call(Some(me), |e, now| e.reply(now, me, to, m, None))
    }

    /// ReplyWithSegment: replies and writes `data` at `offset` of the sender's
    /// write-granted segment, in the same packet (`data` must fit in one packet).
    pub fn reply_with_segment(&self, msg: &Message, to: Pid, offset: u32, data: &[u8]) -> Result<()> {
        let (me, m, d) = (self.pid, *msg, data.to_vec());
        self.shared.call(Some(me), |e, now| e.reply(now, me, to, m, Some((offset, d))))
    }

    /// Forward: passes the message of `sender` (awaiting a reply from this
    /// process) on to `to`, as if `sender` had sent `msg` to `to`. Never blocks.
    pub fn forward(&self, msg: &Message, sender: Pid, to: Pid) -> Result<()> {
        let (me, m) = (self.pid, *msg);
        self.shared.call(Some(me), |e, now| e.forward(now, me, sender, to, m))
    }

    /// MoveTo: writes `data` at `offset` of the write-granted segment of
    /// `dest`, which must be awaiting a reply from this process. Blocks until done.
    ///
    /// To a remote process (on a node without a key or fault injection) the data are sent
    /// straight from `data`, chunk by chunk, without being copied first.
    pub fn move_to(&self, dest: Pid, offset: u32, data: &[u8]) -> Result<()> {
        let (me, lead) = (self.pid, self.lead_to(dest));
        if lead == Lead::Yes && self.shared.lends() {
            let len = u32_len(data.len(), "move_to data")?;
            let c =
                self.shared.block(me, lead, Lend::Read(data), |e, now| e.move_to_lent(now, me, dest, offset, len))?;
            return moved("move_to", c);
        }
        self.move_owned(dest, offset, data.to_vec(), "move_to")
    }

    /// MoveTo of bytes the engine takes (a key's MAC, fault injection, or a
    /// local receiver); a remote receiver's acknowledgements are still read
    /// by this thread, not left to the background thread's grace.
    fn move_owned(&self, dest: Pid, offset: u32, data: Vec<u8>, what: &'static str) -> Result<()> {
        let (me, lead) = (self.pid, self.lead_to(dest));
        moved(what, self.shared.block(me, lead, Lend::None, |e, now| e.move_to(now, me, dest, offset, data))?)
    }

    /// MoveTo of `len` bytes of `file` from `file_offset`: as
    /// [`Process::move_to`] of those bytes. To a remote process on a node
    /// without a key or fault injection they are read from the file a run
    /// of datagrams at a time as they go, into a small buffer, never the
    /// whole move at once (elsewhere they are read into a buffer first).
    /// Bytes past the end of the file — also of a file cut short during the
    /// call — arrive as zeros. A failure to read the file is [`Error::Io`]
    /// (the bytes it could not read may have been sent as zeros).
    pub fn move_to_from_file(&self, dest: Pid, offset: u32, file: &File, file_offset: u64, len: u32) -> Result<()> {
        let (me, lead) = (self.pid, self.lead_to(dest));
        if lead == Lead::Yes && self.shared.lends() && len > 0 {
            let window = FileWindow::new(file, file_offset, len as usize)?;
            let c = self
                .shared
                .block(me, lead, Lend::File(&window), |e, now| e.move_to_lent(now, me, dest, offset, len))?;
            moved("move_to_from_file", c)?;
            return window.take_error().map_or(Ok(()), |e| Err(e.into()));
        }
        // The bytes are read into memory: only once the engine has said the
        // move may take place, not gigabytes read for a move it refuses.
        self.shared.call(Some(me), |e, _| e.check_move_to(me, dest, offset, u64::from(len)))?;
        // Copied into the engine anyway (a key, fault injection, a local
        // receiver): read straight into the buffer it takes, not into one
        // that is then copied (keyed 1 MiB, three alternating pairs of
        // medians: 0.93-1.07 -> 0.84-0.89 ms).
        let mut data = vec![0u8; len as usize];
        read_full(file, file_offset, &mut data)?;
        self.move_owned(dest, offset, data, "move_to_from_file")
    }

    /// MoveFrom: fills `buf` from `offset` of the read-granted segment of
    /// `src`, which must be awaiting a reply from this process. Blocks until done.
    ///
    /// From a remote process the data land in `buf` chunk by chunk as they arrive.
    pub fn move_from(&self, src: Pid, offset: u32, buf: &mut [u8]) -> Result<()> {
        let me = self.pid;
        let len = u32_len(buf.len(), "move_from buffer")?;
        if self.lead_to(src) == Lead::Yes {
            return match self
                .shared
                .block(me, Lead::Yes, Lend::Write(buf), |e, now| e.move_from_lent(now, me, src, offset, len))?
            {
                Completion::Move(Ok(_)) => Ok(()),
                Completion::Move(Err(e)) => Err(e.into()),
                c => Err(mismatch("move_from", &c)),
            };
        }
        match self.shared.block(me, Lead::No, Lend::None, |e, now| e.move_from(now, me, src, offset, len))? {
            Completion::Move(Ok(data)) => {
                let n = data.len().min(buf.len());
                buf[..n].copy_from_slice(&data[..n]);
                Ok(())
            }
            Completion::Move(Err(e)) => Err(e.into()),
            c => Err(mismatch("move_from", &c)),
        }
    }

    /// SetPid: registers `pid` under `name` with `scope`. A null pid removes the name.
    pub fn set_pid(&self, name: &str, pid: Pid, scope: Scope) -> Result<()> {
        self.shared.call(Some(self.pid), |e, _| e.set_pid(name.as_bytes(), pid, scope))
    }

    /// The most segment bytes a [`Process::reply_with_segment`] to `to` may
    /// carry in the reply packet: more must be moved (MoveTo) first. 0 if
    /// `to` awaits no reply here.
    pub fn reply_room(&self, to: Pid) -> Result<usize> {
        self.shared.call(Some(self.pid), |e, _| Ok(e.reply_room(to)))
    }

    /// [`crate::Node::unset_pid`].
    pub fn unset_pid(&self, name: &str, pid: Pid) -> Result<bool> {
        self.shared.call(Some(self.pid), |e, _| Ok(e.unset_pid(name.as_bytes(), pid)))
    }

    /// GetPid: looks `name` up in `scope`; a remote lookup broadcasts and the
    /// first answer wins. `None` if nobody has registered the name.
    pub fn get_pid(&self, name: &str, scope: Scope) -> Result<Option<Pid>> {
        let me = self.pid;
        let lead = if scope == Scope::Local { Lead::No } else { Lead::Yes };
        match self.shared.block(me, lead, Lend::None, |e, now| e.get_pid(now, me, name.as_bytes(), scope))? {
            Completion::GetPid(p) => Ok(p),
            c => Err(mismatch("get_pid", &c)),
        }
    }

    /// JoinGroup: makes this process a member of `group` (see [`crate::Node::allocate_group_id`]).
    pub fn join_group(&self, group: Pid) -> Result<()> {
        self.shared.call(Some(self.pid), |e, _| e.join_group(self.pid, group))
    }

    /// LeaveGroup: this process is no longer a member of `group`.
    pub fn leave_group(&self, group: Pid) -> Result<()> {
        self.shared.call(Some(self.pid), |e, _| e.leave_group(self.pid, group))
    }

    /// Send to a group: every member, on every node, receives `msg` from this
    /// process. With [`ReplyMode::One`] or [`ReplyMode::Many`] it blocks until
    /// the first reply, which overwrites `msg`, and returns the replier; with
    /// [`ReplyMode::None`] it returns [`Pid::NONE`] at once. After `Many` (or
    /// `None`), [`Process::get_reply`] collects the other replies until this
    /// process's next Send.
    pub fn send_group(&self, msg: &mut Message, group: Pid, mode: ReplyMode, opts: SendOptions) -> Result<Pid> {
        let (me, m) = (self.pid, *msg);
        let c = self.shared.block(me, Lead::Yes, Lend::None, |e, now| e.send_group(now, me, group, m, mode, opts))?;
        self.send_outcome(msg, c, "send_group")
    }

    /// Send to a group with a segment (000 §6.8): every member may read a
    /// read-granted segment (its first part comes with the message) until
    /// the first reply; a write-granted segment is written only by the
    /// first reply's segment ([`Process::reply_with_segment`]) — later
    /// replies' segments are dropped, and MoveTo by a member is refused.
    /// Reply mode `One` or `Many` (with `None` nothing could read it).
    pub fn send_group_with(
        &self,
        msg: &mut Message,
        group: Pid,
        mode: ReplyMode,
        segment: SegmentRef<'_>,
        opts: SendOptions,
    ) -> Result<Pid> {
        let (me, m) = (self.pid, *msg);
        let (seg, back) = self.segment_in(Some(segment));
        let seg = seg.expect("a segment was given");
        let c = self
            .shared
            .block(me, Lead::Yes, Lend::None, |e, now| e.send_group_with_segment(now, me, group, m, mode, opts, seg))?;
        copy_back(&c, back);
        self.send_outcome(msg, c, "send_group_with")
    }

    /// A reliable Send to a group (004): blocks until the mode's condition is
    /// met or cannot be — K or all members replied or got the message, all
    /// meaning the members on the hosts alive when the Send began — and says
    /// what it reached. Replies beyond the first wait for [`Process::get_reply`].
    pub fn send_reliable(&self, msg: &Message, group: Pid, mode: Reliable, opts: SendOptions) -> Result<GroupOutcome> {
        let (me, m) = (self.pid, *msg);
        match self.shared.block(me, Lead::Yes, Lend::None, |e, now| e.send_reliable(now, me, group, m, mode, opts))? {
            Completion::Group(o) => Ok(o),
            c => Err(mismatch("send_reliable", &c)),
        }
    }

    /// The hosts whose part of this process's last reliable Send was not
    /// complete (no acknowledgement, or in the REPLY modes fewer replies than
    /// members), until its next Send: after a `met: false` outcome, who was
    /// missing. Empty if the last Send was not reliable.
    pub fn reliable_missing(&self) -> Result<Vec<HostId>> {
        let me = self.pid;
        self.shared.call(Some(me), |e, _| Ok(e.reliable_missing(me).unwrap_or_default()))
    }

    /// GetReply: the next reply to this process's last group Send, waiting up
    /// to `limit` for one; `None` if none came in time. A zero `limit` only
    /// takes a reply already in, even after the deadline of `within`.
    pub fn get_reply(&self, limit: std::time::Duration) -> Result<Option<(Pid, Message)>> {
        let me = self.pid;
        let call = |limit| match self.shared.block(me, Lead::Yes, Lend::None, |e, now| e.get_reply(now, me, limit))? {
            Completion::GetReply(r) => Ok(r),
            c => Err(mismatch("get_reply", &c)),
        };
        if limit.is_zero() {
            crate::within::without_limit(|| call(limit))
        } else {
            call(crate::within::cap(limit)?)
        }
    }
}

/// Copies a completed Send's write-granted segment back into the caller's buffer.
fn copy_back(c: &Completion, back: Option<&mut [u8]>) {
    if let (Completion::Send(Ok(o)), Some(buf)) = (c, back) {
        if let Some(s) = &o.segment {
            let n = buf.len().min(s.data.len());
            buf[..n].copy_from_slice(&s.data[..n]);
        }
    }
}
