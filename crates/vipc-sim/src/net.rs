//! The virtual network: an event queue ordered by (virtual time, insertion
//! order) and a link model that loses, duplicates, delays and reorders
//! datagrams and honours partitions, all drawn from a seeded generator.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};
use std::time::Duration;
use vipc_engine::Time;

struct Entry<E> {
    at: Time,
    seq: u64,
    ev: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<E> Ord for Entry<E> {
    /// Reversed: the heap pops the earliest time, then the earliest insertion.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// A deterministic priority queue of timed events: earliest first, and
/// events at the same instant in the order they were pushed.
pub struct Queue<E> {
    heap: BinaryHeap<Entry<E>>,
    seq: u64,
}

impl<E> Default for Queue<E> {
    fn default() -> Self {
        Queue { heap: BinaryHeap::new(), seq: 0 }
    }
}

impl<E> Queue<E> {
    /// Schedules `ev` at `at`.
    pub fn push(&mut self, at: Time, ev: E) {
        self.seq += 1;
        self.heap.push(Entry { at, seq: self.seq, ev });
    }

    /// Takes the next event.
    pub fn pop(&mut self) -> Option<(Time, E)> {
        self.heap.pop().map(|e| (e.at, e.ev))
    }
}

/// Fault and delay parameters of every link.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkParams {
    /// Probability that a datagram copy is lost.
    pub loss: f64,
    /// Probability that a datagram is delivered twice.
    pub duplicate: f64,
    /// Probability that a copy is held back by up to `reorder_delay`.
    pub reorder: f64,
    /// Largest extra delay of a held-back copy.
    pub reorder_delay: Duration,
    /// Propagation delay of every copy.
    pub latency: Duration,
    /// Uniform random extra delay of every copy, at most.
    pub jitter: Duration,
    /// Nanoseconds the sender's interface needs per byte (8 = 1 Gb/s).
    pub ns_per_byte: u64,
    /// Probability that a delivered datagram has one byte of its message or
    /// data flipped. Without a MAC the engine cannot notice: this fault exists
    /// only to show that the invariant checks catch damaged data.
    pub corrupt: f64,
}

impl Default for LinkParams {
    fn default() -> Self {
        LinkParams {
            loss: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::ZERO,
            latency: Duration::from_micros(50),
            jitter: Duration::from_micros(100),
            ns_per_byte: 8,
            corrupt: 0.0,
        }
    }
}

/// What happened to datagrams, for the report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Datagrams handed to the network (a broadcast counts once per receiver).
    pub sent: u64,
    /// Copies lost at random.
    pub lost: u64,
    /// Copies dropped by a partition.
    pub cut: u64,
    /// Extra copies made by duplication.
    pub duplicated: u64,
    /// Copies held back (reordered).
    pub reordered: u64,
    /// Datagrams damaged on purpose (see [`LinkParams::corrupt`]).
    pub corrupted: u64,
}

/// The link model. Node indices are `0..nodes`.
pub struct Net {
    rng: ChaCha8Rng,
    params: LinkParams,
    /// Active partitions by id: each is a set of cut directed links (from, to).
    cuts: BTreeMap<u64, Vec<(usize, usize)>>,
    next_cut: u64,
    egress: Vec<Time>,
    /// Counters.
    pub stats: NetStats,
}

impl Net {
    /// A network of `nodes` nodes whose faults are drawn from `seed`.
    pub fn new(seed: u64, nodes: usize, params: LinkParams) -> Net {
        Net {
            rng: ChaCha8Rng::seed_from_u64(seed),
            params,
            cuts: BTreeMap::new(),
            next_cut: 0,
            egress: vec![Time::ZERO; nodes],
            stats: NetStats::default(),
        }
    }

    /// Cuts every pair in `pairs` in both directions until [`Net::heal`] with the returned id.
    pub fn cut(&mut self, pairs: &[(usize, usize)]) -> u64 {
        let links: Vec<(usize, usize)> = pairs.iter().flat_map(|&(a, b)| [(a, b), (b, a)]).collect();
        self.cut_links(&links)
    }

    /// Cuts the directed links `(from, to)` in `links` (a one-way partition:
    /// the other direction still works) until [`Net::heal`] with the returned id.
    pub fn cut_links(&mut self, links: &[(usize, usize)]) -> u64 {
        self.next_cut += 1;
        self.cuts.insert(self.next_cut, links.to_vec());
        self.next_cut
    }

    /// Ends partition `id`.
    pub fn heal(&mut self, id: u64) {
        self.cuts.remove(&id);
    }

    /// Ends every partition.
    pub fn heal_all(&mut self) {
        self.cuts.clear();
    }

    /// True if some active partition cuts the link from `a` to `b`.
    pub fn is_cut(&self, a: usize, b: usize) -> bool {
        self.cuts.values().any(|v| v.contains(&(a, b)))
    }

    /// Forgets `node`'s interface queue (its machine restarted).
    pub fn reset_egress(&mut self, node: usize, now: Time) {
        self.egress[node] = now;
    }

    /// Sends one datagram of `len` bytes from `from` to every node of `to`.
    /// Returns the arrival time of every copy that survives, in order.
    pub fn route(&mut self, now: Time, from: usize, to: &[usize], len: usize) -> Vec<(usize, Time)> {
        // The interface serialises datagrams: this one leaves after the previous ones.
        let start = self.egress[from].max(now);
        let left = start + Duration::from_nanos(self.params.ns_per_byte * len as u64);
        self.egress[from] = left;
        let mut out = Vec::with_capacity(to.len());
        for &dst in to {
            self.stats.sent += 1;
            if self.is_cut(from, dst) {
                self.stats.cut += 1;
                continue;
            }
            let copies = if self.chance(self.params.duplicate) {
                self.stats.duplicated += 1;
                2
            } else {
                1
            };
            for _ in 0..copies {
                if self.chance(self.params.loss) {
                    self.stats.lost += 1;
                    continue;
                }
                let mut delay = self.params.latency + self.uniform(self.params.jitter);
                if self.chance(self.params.reorder) {
                    self.stats.reordered += 1;
                    delay += self.uniform(self.params.reorder_delay);
                }
                out.push((dst, left + delay));
            }
        }
        out
    }

    /// Maybe damages a datagram about to be delivered: flips one byte of
    /// the message or data (offset 40 on). Returns true if it did.
    pub fn corrupt(&mut self, bytes: &mut [u8]) -> bool {
        if bytes.len() <= 40 || !self.chance(self.params.corrupt) {
            return false;
        }
        let at = self.rng.gen_range(40..bytes.len());
        bytes[at] ^= self.rng.gen_range(1..=255u8);
        self.stats.corrupted += 1;
        true
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.gen_bool(p.min(1.0))
    }

    fn uniform(&mut self, max: Duration) -> Duration {
        let n = max.as_nanos() as u64;
        if n == 0 {
            Duration::ZERO
        } else {
            Duration::from_nanos(self.rng.gen_range(0..=n))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_pops_by_time_then_insertion() {
        let mut q = Queue::default();
        q.push(Time(5), "c");
        q.push(Time(1), "a");
        q.push(Time(5), "d");
        q.push(Time(1), "b");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).map(|(_, e)| e).collect();
        assert_eq!(order, ["a", "b", "c", "d"]);
        assert!(q.pop().is_none());
    }

    #[test]
    fn perfect_link_delivers_each_copy_once_after_latency() {
        let mut n = Net::new(1, 3, LinkParams::default());
        let out = n.route(Time(1000), 0, &[1, 2], 100);
        assert_eq!(out.len(), 2);
        for (i, &(dst, at)) in out.iter().enumerate() {
            assert_eq!(dst, i + 1);
            assert!(at.0 >= 1000 + 800 + 50_000 && at.0 <= 1000 + 800 + 150_000, "{at:?}");
        }
        // The interface is busy: the next datagram leaves after the first.
        let out2 = n.route(Time(1000), 0, &[1], 1000);
        assert!(out2[0].1 .0 >= 1000 + 800 + 8000 + 50_000);
    }

    #[test]
    fn loss_rate_is_about_right_and_deterministic() {
        let p = LinkParams { loss: 0.3, ..LinkParams::default() };
        let run = |seed| {
            let mut n = Net::new(seed, 2, p.clone());
            (0..10_000).map(|i| n.route(Time(i * 1_000_000), 0, &[1], 10).len()).sum::<usize>()
        };
        let got = run(7);
        assert!((6700..7300).contains(&got), "{got} of 10000 arrived at 30% loss");
        assert_eq!(got, run(7));
        assert_ne!(got, run(8));
    }

    #[test]
    fn corruption_flips_one_payload_byte() {
        let mut n = Net::new(1, 2, LinkParams { corrupt: 1.0, ..LinkParams::default() });
        let orig = vec![7u8; 100];
        let mut b = orig.clone();
        assert!(n.corrupt(&mut b));
        let diff: Vec<usize> = (0..100).filter(|&i| b[i] != orig[i]).collect();
        assert_eq!(diff.len(), 1);
        assert!(diff[0] >= 40);
        let mut clean = Net::new(1, 2, LinkParams::default());
        assert!(!clean.corrupt(&mut b));
    }

    #[test]
    fn duplication_and_reordering_happen() {
        let p = LinkParams {
            duplicate: 0.5,
            reorder: 0.5,
            reorder_delay: Duration::from_millis(5),
            ..LinkParams::default()
        };
        let mut n = Net::new(3, 2, p);
        let mut arrivals = Vec::new();
        for i in 0..200u64 {
            for (_, at) in n.route(Time(i * 100_000), 0, &[1], 10) {
                arrivals.push((at, i));
            }
        }
        assert!(arrivals.len() > 250, "duplicates expected");
        arrivals.sort();
        assert!(arrivals.windows(2).any(|w| w[0].1 > w[1].1), "reordering expected");
    }

    #[test]
    fn partitions_cut_both_directions_until_healed() {
        let mut n = Net::new(1, 3, LinkParams::default());
        let id = n.cut(&[(2, 0)]);
        assert!(n.is_cut(0, 2) && n.is_cut(2, 0) && !n.is_cut(0, 1));
        assert_eq!(n.route(Time(0), 0, &[1, 2], 10).len(), 1);
        assert_eq!(n.route(Time(0), 2, &[0], 10).len(), 0);
        n.heal(id);
        assert_eq!(n.route(Time(0), 2, &[0], 10).len(), 1);
        assert_eq!(n.stats.cut, 2);
        // One way only.
        n.cut_links(&[(1, 2)]);
        assert!(n.is_cut(1, 2) && !n.is_cut(2, 1));
        assert_eq!(n.route(Time(0), 1, &[2], 10).len(), 0);
        assert_eq!(n.route(Time(0), 2, &[1], 10).len(), 1);
    }
}
