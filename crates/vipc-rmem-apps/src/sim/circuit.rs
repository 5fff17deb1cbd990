//! The circuit: a 32-bit ripple-carry adder of full adders (two XORs, two
//! ANDs, an OR each) fed by 65 input gates (a, b, carry in): 225 gates, as
//! in 003. Each gate has a fixed delay; the input vectors are applied one
//! every [`PERIOD`] time units, long enough for the carry to ripple through.

/// What a gate computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An input of the adder: it follows the vectors.
    Input,
    /// a ∧ b.
    And,
    /// a ∨ b.
    Or,
    /// a ⊕ b.
    Xor,
}

impl Kind {
    /// Its delay in time units.
    pub fn delay(self) -> u64 {
        match self {
            Kind::Input => 1,
            Kind::And | Kind::Or => 2,
            Kind::Xor => 3,
        }
    }

    /// Its output for inputs `a`, `b`.
    pub fn eval(self, a: bool, b: bool) -> bool {
        match self {
            Kind::Input => a,
            Kind::And => a && b,
            Kind::Or => a || b,
            Kind::Xor => a ^ b,
        }
    }
}

/// One gate: its kind and the gates driving its two inputs (none for an input).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gate {
    /// What it computes.
    pub kind: Kind,
    /// The gates its pins read.
    pub inputs: Vec<usize>,
}

/// Time between two vectors: more than the longest path (1 + 32 × 4 + 3).
pub const PERIOD: u64 = 200;

/// Bits of the adder.
pub const BITS: usize = 32;

/// One input vector: a + b + carry in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vector {
    /// The first operand.
    pub a: u32,
    /// The second operand.
    pub b: u32,
    /// The carry in.
    pub cin: bool,
}

impl Vector {
    /// What input gate `g` (0: carry in, 1..=32: a, 33..=64: b) holds for this vector.
    pub fn bit(&self, g: usize) -> bool {
        match g {
            0 => self.cin,
            1..=32 => self.a >> (g - 1) & 1 == 1,
            _ => self.b >> (g - 33) & 1 == 1,
        }
    }

    /// `count` vectors from `seed` (xorshift64*).
    pub fn random(count: usize, seed: u64) -> Vec<Vector> {
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            x.wrapping_mul(0x2545_f491_4f6c_dd1d)
        };
        (0..count)
            .map(|_| {
                let r = next();
                Vector { a: r as u32, b: (r >> 32) as u32, cin: next() & 1 == 1 }
            })
            .collect()
    }
}

/// The adder: gates, who reads each gate's output, and which gates are the sum's bits.
#[derive(Clone, Debug)]
pub struct Circuit {
    /// Gates by id; the first 65 are the inputs.
    pub gates: Vec<Gate>,
    /// For each gate, the (gate, pin) pairs its output drives.
    pub fanout: Vec<Vec<(usize, usize)>>,
    /// The sum's 33 bits, least significant first: 32 sum gates, then the carry out.
    pub outputs: Vec<usize>,
}

/// Gates before the full adders.
pub const INPUTS: usize = 1 + 2 * BITS;

impl Circuit {
    /// The 32-bit ripple-carry adder.
    pub fn adder() -> Circuit {
        let mut gates: Vec<Gate> = (0..INPUTS).map(|_| Gate { kind: Kind::Input, inputs: vec![] }).collect();
        let mut outputs = Vec::new();
        let mut carry = 0;
        for i in 0..BITS {
            let (a, b, base) = (1 + i, 1 + BITS + i, gates.len());
            let mut add = |kind, x, y| gates.push(Gate { kind, inputs: vec![x, y] });
            add(Kind::Xor, a, b); // base: a ⊕ b
            add(Kind::Xor, base, carry); // base + 1: the sum bit
            add(Kind::And, a, b); // base + 2
            add(Kind::And, base, carry); // base + 3
            add(Kind::Or, base + 2, base + 3); // base + 4: the carry out
            outputs.push(base + 1);
            carry = base + 4;
        }
        outputs.push(carry);
        let mut fanout = vec![Vec::new(); gates.len()];
        for (g, gate) in gates.iter().enumerate() {
            for (pin, &src) in gate.inputs.iter().enumerate() {
                fanout[src].push((g, pin));
            }
        }
        Circuit { gates, fanout, outputs }
    }
}

/// How gates are given to nodes (003 Table 6.4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// The first N/P gates on the first node, and so on.
    Linear,
    /// Each gate on a node drawn from this seed.
    Random(u64),
}

impl Placement {
    /// The node of each of `gates` gates among `nodes`.
    pub fn assign(self, gates: usize, nodes: usize) -> Vec<usize> {
        match self {
            Placement::Linear => (0..gates).map(|g| g * nodes / gates).collect(),
            Placement::Random(seed) => {
                let v = Vector::random(gates, seed);
                v.iter().map(|x| x.a as usize % nodes).collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_adder_has_225_gates_and_every_gate_feeds_something_or_is_an_output() {
        let c = Circuit::adder();
        assert_eq!(c.gates.len(), 225);
        assert_eq!(c.outputs.len(), 33);
        for g in 0..c.gates.len() {
            assert!(!c.fanout[g].is_empty() || c.outputs.contains(&g), "gate {g} drives nothing");
        }
    }
}
