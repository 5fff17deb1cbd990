#[vipc_ports::interface]
pub trait Counter {
    fn add(&mut self, n: u64) -> u64;
}

fn main() {}
