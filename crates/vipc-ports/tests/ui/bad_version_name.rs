#[vipc_ports::interface(revision = 2)]
pub trait Counter {
    fn add(&self, n: u64) -> u64;
}

fn main() {}
