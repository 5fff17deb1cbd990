#[vipc_ports::interface]
pub trait Counter {
    fn add<T: Into<u64>>(&self, n: T) -> u64;
}

fn main() {}
