//! The caller's own time limit on a blocking primitive — 002's completion
//! statement (`within`). The runtime sets it right after the blocking call;
//! when it passes first, the primitive is abandoned exactly as if the
//! process had given up: a queued local Send is unqueued, a remote one is
//! cancelled (a `Cancel` packet, as when the sender is destroyed), a
//! Receive or a MoveTo/MoveFrom simply ends. The process completes with
//! [`Error::Deadline`] and may call again at once.

use super::*;

impl Engine {
    /// Bounds `pid`'s current blocking primitive by `at`: if it is still
    /// blocked in it then, it completes with [`Error::Deadline`]. A process
    /// that is not blocked (its primitive already completed) is left alone.
    /// A reliable group Send ends as at its own deadline: with a
    /// [`Completion::Group`] whose condition was not met, reporting what it
    /// reached. GetPid and GetReply keep their own bounds: for them this
    /// does nothing.
    pub fn limit(&mut self, now: Time, pid: Pid, at: Time) -> Result<(), Error> {
        let p = self.procs.get_mut(&pid).ok_or(Error::NotLocalProcess(pid))?;
        if matches!(p.blocked, Blocked::No | Blocked::GetPid | Blocked::GetReply) {
            return Ok(());
        }
        if at <= now {
            self.stats.deadlines += 1;
            self.abandon(pid);
            return Ok(());
        }
        p.limit_at = Some(at);
        self.arm(at, TimerKey::Limit(pid));
        Ok(())
    }

    pub(super) fn limit_timer(&mut self, pid: Pid, at: Time) {
        match self.procs.get(&pid).and_then(|p| p.limit_at) {
            Some(l) if l == at => {
                self.stats.deadlines += 1;
                self.abandon(pid);
            }
            // The entry of an earlier limit, which this one reused: not yet.
            Some(l) if l > at => self.arm(l, TimerKey::Limit(pid)),
            _ => {}
        }
    }

    /// Gives up `pid`'s blocking primitive and wakes it with [`Error::Deadline`].
    fn abandon(&mut self, pid: Pid) {
        let Some(p) = self.procs.get(&pid) else { return };
        let completion = match p.blocked {
            Blocked::Send if self.groups.collected.get(&pid).is_some_and(|c| c.reliable.is_some()) => {
                let Some(outcome) = self.reliable_deadline(pid) else { return };
                self.exchanges.remove(&pid);
                Completion::Group(outcome)
            }
            Blocked::Send => {
                self.cancel_exchange(pid);
                self.cancel_streams_of(pid);
                Completion::Send(Err(Error::Deadline))
            }
            Blocked::Receive { .. } => Completion::Receive(Err(Error::Deadline)),
            Blocked::Move => {
                self.cancel_streams_of(pid);
                Completion::Move(Err(Error::Deadline))
            }
            Blocked::No | Blocked::GetPid | Blocked::GetReply => return,
        };
        self.wake(pid, completion);
    }

    /// Ends `pid`'s outstanding Send, if any, as the sender's side can: a
    /// queued local message leaves its receiver's queue, a remote one is
    /// cancelled; a local receiver that already took it, or group members,
    /// will find nobody awaiting their reply.
    pub(super) fn cancel_exchange(&mut self, pid: Pid) {
        let Some(ex) = self.exchanges.remove(&pid) else { return };
        match ex.state {
            ExchangeState::Local { received_by: None } => self.unqueue(ex.to, Incoming::Local(pid)),
            ExchangeState::Local { .. } => {}
            ExchangeState::Remote { .. } if ex.to.is_group() => {}
            ExchangeState::Remote { seq, .. } => {
                let mut h = self.header(PacketType::Cancel);
                h.seq = seq;
                h.src = pid;
                h.dst = ex.to;
                let to = self.route(ex.to);
                self.emit(to, &h, &[]);
            }
        }
    }
}
