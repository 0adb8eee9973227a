//! `onestep bench` (being built).

/// Arguments of `onestep bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {}

/// Runs the command; returns the process exit code.
pub async fn run(_args: BenchArgs) -> u8 {
    eprintln!("onestep bench: not built yet");
    1
}
