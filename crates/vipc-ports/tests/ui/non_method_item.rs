#[vipc_ports::interface]
pub trait Counter {
    const START: u64;
    fn add(&self, n: u64) -> u64;
}

fn main() {}
