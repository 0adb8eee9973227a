//! A valid component that is not an onestep handler (a plain WASI command).

fn main() {
    println!("hello from a command, not a handler");
}
