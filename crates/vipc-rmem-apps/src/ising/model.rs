//! The physics: spins ±1 on an L×L torus, a random interaction coefficient
//! per bond, one Metropolis decision per site and half-sweep. Every random
//! number is a hash of (seed, what, where), so any split of the grid makes
//! exactly the decisions of the sequential run.

/// What a run simulates.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IsingParams {
    /// L: the grid is L×L (even, so the red/black colouring survives the wrap-around).
    pub size: usize,
    /// The Metropolis temperature (energy units of the coefficients).
    pub temperature: f64,
    /// Seeds the initial spins, the coefficients and every decision.
    pub seed: u64,
}

impl IsingParams {
    /// An L×L grid at temperature 1.5 with seed `seed`.
    pub fn new(size: usize, seed: u64) -> IsingParams {
        IsingParams { size, temperature: 1.5, seed }
    }
}

/// The splitmix64 finaliser: a good 64-bit mixer.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A hash of (seed, a, b, c).
fn hash(seed: u64, a: u64, b: u64, c: u64) -> u64 {
    mix(seed ^ mix(a ^ mix(b ^ mix(c))))
}

/// Which random stream: initial spins, horizontal and vertical bonds, or
/// the decisions of half-sweep h (tagged `DECIDE + h`).
const SPIN: u64 = 1;
const BOND_H: u64 = 2;
const BOND_V: u64 = 3;
const DECIDE: u64 = 1 << 32;

/// A number in [0, 1) from 53 bits of a hash.
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// The initial spin of site (i, j).
pub fn initial_spin(p: &IsingParams, i: usize, j: usize) -> i8 {
    if hash(p.seed, SPIN, i as u64, j as u64) & 1 == 0 {
        1
    } else {
        -1
    }
}

/// The coefficient of the bond from (i, j) to (i, j + 1) (`vertical`: to (i + 1, j)), in [-1, 1).
pub fn coupling(p: &IsingParams, i: usize, j: usize, vertical: bool) -> f64 {
    let what = if vertical { BOND_V } else { BOND_H };
    2.0 * unit(hash(p.seed, what, i as u64, j as u64)) - 1.0
}

/// The colour half-sweep `h` (1, 2, …) updates: red (0) first.
pub fn colour(h: u64) -> usize {
    ((h - 1) % 2) as usize
}

/// The spin site (i, j) has after half-sweep `h`, given its spin `s` and
/// its local field (the coefficient-weighted sum of its neighbours):
/// flipped if that lowers the energy, or else with probability e^(−ΔE/T).
pub fn decide(p: &IsingParams, h: u64, i: usize, j: usize, s: i8, field: f64) -> i8 {
    let de = 2.0 * f64::from(s) * field;
    if de <= 0.0 || unit(hash(p.seed, DECIDE + h, i as u64, j as u64)) < (-de / p.temperature).exp() {
        -s
    } else {
        s
    }
}

/// FNV-1a (64 bits) over `bytes`: the check word of a row slot and the grid digest.
pub(crate) fn fnv1a<'a>(bytes: impl IntoIterator<Item = &'a u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

/// A digest of spins (FNV-1a over one byte per spin, −1 as 0xff): what a
/// worker in another process reports of its rows, so that a driver can
/// compare its band with the same rows of the reference without moving
/// the grid.
pub fn digest(spins: &[i8]) -> u64 {
    let bytes: Vec<u8> = spins.iter().map(|&s| s as u8).collect();
    fnv1a(&bytes)
}

/// The sum of the spins.
pub fn magnetisation(grid: &[i8]) -> i64 {
    grid.iter().map(|&s| i64::from(s)).sum()
}

/// The sequential reference: the whole grid in one array, indices taken
/// modulo L, after `sweeps` sweeps (2 × `sweeps` half-sweeps). Written
/// apart from the banded code the workers run, so each checks the other.
pub fn reference(p: &IsingParams, sweeps: u64) -> Vec<i8> {
    let n = p.size;
    let mut s: Vec<i8> = (0..n * n).map(|k| initial_spin(p, k / n, k % n)).collect();
    let jh: Vec<f64> = (0..n * n).map(|k| coupling(p, k / n, k % n, false)).collect();
    let jv: Vec<f64> = (0..n * n).map(|k| coupling(p, k / n, k % n, true)).collect();
    for h in 1..=2 * sweeps {
        for i in 0..n {
            let (up, down) = ((i + n - 1) % n, (i + 1) % n);
            for j in (0..n).filter(|j| (i + j) % 2 == colour(h)) {
                let (left, right) = ((j + n - 1) % n, (j + 1) % n);
                let field = jh[i * n + left] * f64::from(s[i * n + left])
                    + jh[i * n + j] * f64::from(s[i * n + right])
                    + jv[up * n + j] * f64::from(s[up * n + j])
                    + jv[i * n + j] * f64::from(s[down * n + j]);
                s[i * n + j] = decide(p, h, i, j, s[i * n + j], field);
            }
        }
    }
    s
}

/// A band of rows `first..first + rows` with `depth` ghost rows on each
/// side (band rows `0..depth` above, `depth + rows..rows + 2·depth` below),
/// and the coefficients of its bonds.
#[derive(Clone, Debug)]
pub struct Band {
    p: IsingParams,
    first: usize,
    rows: usize,
    depth: usize,
    spins: Vec<i8>,
    /// Band row k's horizontal bonds: (k, j)–(k, j + 1) at `k·L + j`.
    jh: Vec<f64>,
    /// Band row k's bonds below: (k, j)–(k + 1, j) at `k·L + j`.
    jv: Vec<f64>,
}

impl Band {
    /// The band in its initial state, ghosts included.
    pub fn new(p: &IsingParams, first: usize, rows: usize, depth: usize) -> Band {
        let n = p.size;
        let all = rows + 2 * depth;
        let global = |k: usize| (first + n + k - depth) % n; // band row k → grid row
        let spins = (0..all * n).map(|x| initial_spin(p, global(x / n), x % n)).collect();
        let jh = (0..all * n).map(|x| coupling(p, global(x / n), x % n, false)).collect();
        let jv = (0..all * n).map(|x| coupling(p, global(x / n), x % n, true)).collect();
        Band { p: *p, first, rows, depth, spins, jh, jv }
    }

    /// Updates the colour of half-sweep `h` in the band's own rows and the
    /// `margin` ghost rows next to them on each side (margin < depth: the
    /// outermost ghosts are only read).
    pub fn half_sweep(&mut self, h: u64, margin: usize) {
        let (n, c) = (self.p.size, colour(h));
        for k in self.depth - margin..self.depth + self.rows + margin {
            let i = (self.first + n + k - self.depth) % n;
            let (row, above, below) = (k * n, (k - 1) * n, (k + 1) * n);
            for j in ((i + c) % 2..n).step_by(2) {
                let (left, right) = ((j + n - 1) % n, (j + 1) % n);
                let s = &self.spins;
                let field = self.jh[row + left] * f64::from(s[row + left])
                    + self.jh[row + j] * f64::from(s[row + right])
                    + self.jv[above + j] * f64::from(s[above + j])
                    + self.jv[row + j] * f64::from(s[below + j]);
                let new = decide(&self.p, h, i, j, s[row + j], field);
                self.spins[row + j] = new;
            }
        }
    }

    /// `count` band rows from band row `k` (0: the outermost ghost above).
    pub fn rows_at(&self, k: usize, count: usize) -> &[i8] {
        &self.spins[k * self.p.size..(k + count) * self.p.size]
    }

    /// Replaces band rows from `k` (ghosts) with `rows`.
    pub fn set_rows(&mut self, k: usize, rows: &[i8]) {
        let at = k * self.p.size;
        self.spins[at..at + rows.len()].copy_from_slice(rows);
    }

    /// Ghost rows on each side.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// The number of rows owned.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The first grid row owned.
    pub fn first(&self) -> usize {
        self.first
    }

    /// The owned rows, in grid order.
    pub fn owned(&self) -> &[i8] {
        self.rows_at(self.depth, self.rows)
    }

    /// With the whole grid in one band: the ghosts are its own last and first rows.
    pub fn wrap_ghosts(&mut self) {
        let (n, r, d) = (self.p.size, self.rows, self.depth);
        self.spins.copy_within(r * n..(r + d) * n, 0);
        self.spins.copy_within(d * n..2 * d * n, (r + d) * n);
    }
}
