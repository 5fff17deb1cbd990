#[vipc_ports::interface]
pub trait Store<T> {
    fn get(&self, key: String) -> Option<T>;
}

fn main() {}
