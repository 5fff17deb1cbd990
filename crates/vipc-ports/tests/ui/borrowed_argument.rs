#[vipc_ports::interface]
pub trait Greeter {
    fn greet(&self, name: &str) -> String;
}

fn main() {}
