#[vipc_ports::interface]
pub trait Directory {
    fn connect(&self, name: String) -> bool;
}

fn main() {}
