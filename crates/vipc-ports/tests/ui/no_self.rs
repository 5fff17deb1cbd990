#[vipc_ports::interface]
pub trait Counter {
    fn add(n: u64) -> u64;
}

fn main() {}
