#[vipc_ports::interface]
pub trait Numbers {
    fn all(&self) -> impl Iterator<Item = u64>;
}

fn main() {}
