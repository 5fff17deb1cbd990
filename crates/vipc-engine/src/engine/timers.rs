//! Timer dispatch: retransmission, timeouts and expiry of state.
//!
//! Timers live in one min-heap of `(time, key)`. Each record remembers the
//! one entry it expects (`timer_at`); any other entry for it is stale and
//! skipped, so re-arming never needs to search the heap. Exchange and alien
//! timers, the one of the remote-memory deadlines and a caller's limit reuse
//! a pending entry of the same key that is due no later (see
//! `Engine::timer_entry`): their handlers re-arm when they find nothing due
//! yet.

use super::*;

impl Engine {
    /// Runs every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Time) {
        while let Some(&Reverse((at, key))) = self.timers.peek() {
            if at > now {
                break;
            }
            self.timers.pop();
            if self.pending_timers.get(&key) == Some(&at) {
                self.pending_timers.remove(&key);
            }
            match key {
                TimerKey::Exchange(pid) => self.exchange_timer(now, pid, at),
                TimerKey::Alien(pid) => self.alien_timer(now, pid, at),
                TimerKey::Lookup(pid) => self.lookup_timer(now, pid, at),
                TimerKey::StreamOut(p, s) => self.stream_out_timer(now, (p, s), at),
                TimerKey::StreamIn(p, s) => self.stream_in_timer(now, (p, s), at),
                TimerKey::HostAlloc if self.host_alloc_due(at) => self.host_alloc_timer(now),
                TimerKey::HostAlloc => {}
                TimerKey::GroupCopy(s, m) => self.group_copy_timer(now, (s, m), at),
                TimerKey::GetReply(pid) => self.get_reply_timer(pid, at),
                TimerKey::Alive => self.alive_timer(now, at),
                TimerKey::AliveReply(host) => self.alive_reply_timer(host),
                TimerKey::MemImport(seq) => self.mem_import_timer(now, seq, at),
                TimerKey::MemDeadlines => self.mem_deadlines_timer(now),
                TimerKey::Limit(pid) => self.limit_timer(pid, at),
            }
        }
    }

    fn exchange_timer(&mut self, now: Time, pid: Pid, at: Time) {
        let Some(ex) = self.exchanges.get_mut(&pid) else { return };
        let ExchangeState::Remote { seq, .. } = &ex.state else { return };
        if ex.timer_at != Some(at) {
            return;
        }
        if ex.to.is_group() {
            // Its local members are this node's own: while one still holds
            // the message, the Send lives (as a remote one's ReplyPending
            // would keep it), and so do their copies.
            let seq = *seq;
            if self.local_copies_heard(now, pid, seq) {
                self.keep_alive(now, pid);
            }
        }
        let Some(ex) = self.exchanges.get_mut(&pid) else { return };
        let ExchangeState::Remote { next_retransmit, deadline, .. } = &mut ex.state else { return };
        if now >= *deadline {
            let ex = self.exchanges.remove(&pid).expect("present");
            self.stats.timeouts += 1;
            match ex.to.is_group().then(|| self.reliable_deadline(pid)).flatten() {
                Some(outcome) => self.wake(pid, Completion::Group(outcome)),
                None => self.wake(pid, Completion::Send(Err(Error::Timeout(ex.to)))),
            }
            return;
        }
        let mut resend = false;
        if now >= *next_retransmit {
            *next_retransmit = now + self.cfg.retransmit;
            resend = true;
        }
        let next = (*next_retransmit).min(*deadline);
        ex.timer_at = Some(next);
        self.arm(next, TimerKey::Exchange(pid));
        if resend && !self.give_up_silent_hosts(now, pid) {
            self.stats.retransmissions += 1;
            self.transmit_send(now, pid, true);
        }
    }

    /// Pushes `pid`'s exchange deadline to T_t from `now` (never earlier).
    fn keep_alive(&mut self, now: Time, pid: Pid) {
        let until = now + self.cfg.timeout;
        if let Some(ExchangeState::Remote { deadline, .. }) = self.exchanges.get_mut(&pid).map(|ex| &mut ex.state) {
            *deadline = (*deadline).max(until);
        }
    }

    fn alien_timer(&mut self, now: Time, src: Pid, at: Time) {
        let lifetime = self.alien_lifetime();
        let Some(a) = self.aliens.get_mut(&src) else { return };
        if a.timer_at != Some(at) {
            return;
        }
        let expiry = a.last_heard + lifetime;
        if now >= expiry {
            // The sender fell silent for 2·T_t: it died, gave up, or has its reply.
            self.drop_alien(src);
        } else {
            a.timer_at = Some(expiry);
            self.arm(expiry, TimerKey::Alien(src));
        }
    }

    fn lookup_timer(&mut self, now: Time, caller: Pid, at: Time) {
        let Some(l) = self.lookups.get_mut(&caller) else { return };
        if l.timer_at != Some(at) {
            return;
        }
        if now >= l.deadline {
            self.lookups.remove(&caller);
            self.wake(caller, Completion::GetPid(None));
            return;
        }
        l.next_retransmit = now + self.cfg.retransmit;
        let next = l.next_retransmit.min(l.deadline);
        l.timer_at = Some(next);
        self.arm(next, TimerKey::Lookup(caller));
        self.stats.retransmissions += 1;
        self.transmit_lookup(caller);
    }
}
