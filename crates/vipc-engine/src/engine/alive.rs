//! I-Am-Here (004 §4.2): which hosts are alive.
//!
//! Every `alive_period` the node broadcasts an IAmHere. A host is up from its
//! first IAmHere and down once nothing has been heard from it (any valid
//! packet counts) for `alive_down_after` periods. A host heard for the first
//! time — or one that says HELLO (it booted or forgot its table) — gets our
//! own IAmHere after a random delay of 0–10 ms, so a newcomer fills its table
//! at once without every host answering in the same instant.
//!
//! The table has numbered rows (a freed row is reused) and a sequence number
//! bumped on every change, so that a row number means something only together
//! with the sequence number it was read under (the thesis's AKV and
//! `sequence_no`). The node itself is not in its table.

use super::*;
use std::time::Duration;
use vipc_wire::Flags;

/// Longest random delay before answering a newcomer.
const NEWCOMER_REPLY_MAX: Duration = Duration::from_millis(10);

/// A host announcing a longer period than ours is given that much longer
/// before it is declared down, up to this many times our own period (a host
/// announcing a huge one must not stay "alive" for days after it died).
const ANNOUNCED_PERIOD_MAX_FACTOR: u32 = 10;

/// A row of the alive-host table.
#[derive(Clone, Debug)]
pub(crate) struct AliveRow {
    host: HostId,
    addr: SocketAddr,
    incarnation: u16,
    last_heard: Time,
    /// The period it announces (its IAmHere bytes 0–3).
    period: Duration,
}

/// The alive-host table: numbered rows and a change sequence number.
#[derive(Debug, Default)]
pub(crate) struct AliveTable {
    rows: Vec<Option<AliveRow>>,
    /// Host → its row: every valid packet looks its sender up, and forged
    /// announcements can fill tens of thousands of rows.
    index: HashMap<HostId, usize>,
    seq: u32,
    /// When the next periodic announcement is due (the timer it expects).
    next_tick: Option<Time>,
    /// Hosts whose life ended (it said goodbye, or another life of it
    /// announced itself), with that life and until when an IAmHere of it
    /// is taken for a late one (overtaken by the goodbye or the new life).
    left: HashMap<HostId, (u16, Time)>,
}

impl AliveTable {
    fn find(&self, host: HostId) -> Option<usize> {
        self.index.get(&host).copied()
    }

    fn insert(&mut self, row: AliveRow) {
        let host = row.host;
        let i = match self.rows.iter().position(Option::is_none) {
            Some(i) => {
                self.rows[i] = Some(row);
                i
            }
            None => {
                self.rows.push(Some(row));
                self.rows.len() - 1
            }
        };
        self.index.insert(host, i);
        self.seq = self.seq.wrapping_add(1);
    }

    fn remove(&mut self, i: usize) -> Option<AliveRow> {
        let row = self.rows.get_mut(i)?.take()?;
        self.index.remove(&row.host);
        while self.rows.last().is_some_and(Option::is_none) {
            self.rows.pop();
        }
        self.seq = self.seq.wrapping_add(1);
        Some(row)
    }
}

/// A snapshot of the alive-host table (`GET_IAH_BIT_VECTOR`): row `i` of
/// `rows` holds the host of row `i`, or `None` for a free row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AliveHosts {
    /// The table's sequence number when the snapshot was taken.
    pub seq: u32,
    /// Each row's host (`None`: free).
    pub rows: Vec<Option<AliveHost>>,
}

/// An alive host: its id and where it announced itself from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AliveHost {
    /// The logical host id.
    pub host: HostId,
    /// The address of its last IAmHere.
    pub addr: SocketAddr,
}

impl AliveHosts {
    /// The alive hosts' ids, in row order.
    pub fn hosts(&self) -> impl Iterator<Item = HostId> + '_ {
        self.rows.iter().flatten().map(|r| r.host)
    }
}

impl Engine {
    /// A snapshot of the alive-host table (empty when I-Am-Here is off).
    pub fn alive_hosts(&self) -> AliveHosts {
        let t = &self.alive;
        let rows = t.rows.iter().map(|r| r.as_ref().map(|r| AliveHost { host: r.host, addr: r.addr })).collect();
        AliveHosts { seq: t.seq, rows }
    }

    /// The host in row `row` of the table as it was under sequence number
    /// `seq` (`GET_IAH_HOST_NO`). Errors: `StaleTable` if the table changed
    /// since, `NoSuchRow` for a free or missing row.
    pub fn alive_host_at(&self, row: usize, seq: u32) -> Result<HostId, Error> {
        if seq != self.alive.seq {
            return Err(Error::StaleTable { given: seq, current: self.alive.seq });
        }
        self.alive.rows.get(row).and_then(|r| r.as_ref()).map(|r| r.host).ok_or(Error::NoSuchRow(row))
    }

    /// The addresses of the hosts in the alive-host table: where a runtime
    /// without multicast fans a broadcast or group Send out by unicast.
    pub fn alive_addrs(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.alive.rows.iter().flatten().map(|r| r.addr)
    }

    /// True if `host` is in the alive-host table.
    pub fn is_host_alive(&self, host: HostId) -> bool {
        self.alive.find(host).is_some()
    }

    /// Forgets every host (`RESET_IAH_BIT_VECTOR`) and says HELLO, so that
    /// the live ones are back within about 10 ms. Every row freed is an
    /// [`Event::HostDown`].
    pub fn reset_alive(&mut self, now: Time) {
        for i in 0..self.alive.rows.len() {
            if let Some(row) = self.alive.remove(i) {
                self.events.push_back(Event::HostDown(row.host));
            }
        }
        if self.cfg.alive_period.is_some() && self.host.is_some() {
            self.announce(Destination::Broadcast, true);
        }
        self.arm_alive_tick(now);
    }

    /// Starts the periodic announcements (when the host id is known): the
    /// first says HELLO.
    pub(super) fn start_alive(&mut self, now: Time) {
        if self.cfg.alive_period.is_none() {
            return;
        }
        self.announce(Destination::Broadcast, true);
        self.arm_alive_tick(now);
    }

    fn arm_alive_tick(&mut self, now: Time) {
        let Some(period) = self.cfg.alive_period else { return };
        // Up to 5% later than the period, so that hosts do not stay in step.
        let jitter = self.rng.gen_range(0..=period.as_nanos() as u64 / 20);
        let at = now + period + Duration::from_nanos(jitter);
        self.alive.next_tick = Some(at);
        self.arm(at, TimerKey::Alive);
    }

    /// The periodic tick: announce, and declare down the hosts silent for
    /// `alive_down_after` periods.
    pub(super) fn alive_timer(&mut self, now: Time, at: Time) {
        if self.alive.next_tick != Some(at) {
            return;
        }
        if self.cfg.alive_period.is_none() {
            return;
        }
        self.alive.left.retain(|_, (_, until)| *until > now);
        for i in 0..self.alive.rows.len() {
            let silent = self
                .alive
                .rows
                .get(i)
                .and_then(|r| r.as_ref())
                .is_some_and(|r| now.since(r.last_heard) >= self.down_after(r));
            if silent {
                let row = self.alive.remove(i).expect("checked");
                self.stats.hosts_down += 1;
                self.events.push_back(Event::HostDown(row.host));
            }
        }
        self.announce(Destination::Broadcast, false);
        self.arm_alive_tick(now);
    }

    /// How long host `r` may stay silent before it is down: `alive_down_after`
    /// of its own announced periods, or of ours if shorter, or of ten of ours if longer.
    fn down_after(&self, r: &AliveRow) -> Duration {
        let period = self.cfg.alive_period.unwrap_or_default();
        r.period.clamp(period, period * ANNOUNCED_PERIOD_MAX_FACTOR) * self.cfg.alive_down_after.max(1)
    }

    /// Answers a newcomer: our IAmHere to it alone, sent by its timer.
    pub(super) fn alive_reply_timer(&mut self, host: HostId) {
        if let Some(addr) = self.location.lookup(host) {
            self.announce(Destination::Addr(addr), false);
        }
    }

    /// The node is shutting down: says so on the broadcast channel (an
    /// IAmHere with LEAVING), so that the other hosts drop it from their
    /// alive-host tables now. Otherwise they keep it for `alive_down_after`
    /// periods, and a reliable group Send begun meanwhile waits T_t for its
    /// acknowledgement and fails (short-lived command-line nodes made a
    /// quarter of `gsend --mode all-reply` runs fail). Best effort: if it is
    /// lost, the host is declared down as before.
    pub fn leave(&mut self) {
        if self.cfg.alive_period.is_some() {
            self.announce_flags(Destination::Broadcast, Flags(0).with(Flags::LEAVING, true));
        }
    }

    fn announce(&mut self, to: Destination, hello: bool) {
        self.announce_flags(to, Flags(0).with(Flags::HELLO, hello));
    }

    fn announce_flags(&mut self, to: Destination, flags: Flags) {
        let Some(host) = self.host else { return };
        let mut h = self.header(PacketType::IAmHere);
        h.flags = flags;
        h.src = Pid::new(host, 0);
        let period = self.cfg.alive_period.unwrap_or_default().as_millis().min(u32::MAX as u128) as u32;
        h.message[0..4].copy_from_slice(&period.to_be_bytes());
        self.emit(to, &h, &[]);
    }

    /// Any valid packet from `host` shows it alive (if its incarnation is the one we know).
    pub(super) fn alive_heard(&mut self, now: Time, host: HostId, incarnation: u16) {
        if let Some(i) = self.alive.find(host) {
            let row = self.alive.rows[i].as_mut().expect("found");
            if row.incarnation == incarnation {
                row.last_heard = now;
            }
        }
    }

    /// An IAmHere from `host` at `from`.
    pub(super) fn on_i_am_here(&mut self, now: Time, from: SocketAddr, h: &Header) {
        if self.cfg.alive_period.is_none() {
            return self.stray();
        }
        let host = h.src.host();
        if h.flags.has(Flags::LEAVING) {
            // The life we know of it says goodbye; anything else is stale.
            let known = self
                .alive
                .find(host)
                .filter(|&i| self.alive.rows[i].as_ref().is_some_and(|r| r.incarnation == h.incarnation));
            if let Some(row) = known.and_then(|i| self.alive.remove(i)) {
                self.stats.hosts_down += 1;
                self.events.push_back(Event::HostDown(row.host));
                // Its announcements sent before the goodbye may still come.
                let silence = self.down_after(&row);
                self.alive.left.insert(host, (h.incarnation, now + silence));
            }
            return;
        }
        if self.alive.left.get(&host).is_some_and(|&(life, until)| life == h.incarnation && now < until) {
            // An announcement of the life that said goodbye, overtaken by it.
            self.stats.duplicates += 1;
            return;
        }
        let mut answer = h.flags.has(Flags::HELLO);
        let period = Duration::from_millis(u32::from_be_bytes(h.message[0..4].try_into().expect("4 bytes")).into());
        match self.alive.find(host) {
            Some(i) if self.alive.rows[i].as_ref().is_some_and(|r| r.incarnation == h.incarnation) => {
                let row = self.alive.rows[i].as_mut().expect("found");
                row.last_heard = now;
                row.addr = from;
                row.period = period;
            }
            found => {
                // New, or restarted (another incarnation): its old life is
                // down, and an announcement of it that comes later was
                // overtaken by the new life's.
                if let Some(old) = found.and_then(|i| self.alive.remove(i)) {
                    self.stats.hosts_down += 1;
                    self.events.push_back(Event::HostDown(old.host));
                    let silence = self.down_after(&old);
                    self.alive.left.insert(host, (old.incarnation, now + silence));
                }
                let row = AliveRow { host, addr: from, incarnation: h.incarnation, last_heard: now, period };
                self.alive.insert(row);
                self.stats.hosts_up += 1;
                self.events.push_back(Event::HostUp { host, addr: from });
                answer = true;
            }
        }
        if answer {
            let delay = self.rng.gen_range(0..=NEWCOMER_REPLY_MAX.as_nanos() as u64);
            self.arm(now + Duration::from_nanos(delay), TimerKey::AliveReply(host));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The index answers as a scan of the rows would, through random joins
    /// and departures (freed rows reused, trailing ones dropped).
    #[test]
    fn the_host_index_agrees_with_the_rows() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut t = AliveTable::default();
        let addr = SocketAddr::from(([127, 0, 0, 1], 1));
        for _ in 0..20_000 {
            let host: HostId = rng.gen_range(1..200);
            match t.find(host) {
                Some(i) if rng.gen_bool(0.5) => {
                    assert_eq!(t.remove(i).map(|r| r.host), Some(host));
                }
                Some(_) => {}
                None => {
                    t.insert(AliveRow { host, addr, incarnation: 1, last_heard: Time::ZERO, period: Duration::ZERO })
                }
            }
            let probe: HostId = rng.gen_range(1..200);
            let scanned = t.rows.iter().position(|r| r.as_ref().is_some_and(|r| r.host == probe));
            assert_eq!(t.find(probe), scanned, "host {probe}");
            assert_eq!(t.index.len(), t.rows.iter().flatten().count());
        }
    }
}
