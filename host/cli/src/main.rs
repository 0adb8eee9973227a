//! The `onestep` binary: the only place that wires concrete parts together (config → MySQL
//! backend → wasm runtime → worker / HTTP API). One file per subcommand under `commands/`.
//!
//! Exit codes (docs/cli.md#worker-commands): 0 success; 1 the app failed while starting or running (or a client
//! command's execution ended badly); 2 load, validation or argument errors.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod commands;
mod logging;
mod metrics;
mod quarantine_board;
mod wiring;

/// Tracked execution with sandboxed WebAssembly handlers on MySQL/MariaDB, PostgreSQL or an
/// embedded SQLite file.
#[derive(Debug, Parser)]
#[command(name = "onestep", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Load and validate a YAML app file and print its summary.
    Check(commands::check::CheckArgs),
    /// Run the worker declared in a YAML app file until SIGINT/SIGTERM.
    Run(commands::run::RunArgs),
    /// Create the execution tables (with a DDL-capable DSN).
    Migrate(commands::migrate::MigrateArgs),
    /// Copy every execution, attempt, diagnostics and trace row to another database.
    Copy(commands::copy::CopyArgs),
    /// Serve the HTTP API declared in the `api:` section of a YAML app file.
    Serve(commands::serve::ServeArgs),
    /// API, dashboard and workers in one process on a local database, for development.
    Dev(commands::dev::DevArgs),
    /// Submit an execution.
    Submit(commands::client::SubmitArgs),
    /// Show one execution.
    Get(commands::client::GetArgs),
    /// List executions, newest first.
    List(commands::client::ListArgs),
    /// Cancel an execution.
    Cancel(commands::client::CancelArgs),
    /// Retry a failed, cancelled or expired execution (a new, linked execution).
    Retry(commands::client::RetryArgs),
    /// Print the result of a succeeded execution (never waits).
    Result(commands::client::ResultArgs),
    /// Wait until an execution is terminal (on the database, or through the API with --api).
    Wait(commands::client::WaitArgs),
    /// Follow an execution's events from the HTTP API (status, attempts, progress, log lines)
    /// until it ends; exits 0 when it succeeded.
    Watch(commands::events::WatchArgs),
    /// Show an execution's attempts with their messages, progress and component digest.
    Attempts(commands::client::AttemptsArgs),
    /// Print an attempt's kept log lines (`--follow` while it runs).
    Logs(commands::client::LogsArgs),
    /// Show an execution's durable steps: key, size, when and by which attempt (`--values`).
    Steps(commands::client::StepsArgs),
    /// Delete finished executions older than a duration, in bounded batches.
    Purge(commands::client::PurgeArgs),
    /// Measure submit and drain throughput with no-op executions.
    Bench(onestep_bench::BenchArgs),
    /// Work with one task locally (`task run`).
    #[command(subcommand)]
    Task(commands::task_run::TaskCommand),
    /// Run a recorded execution again locally with the current component; writes nothing.
    Replay(commands::task_run::ReplayArgs),
    /// Deploy a handler through the HTTP API: upload its component, then deploy it with the
    /// manifest's settings (a `deploy` token).
    Deploy(commands::deploy::DeployArgs),
    /// Read and change task deployments through the HTTP API (`list`, `show`, `events`,
    /// `rollback`, `deactivate`).
    #[command(subcommand)]
    Deployments(commands::deploy::DeploymentsCommand),
    /// Operator commands on the component store (`gc`), on the database.
    #[command(subcommand)]
    Components(commands::deploy::ComponentsCommand),
    /// Print the worker topology of a YAML app file (connectors, sources, tasks, components).
    Render(commands::render::RenderArgs),
    /// Create a project (`new handler NAME --lang rust|python|js`).
    #[command(subcommand)]
    New(commands::new::NewCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("onestep: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(async move {
        match cli.command {
            Command::Check(a) => commands::check::run(a).await,
            Command::Run(a) => commands::run::run(a).await,
            Command::Migrate(a) => commands::migrate::run(a).await,
            Command::Copy(a) => commands::copy::run(a).await,
            Command::Serve(a) => commands::serve::run(a).await,
            Command::Dev(a) => commands::dev::run(a).await,
            Command::Submit(a) => commands::client::submit(a).await,
            Command::Get(a) => commands::client::get(a).await,
            Command::List(a) => commands::client::list(a).await,
            Command::Cancel(a) => commands::client::cancel(a).await,
            Command::Retry(a) => commands::client::retry(a).await,
            Command::Result(a) => commands::client::result(a).await,
            Command::Wait(a) => commands::client::wait(a).await,
            Command::Watch(a) => commands::events::watch(a).await,
            Command::Attempts(a) => commands::client::attempts(a).await,
            Command::Logs(a) => commands::client::logs(a).await,
            Command::Steps(a) => commands::client::steps(a).await,
            Command::Purge(a) => commands::client::purge(a).await,
            Command::Bench(a) => onestep_bench::run(a, bench_host()).await,
            Command::Task(commands::task_run::TaskCommand::Run(a)) => {
                commands::task_run::task_run(a).await
            }
            Command::Replay(a) => commands::task_run::replay(a).await,
            Command::Deploy(a) => commands::deploy::deploy(a).await,
            Command::Deployments(c) => commands::deploy::deployments(c).await,
            Command::Components(c) => commands::deploy::components(c).await,
            Command::Render(a) => commands::render::run(a),
            Command::New(commands::new::NewCommand::Handler(a)) => commands::new::new_handler(a),
        }
    });
    ExitCode::from(code)
}

/// What `onestep bench` (host/bench) needs from the cli: the wasm compile cache and the task
/// runner a component handler runs in, the same as `onestep run`'s.
fn bench_host() -> onestep_bench::Host {
    onestep_bench::Host {
        wasm_cache_dir: wiring::wasm_cache_dir(),
        component_runner: std::sync::Arc::new(|handler, sandbox, max_result_bytes| {
            std::sync::Arc::new(wiring::wasm_runner::WasmTaskRunner::new(
                handler,
                sandbox,
                max_result_bytes,
            ))
        }),
    }
}
