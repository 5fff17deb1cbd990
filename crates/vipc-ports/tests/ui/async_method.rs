#[vipc_ports::interface]
pub trait Counter {
    async fn add(&self, n: u64) -> u64;
}

fn main() {}
