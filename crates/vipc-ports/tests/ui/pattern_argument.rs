#[vipc_ports::interface]
pub trait Geometry {
    fn area(&self, (w, h): (u32, u32)) -> u64;
}

fn main() {}
