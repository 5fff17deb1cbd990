//! Logical-host allocation by announcement–complaint (000 §5.3).
//!
//! A node picks a random candidate id and broadcasts `HostRequest` a few
//! times over `host_alloc_wait`; a node already using the id answers
//! `HostComplaint` and the candidate is replaced. With no complaint by the
//! end of the wait the id is kept. A configured (fixed) id is ready at once
//! but announced the same way, so a duplicate is reported as `HostConflict`.
//! Each announcement carries a random nonce so a node ignores its own echo.

use super::*;

pub(crate) struct HostAlloc {
    candidate: HostId,
    fixed: bool,
    nonce: [u8; 8],
    started: Time,
    announced: u32,
    timer_at: Time,
}

impl Engine {
    pub(crate) fn start_host_alloc(&mut self, now: Time) {
        let (candidate, fixed) = match self.cfg.host_id {
            HostIdConfig::Fixed(h) => (h, true),
            HostIdConfig::Allocate => (self.random_host_candidate(), false),
        };
        if fixed {
            self.host = Some(candidate);
            self.events.push_back(Event::HostReady(candidate));
            self.start_alive(now);
        }
        let nonce = self.rng.gen();
        self.alloc = Some(HostAlloc { candidate, fixed, nonce, started: now, announced: 0, timer_at: now });
        self.host_alloc_timer(now);
    }

    /// Announces on schedule and, at the end of the wait, takes the id.
    pub(crate) fn host_alloc_timer(&mut self, now: Time) {
        let wait = self.cfg.host_alloc_wait;
        let rounds = self.cfg.host_alloc_announcements.max(1);
        let Some(a) = self.alloc.as_mut() else { return };
        if now >= a.started + wait {
            let (candidate, fixed) = (a.candidate, a.fixed);
            self.alloc = None;
            if !fixed {
                self.host = Some(candidate);
                self.events.push_back(Event::HostReady(candidate));
                self.start_alive(now);
            }
            return;
        }
        let due = a.started + wait * a.announced / rounds;
        if a.announced < rounds && now >= due {
            a.announced += 1;
            let (candidate, nonce) = (a.candidate, a.nonce);
            let mut h = self.header(PacketType::HostRequest);
            h.src = Pid::new(candidate, 0);
            h.message[..8].copy_from_slice(&nonce);
            self.emit(Destination::Broadcast, &h, &[]);
        }
        let a = self.alloc.as_mut().expect("still allocating");
        let next = if a.announced < rounds { a.started + wait * a.announced / rounds } else { a.started + wait };
        a.timer_at = next;
        self.arm(next, TimerKey::HostAlloc);
    }

    pub(crate) fn host_alloc_due(&self, at: Time) -> bool {
        self.alloc.as_ref().is_some_and(|a| a.timer_at == at)
    }

    fn restart_with_new_candidate(&mut self, now: Time) {
        let candidate = self.random_host_candidate();
        let nonce = self.rng.gen();
        self.alloc = Some(HostAlloc { candidate, fixed: false, nonce, started: now, announced: 0, timer_at: now });
        self.host_alloc_timer(now);
    }

    pub(crate) fn on_host_request(&mut self, now: Time, from: SocketAddr, h: &Header) {
        let wanted = h.src.host();
        if let Some(a) = &self.alloc {
            if h.message[..8] == a.nonce {
                return; // our own announcement, looped back
            }
            if !a.fixed && a.candidate == wanted {
                // Two newcomers picked the same id: both pick again.
                return self.restart_with_new_candidate(now);
            }
        }
        if self.host == Some(wanted) {
            let mut c = self.header(PacketType::HostComplaint);
            c.src = Pid::new(wanted, 0);
            c.dst = h.src;
            c.message[..8].copy_from_slice(&h.message[..8]);
            self.emit(Destination::Addr(from), &c, &[]);
        }
    }

    pub(crate) fn on_host_complaint(&mut self, now: Time, from: SocketAddr, h: &Header) {
        let Some(a) = &self.alloc else { return self.stray() };
        if h.message[..8] != a.nonce || h.dst.host() != a.candidate {
            return self.stray();
        }
        if a.fixed {
            let host = a.candidate;
            self.alloc = None;
            self.events.push_back(Event::HostConflict { host, addr: from });
        } else {
            self.restart_with_new_candidate(now);
        }
    }

    /// A packet from another node carrying our host id (another incarnation).
    pub(crate) fn report_conflict(&mut self, from: SocketAddr) {
        if let Some(host) = self.host {
            if self.conflicts_reported.len() < 1024 && self.conflicts_reported.insert(from) {
                self.events.push_back(Event::HostConflict { host, addr: from });
            }
        }
    }
}
