#[vipc_ports::interface(version = "two")]
pub trait Counter {
    fn add(&self, n: u64) -> u64;
}

fn main() {}
