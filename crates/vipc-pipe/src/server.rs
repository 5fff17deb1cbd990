//! The pipe server: one V process per pipe, registered as `pipe:NAME`
//! (scope Any), answering open/read/write/close/heartbeat requests. A read of
//! an empty pipe and a write to a full one are answered later: the server
//! withholds the reply (000 §3.7), so the client simply stays blocked in Send.

use crate::error::{PipeError, PipeResult};
use crate::proto::{self, get, put};
use crate::state::{Mode, PipeState};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use vipc::{Message, Node, Pid, Process, ReceiveInfo, Scope};

/// Largest write segment taken with the request itself (the rest is read with MoveFrom).
pub const INLINE: usize = 64 * 1024;

/// How a pipe server is set up.
#[derive(Clone, Debug)]
pub struct PipeConfig {
    /// Bytes the pipe buffers; also the largest atomic write. Writers block when it is full.
    pub capacity: usize,
    /// An end not heard from (request or heartbeat) for this long is closed
    /// as dead. At least [`MIN_LEASE`]: a client's heartbeats come every
    /// quarter lease but at most every 10 ms, so a shorter one closed live ends.
    pub lease: Duration,
    /// How often the server checks leases: [`MIN_TICK`] to `lease` (a dead
    /// end is closed `lease` to `lease + tick` after it was last heard).
    pub tick: Duration,
    /// Most ends open at once; also the most reads and writes held waiting at once.
    pub max_ends: usize,
}

/// The shortest lease a server takes.
pub const MIN_LEASE: Duration = Duration::from_millis(100);

/// The shortest lease-checking period (each tick is an exchange with the server).
pub const MIN_TICK: Duration = Duration::from_millis(1);

impl Default for PipeConfig {
    fn default() -> PipeConfig {
        PipeConfig {
            capacity: 1 << 20,
            lease: Duration::from_secs(5),
            tick: Duration::from_millis(500),
            max_ends: 1024,
        }
    }
}

/// A running pipe server. Dropping it (or [`PipeServer::stop`]) stops it.
#[derive(Debug)]
pub struct PipeServer {
    name: String,
    pid: Pid,
    node: Node,
    token: u32,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl PipeServer {
    /// Starts the server of pipe `name` on `node` and registers it as `pipe:NAME`.
    pub fn start(node: &Node, name: &str, cfg: PipeConfig) -> PipeResult<PipeServer> {
        if name.is_empty() || name.len() > proto::MAX_NAME {
            return Err(PipeError::BadName(name.to_string()));
        }
        // The lease travels in whole milliseconds.
        let lease_ms = cfg.lease.as_millis();
        if cfg.capacity == 0
            || cfg.capacity > u32::MAX as usize / 2
            || cfg.lease < MIN_LEASE
            || lease_ms > u128::from(u32::MAX)
            || cfg.tick < MIN_TICK
            || cfg.tick > cfg.lease
            || cfg.max_ends == 0
        {
            return Err(PipeError::Protocol("invalid pipe configuration".into()));
        }
        let token = rand_token();
        let stopping = Arc::new(AtomicBool::new(false));
        let (pid, thread) = {
            let cfg = cfg.clone();
            node.spawn_server(&proto::service_name(name), Scope::Any, move |p| Server::new(cfg, token).run(&p))
                .map_err(|e| match e {
                    vipc::Error::Protocol(vipc::ProtocolError::NameTaken(by)) => PipeError::Taken(name.into(), by),
                    e => e.into(),
                })?
        };
        let server =
            PipeServer { name: name.to_string(), pid, node: node.clone(), token, stopping, thread: Some(thread) };
        // Dropped, and so stopped, if its ticker cannot start.
        let (stop, tick) = (server.stopping.clone(), cfg.tick);
        node.spawn(move |p| ticker(&p, pid, tick, &stop))?;
        Ok(server)
    }

    /// The server process.
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// The pipe's name (registered as `pipe:NAME`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stops the server: held readers get EOF if no writer is open, else
    /// ESHUTDOWN (their stream is cut), held writers ESHUTDOWN; the name is removed.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let Some(thread) = self.thread.take() else { return };
        self.stopping.store(true, Ordering::SeqCst);
        // Not a newer server's under the same name.
        let _ = self.node.unset_pid(&proto::service_name(&self.name), self.pid);
        if let Ok(p) = self.node.attach() {
            let mut m = proto::request(proto::OP_STOP, 0, self.token);
            if p.send(&mut m, self.pid).is_ok() {
                let _ = thread.join();
            }
        }
    }
}

impl Drop for PipeServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn rand_token() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    (h.finish() as u32) | 1
}

/// Whether a reply or move failed because the client gave up its Send (a
/// deadline): it is alive and its end stays open, unlike a client that is gone.
fn gave_up(e: &vipc::Error) -> bool {
    matches!(e, vipc::Error::Protocol(vipc::ProtocolError::NotAwaitingReply(_)))
}

/// Wakes the server every `tick` so that it expires dead ends.
fn ticker(p: &Process, server: Pid, tick: Duration, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(tick);
        let mut m = proto::request(proto::OP_TICK, 0, 0);
        if p.send(&mut m, server).is_err() {
            return;
        }
    }
}

/// A read request waiting for data.
struct HeldRead {
    from: Pid,
    end: u32,
    cap: usize,
    msg: Message,
}

/// A write request waiting for room.
struct HeldWrite {
    from: Pid,
    end: u32,
    len: usize,
    /// The first bytes of the data, appended to the request (all of them if it fitted in one packet).
    inline: Vec<u8>,
    msg: Message,
}

struct Server {
    cfg: PipeConfig,
    token: u32,
    st: PipeState,
    readers: VecDeque<HeldRead>,
    writers: VecDeque<HeldWrite>,
    scratch: Vec<u8>,
    /// When the last TICK was served: a much later one means the server
    /// itself was held up (a MoveFrom or MoveTo to a slow client), and the
    /// heartbeats of live ends may be queued behind it.
    last_tick: Option<Instant>,
}

/// Whether a TICK served at `now` comes two ticks or more after the last
/// one served: the server itself was held up meanwhile.
fn held_up(last_tick: Option<Instant>, now: Instant, tick: Duration) -> bool {
    last_tick.is_some_and(|t| now.saturating_duration_since(t) > 2 * tick)
}

fn reply_msg(req: &Message, status: u8, count: u32) -> Message {
    let mut m = *req;
    m[0] = status;
    m[1] = proto::VERSION;
    put(&mut m, 8, count);
    m
}

impl Server {
    fn new(cfg: PipeConfig, token: u32) -> Server {
        // End ids from a seed of their own: seeded with the token, the first
        // end's id was the token, and any client could stop the server.
        let st = PipeState::new(cfg.capacity, cfg.max_ends, rand_token());
        let (readers, writers) = (VecDeque::new(), VecDeque::new());
        Server { cfg, token, st, readers, writers, scratch: Vec::new(), last_tick: None }
    }

    fn run(mut self, p: &Process) {
        let mut inbuf = vec![0u8; INLINE];
        loop {
            let mut msg: Message = [0; 32];
            let info = match p.receive_with_segment(&mut msg, &mut inbuf) {
                Ok(i) => i,
                Err(vipc::Error::NodeStopped) => return,
                Err(e) => {
                    tracing::debug!("pipe server: receive failed: {e}");
                    return;
                }
            };
            if msg[1] != proto::VERSION {
                self.answer(p, info.from, reply_msg(&msg, proto::EPROTO, 0));
                continue;
            }
            if msg[0] == proto::OP_STOP && get(&msg, 8) == self.token {
                self.stop(p);
                let _ = p.reply(&reply_msg(&msg, proto::OK, 0), info.from);
                return;
            }
            self.request(p, &msg, &info, &inbuf);
            self.progress(p);
            self.shed(p, info.from);
        }
    }

    /// If more requests wait than the server holds (`max_ends`), answers
    /// `from`'s, the newest, with EAGAIN: it cannot be served now.
    fn shed(&mut self, p: &Process, from: Pid) {
        if self.readers.len() + self.writers.len() <= self.cfg.max_ends {
            return;
        }
        let held = if self.readers.back().is_some_and(|r| r.from == from) {
            self.readers.pop_back().map(|r| r.msg)
        } else if self.writers.back().is_some_and(|w| w.from == from) {
            self.writers.pop_back().map(|w| w.msg)
        } else {
            None
        };
        if let Some(msg) = held {
            self.answer(p, from, reply_msg(&msg, proto::EAGAIN, 0));
        }
    }

    /// Replies; false if the client is gone (one that gave up its Send is not).
    fn answer(&mut self, p: &Process, to: Pid, m: Message) -> bool {
        match p.reply(&m, to) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!("pipe server: reply to {to} failed: {e}");
                gave_up(&e)
            }
        }
    }

    fn request(&mut self, p: &Process, msg: &Message, info: &ReceiveInfo, inbuf: &[u8]) {
        let now = Instant::now();
        let end = get(msg, 4);
        let from = info.from;
        // A process sends again only once its last Send is over (answered,
        // or given up with a deadline): whatever it had waiting here is
        // stale, and must not be answered into its new exchange.
        self.readers.retain(|r| r.from != from);
        self.writers.retain(|w| w.from != from);
        match msg[0] {
            proto::OP_OPEN => {
                let mode = match get(msg, 8) {
                    proto::MODE_READ => Mode::Read,
                    proto::MODE_WRITE => Mode::Write,
                    _ => {
                        self.answer(p, from, reply_msg(msg, proto::EINVAL, 0));
                        return;
                    }
                };
                match self.st.open(mode, now) {
                    Some(id) => {
                        let mut m = reply_msg(msg, proto::OK, self.st.capacity() as u32);
                        put(&mut m, 4, id);
                        put(&mut m, 12, self.cfg.lease.as_millis().min(u32::MAX as u128) as u32);
                        if !self.answer(p, from, m) {
                            self.close_end(p, id);
                        }
                    }
                    None => {
                        self.answer(p, from, reply_msg(msg, proto::EMFILE, 0));
                    }
                }
            }
            proto::OP_READ => match self.st.touch(end, now) {
                None => {
                    self.answer(p, from, reply_msg(msg, proto::EBADF, 0));
                }
                Some(Mode::Write) => {
                    self.answer(p, from, reply_msg(msg, proto::EINVAL, 0));
                }
                Some(Mode::Read) if !info.access.write || info.segment_size == 0 => {
                    self.answer(p, from, reply_msg(msg, proto::EINVAL, 0));
                }
                Some(Mode::Read) => {
                    self.readers.push_back(HeldRead { from, end, cap: info.segment_size as usize, msg: *msg });
                }
            },
            proto::OP_WRITE => match self.st.touch(end, now) {
                None => {
                    self.answer(p, from, reply_msg(msg, proto::EBADF, 0));
                }
                Some(Mode::Read) => {
                    self.answer(p, from, reply_msg(msg, proto::EINVAL, 0));
                }
                Some(Mode::Write) => {
                    let len = info.segment_size as usize;
                    if len > 0 && !info.access.read {
                        self.answer(p, from, reply_msg(msg, proto::EINVAL, 0));
                    } else if len > self.st.capacity() {
                        self.answer(p, from, reply_msg(msg, proto::EMSGSIZE, 0));
                    } else if len == 0 {
                        self.answer(p, from, reply_msg(msg, proto::OK, 0));
                    } else {
                        let inline = inbuf[..info.len.min(len)].to_vec();
                        self.writers.push_back(HeldWrite { from, end, len, inline, msg: *msg });
                    }
                }
            },
            proto::OP_CLOSE => {
                let status = if self.st.touch(end, now).is_some() { proto::OK } else { proto::EBADF };
                self.close_end(p, end);
                self.answer(p, from, reply_msg(msg, status, 0));
            }
            proto::OP_HEARTBEAT => {
                let status = if self.st.touch(end, now).is_some() { proto::OK } else { proto::EBADF };
                self.answer(p, from, reply_msg(msg, status, 0));
            }
            proto::OP_STAT => {
                let (r, w) = self.st.counts();
                let mut m = reply_msg(msg, proto::OK, self.st.buf.len() as u32);
                put(&mut m, 12, r as u32);
                put(&mut m, 16, w as u32);
                put(&mut m, 20, self.readers.len() as u32);
                put(&mut m, 24, self.writers.len() as u32);
                put(&mut m, 28, self.st.capacity() as u32);
                self.answer(p, from, m);
            }
            proto::OP_TICK => {
                self.answer(p, from, reply_msg(msg, proto::OK, 0));
                // After a stall of the server's own (two ticks or more
                // since the last), the ends' heartbeats may wait in the
                // queue behind this TICK: no end expires until the next.
                let stalled = held_up(self.last_tick, now, self.cfg.tick);
                self.last_tick = Some(now);
                if stalled {
                    return;
                }
                for id in self.st.expired(now, self.cfg.lease) {
                    tracing::debug!("pipe server: end {id} expired (no heartbeat)");
                    self.close_end(p, id);
                }
            }
            _ => {
                self.answer(p, from, reply_msg(msg, proto::ENOSYS, 0));
            }
        }
    }

    /// Closes an end and answers its held requests with EBADF.
    fn close_end(&mut self, p: &Process, id: u32) {
        if self.st.close(id).is_none() {
            return;
        }
        let mut gone = Vec::new();
        self.readers.retain(|r| {
            let keep = r.end != id;
            if !keep {
                gone.push((r.from, r.msg));
            }
            keep
        });
        self.writers.retain(|w| {
            let keep = w.end != id;
            if !keep {
                gone.push((w.from, w.msg));
            }
            keep
        });
        for (from, msg) in gone {
            self.answer(p, from, reply_msg(&msg, proto::EBADF, 0));
        }
    }

    /// Answers every held request that can be answered now.
    fn progress(&mut self, p: &Process) {
        loop {
            let mut changed = false;
            if self.st.broken() {
                while let Some(w) = self.writers.pop_front() {
                    if !self.answer(p, w.from, reply_msg(&w.msg, proto::EPIPE, 0)) {
                        self.close_end(p, w.end);
                    }
                    changed = true;
                }
            }
            while self.writers.front().is_some_and(|w| w.len <= self.st.room()) && !self.st.broken() {
                let Some(w) = self.writers.pop_front() else { break };
                changed = true;
                // The rest of a segment larger than one packet is read with MoveFrom, after the appended part.
                let rest = w.len - w.inline.len();
                self.scratch.resize(rest, 0);
                let moved =
                    if rest == 0 { Ok(()) } else { p.move_from(w.from, w.inline.len() as u32, &mut self.scratch) };
                // Written only once the writer has its answer: one that gave
                // up meanwhile was told its write failed, and it did.
                match moved.and_then(|()| p.reply(&reply_msg(&w.msg, proto::OK, w.len as u32), w.from)) {
                    Ok(()) => {
                        self.st.buf.extend(w.inline.iter());
                        self.st.buf.extend(self.scratch.iter());
                    }
                    Err(e) if gave_up(&e) => {}
                    Err(e) => {
                        tracing::debug!("pipe server: writing from {} failed: {e}", w.from);
                        // A writer still waiting (behind a slow link) is told, not left waiting.
                        self.answer(p, w.from, reply_msg(&w.msg, proto::EIO, 0));
                        self.close_end(p, w.end);
                    }
                }
            }
            while let Some(r) = self.readers.front() {
                let (from, end, cap, msg) = (r.from, r.end, r.cap, r.msg);
                if !self.st.buf.is_empty() {
                    self.readers.pop_front();
                    changed = true;
                    let n = cap.min(self.st.buf.len());
                    let data = &self.st.buf.make_contiguous()[..n];
                    let m = reply_msg(&msg, proto::OK, n as u32);
                    let sent = match p.reply_with_segment(&m, from, 0, data) {
                        Err(vipc::Error::Protocol(vipc::ProtocolError::TooLarge { .. })) => {
                            p.move_to(from, 0, data).and_then(|()| p.reply(&m, from))
                        }
                        r => r,
                    };
                    match sent {
                        Ok(()) => {
                            self.st.buf.drain(..n);
                        }
                        // The reader gave up: the bytes stay for the next read.
                        Err(e) if gave_up(&e) => {}
                        Err(e) => {
                            tracing::debug!("pipe server: reading to {from} failed: {e}");
                            self.answer(p, from, reply_msg(&msg, proto::EIO, 0));
                            self.close_end(p, end);
                        }
                    }
                } else if self.st.at_eof() {
                    self.readers.pop_front();
                    changed = true;
                    if !self.answer(p, from, reply_msg(&msg, proto::EOF, 0)) {
                        self.close_end(p, end);
                    }
                } else {
                    break;
                }
            }
            if !changed {
                break;
            }
        }
        self.st.maybe_reset();
    }

    /// Answers everything held before the server goes away.
    fn stop(&mut self, p: &Process) {
        // A reader whose stream is cut (a writer is still open) must not take it for its end.
        let read_status = if self.st.counts().1 > 0 { proto::ESHUTDOWN } else { proto::EOF };
        for r in std::mem::take(&mut self.readers) {
            self.answer(p, r.from, reply_msg(&r.msg, read_status, 0));
        }
        for w in std::mem::take(&mut self.writers) {
            self.answer(p, w.from, reply_msg(&w.msg, proto::ESHUTDOWN, 0));
        }
    }
}

#[cfg(test)]
mod stall_tests {
    use super::held_up;
    use std::time::{Duration, Instant};

    /// Ends expire on a TICK only if the server was not itself held up
    /// since the last one (their heartbeats may be queued behind it).
    #[test]
    fn a_tick_after_a_stall_of_the_server_expires_nothing() {
        let (t0, tick) = (Instant::now(), Duration::from_millis(500));
        assert!(!held_up(None, t0, tick), "the first tick");
        assert!(!held_up(Some(t0), t0 + tick, tick), "on time");
        assert!(!held_up(Some(t0), t0 + 2 * tick, tick), "a little late");
        assert!(held_up(Some(t0), t0 + Duration::from_secs(5), tick), "after a 5 s MoveFrom");
    }
}
