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

/// A band of rows `first..first + rows` with a ghost row on each side
/// (band rows 0 and rows + 1), and the coefficients of its bonds.
#[derive(Clone, Debug)]
pub struct Band {
    p: IsingParams,
    first: usize,
    rows: usize,
    spins: Vec<i8>,
    jh: Vec<f64>,
    jv: Vec<f64>,
}

impl Band {
    /// The band in its initial state, ghosts included.
    pub fn new(p: &IsingParams, first: usize, rows: usize) -> Band {
        let n = p.size;
        let global = |k: usize| (first + n + k - 1) % n; // band row k → grid row
        let spins = (0..(rows + 2) * n).map(|x| initial_spin(p, global(x / n), x % n)).collect();
        let jh = (0..rows * n).map(|x| coupling(p, global(x / n + 1), x % n, false)).collect();
        let jv = (0..(rows + 1) * n).map(|x| coupling(p, global(x / n), x % n, true)).collect();
        Band { p: *p, first, rows, spins, jh, jv }
    }

    /// Updates the colour of half-sweep `h` in the band's own rows, reading the ghosts.
    pub fn half_sweep(&mut self, h: u64) {
        let (n, c) = (self.p.size, colour(h));
        for k in 1..=self.rows {
            let i = self.first + k - 1;
            let (row, above, below) = (k * n, (k - 1) * n, (k + 1) * n);
            for j in ((i + c) % 2..n).step_by(2) {
                let (left, right) = ((j + n - 1) % n, (j + 1) % n);
                let s = &self.spins;
                let field = self.jh[above + left] * f64::from(s[row + left])
                    + self.jh[above + j] * f64::from(s[row + right])
                    + self.jv[above + j] * f64::from(s[above + j])
                    + self.jv[row + j] * f64::from(s[below + j]);
                let new = decide(&self.p, h, i, j, s[row + j], field);
                self.spins[row + j] = new;
            }
        }
    }

    /// Band row `k` (0: the ghost above, `rows + 1`: the ghost below).
    pub fn row(&self, k: usize) -> &[i8] {
        &self.spins[k * self.p.size..(k + 1) * self.p.size]
    }

    /// Replaces band row `k` (a ghost).
    pub fn set_row(&mut self, k: usize, row: &[i8]) {
        let n = self.p.size;
        self.spins[k * n..(k + 1) * n].copy_from_slice(row);
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
        &self.spins[self.p.size..(self.rows + 1) * self.p.size]
    }

    /// With the whole grid in one band: the ghosts are its own last and first rows.
    pub fn wrap_ghosts(&mut self) {
        let (n, r) = (self.p.size, self.rows);
        self.spins.copy_within(r * n..(r + 1) * n, 0);
        self.spins.copy_within(n..2 * n, (r + 1) * n);
    }
}
