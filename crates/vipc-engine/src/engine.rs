//! The engine: API entry points, packet dispatch and timers.

use crate::*;
use std::net::SocketAddr;

/// One node's protocol state machine. See the crate docs.
pub struct Engine {}

impl Engine {
    /// A new engine. With `HostIdConfig::Allocate` it starts announcing a
    /// candidate host id at once; [`Event::HostReady`] says when it is done.
    pub fn new(config: Config, now: Time) -> Engine {
        todo!()
    }

    /// The logical host id, once allocated.
    pub fn host(&self) -> Option<HostId> {
        todo!()
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        todo!()
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        todo!()
    }

    /// Creates a local process (a V process is a thread with a pid).
    /// Errors: `NotReady` before the host id is known, `Limit`.
    pub fn create_process(&mut self) -> Result<Pid, Error> {
        todo!()
    }

    /// True if `pid` is a live local process.
    pub fn is_alive(&self, pid: Pid) -> bool {
        todo!()
    }

    /// Destroys a local process: its blocked call is abandoned (no completion),
    /// local senders waiting on it fail with `NoSuchProcess` at once, remote ones
    /// get an nAck, and its own remote exchange is cancelled at the peer.
    pub fn destroy_process(&mut self, now: Time, pid: Pid) -> Result<(), Error> {
        todo!()
    }

    /// Send: `from` blocks until [`Completion::Send`]. Misuse and a
    /// nonexistent local destination fail at once with `Err`.
    pub fn send(&mut self, now: Time, from: Pid, to: Pid, msg: Message, opts: SendOptions, segment: Option<Segment>) -> Result<(), Error> {
        todo!()
    }

    /// Receive (FCFS) or, with `only = Some(p)`, ReceiveSpecific. `pid` blocks
    /// until [`Completion::Receive`]; up to `segment_capacity` bytes of an
    /// appended segment are returned with the message.
    pub fn receive(&mut self, now: Time, pid: Pid, only: Option<Pid>, segment_capacity: usize) -> Result<(), Error> {
        todo!()
    }

    /// Reply to `to`, which must be awaiting a reply from `from`. With a
    /// segment `(offset, bytes)`, the bytes are written at `offset` of the
    /// sender's write-granted segment (they must fit in one packet). Never blocks.
    pub fn reply(&mut self, now: Time, from: Pid, to: Pid, msg: Message, segment: Option<(u32, Vec<u8>)>) -> Result<(), Error> {
        todo!()
    }

    /// Forward the message of `sender` (awaiting a reply from `from`) to `to`,
    /// as if `sender` had sent `msg` to `to`. Never blocks.
    pub fn forward(&mut self, now: Time, from: Pid, sender: Pid, to: Pid, msg: Message) -> Result<(), Error> {
        todo!()
    }

    /// MoveTo: write `data` at `offset` of the write-granted segment of `dest`,
    /// which must be awaiting a reply from `from`. Blocks until [`Completion::Move`].
    pub fn move_to(&mut self, now: Time, from: Pid, dest: Pid, offset: u32, data: Vec<u8>) -> Result<(), Error> {
        todo!()
    }

    /// MoveFrom: read `len` bytes at `offset` of the read-granted segment of
    /// `src`, which must be awaiting a reply from `from`. Blocks until [`Completion::Move`].
    pub fn move_from(&mut self, now: Time, from: Pid, src: Pid, offset: u32, len: u32) -> Result<(), Error> {
        todo!()
    }

    /// SetPid: registers `pid` under `name` with `scope` (overwrites). A null
    /// pid removes the registration. Never blocks.
    pub fn set_pid(&mut self, name: &[u8], pid: Pid, scope: Scope) -> Result<(), Error> {
        todo!()
    }

    /// GetPid: `caller` blocks until [`Completion::GetPid`]. Local scope
    /// completes at once; remote scope broadcasts and the first answer wins.
    pub fn get_pid(&mut self, now: Time, caller: Pid, name: &[u8], scope: Scope) -> Result<(), Error> {
        todo!()
    }

    /// Feeds one received datagram. Anything invalid is dropped and counted.
    pub fn handle_datagram(&mut self, now: Time, from: SocketAddr, bytes: &[u8]) {
        todo!()
    }

    /// Runs every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        todo!()
    }

    /// The earliest time [`Engine::handle_timeout`] has work to do.
    pub fn poll_timeout(&self) -> Option<Time> {
        todo!()
    }

    /// The next datagram to send.
    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        todo!()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        todo!()
    }
}
