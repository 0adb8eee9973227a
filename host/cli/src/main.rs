//! The `onestep` binary (placeholder; being built).

fn main() {}
