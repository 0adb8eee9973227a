//! `onestep bench`: submit N no-op executions, drain them with one in-process worker, and print
//! throughput, queue latency and CPU cost per execution (docs/benchmarks.md). Figures, not a
//! timed test: build with `--release` before reading them.
//!
//! This crate owns the benchmarks so that no shipping crate carries them: the cli's `onestep
//! bench` parses [`BenchArgs`] and calls [`run`] with what only the cli has (the wasm task runner
//! and its compile cache, [`Host`]); the backends' benchmark helpers (history seeding,
//! throw-away databases, attempt ids of a chosen version) sit behind their `bench-support`
//! feature, and [`store`] is the one module here that knows them. The crate also builds
//! `wasm-bench`, the wasm runtime's figures (`src/bin/wasm-bench.rs`).

mod counting;
pub mod cpu;
mod http;
mod report;
mod retention;
mod round;
mod rss;
mod runner;
mod store;
pub mod wire;

pub use cpu::process_cpu_ms;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use onestep_core::history::MAX_HISTORY_ROWS;
use onestep_core::ids::IdVersion;
use onestep_core::runner::TaskRunner;
use onestep_wasm::{Handler, SandboxSettings};

/// Arguments of `onestep bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Number of executions to submit and drain.
    #[arg(short = 'n', long = "count", default_value_t = 20_000)]
    pub count: usize,
    /// Use this database (tables are created if missing; nothing is dropped). Default: create
    /// `onestep_bench_<random>` on `--server-url` and drop it at the end.
    #[arg(long, env = "ONESTEP_BENCH_DSN")]
    pub dsn: Option<String>,
    /// Server on which the throw-away database is created (without a database name): a
    /// `mysql://` or a `postgres://` URL, or `sqlite://` (a file in a new temporary directory).
    #[arg(long, default_value = "mysql://root@127.0.0.1:3306/")]
    pub server_url: String,
    /// Keep the throw-away database instead of dropping it.
    #[arg(long)]
    pub keep: bool,
    /// `noop` (a trivial in-process runner returning the payload) or `component:PATH` (a wasm
    /// component, e.g. the echo guest, through the wasm runtime).
    #[arg(long, default_value = "noop")]
    pub handler: String,
    /// Worker concurrency (executions in flight).
    #[arg(long, default_value_t = 128)]
    pub concurrency: u32,
    /// Maximum leases per claim.
    #[arg(long, default_value_t = 100)]
    pub batch_size: u32,
    /// Maximum completions per `complete_many` transaction.
    #[arg(long, default_value_t = onestep_worker::WorkerSettings::default().completion_batch)]
    pub completion_batch: usize,
    /// Submissions per `submit_many` call.
    #[arg(long, default_value_t = 1000)]
    pub submit_chunk: usize,
    /// Maximum pooled connections (default: concurrency + 4, as `onestep run` sizes it).
    #[arg(long)]
    pub pool_max: Option<usize>,
    /// Spread the submissions round-robin over this many fairness keys (`k0`, `k1`, …) to
    /// measure the fair claim with many keys (docs/benchmarks.md#fair-claim); 0 = no key (every
    /// execution in the namespace's key).
    #[arg(long, default_value_t = 0)]
    pub fairness_keys: usize,
    /// Namespace of the benchmark's executions.
    #[arg(long, default_value = "bench")]
    pub namespace: String,
    /// Task name of the benchmark's executions.
    #[arg(long, default_value = "bench.noop")]
    pub task_name: String,
    /// Give up draining after this many seconds.
    #[arg(long, default_value_t = 600.0)]
    pub timeout_s: f64,
    /// Finished executions (one attempt each) seeded in the namespace and task before measuring
    /// (docs/benchmarks.md#history).
    #[arg(long, default_value_t = 0)]
    pub history: u64,
    /// Id version of the seeded history: `v7` (time-ordered, as written today) or `v4` (random,
    /// as written before).
    #[arg(long, default_value = "v7", value_parser = ["v7", "v4"])]
    pub history_ids: String,
    /// Id version of the executions and attempts the run itself writes: `v7` (time-ordered, as
    /// `onestep run` and `serve` write them) or `v4` (random), to compare the two layouts.
    #[arg(long, default_value = "v7", value_parser = ["v7", "v4"])]
    pub ids: String,
    /// Give every submission (and every seeded history row) an idempotency key, as callers
    /// that retry do, so the idempotency index is written and read
    /// (docs/benchmarks.md#the-idempotency-index): `random` (the default when the flag has no
    /// value: 32 random hex digits) or `ordered` (the run's keys are time-ordered, as keys
    /// derived from a UUIDv7 or a timestamp are; the history's stay random).
    #[arg(long, value_name = "ORDER", num_args = 0..=1, default_missing_value = "random",
          value_parser = ["random", "ordered"])]
    pub idempotency_keys: Option<String>,
    /// Submit and drain `-n` executions this many times on the same tables (the history is
    /// seeded once, before the first round); one report per round.
    #[arg(long, default_value_t = 1)]
    pub rounds: u32,
    /// After each round, purge the namespace's executions that finished longer ago than this
    /// (`30s`, `5min`), in batches of `--purge-batch`, and report what it removed and took
    /// (docs/benchmarks.md#steady-state-with-purge).
    #[arg(long, value_name = "DURATION")]
    pub purge_older_than: Option<String>,
    /// After this round, run `onestep migrate --upgrade` on the tables (with
    /// `--reference-tables`: the same run measures reference-created tables before and after
    /// the upgrade, docs/benchmarks.md#reference-created-tables).
    #[arg(long, value_name = "ROUND")]
    pub upgrade_after_round: Option<u32>,
    /// Executions removed per purge transaction.
    #[arg(long, default_value_t = 1000)]
    pub purge_batch: u32,
    /// Create missing tables with the reference's DDL (MySQL/MariaDB: no `claimable` column and
    /// indexes; PostgreSQL: no expiry and status indexes), to measure reference-created tables
    /// before and after `onestep migrate --upgrade`.
    #[arg(long)]
    pub reference_tables: bool,
    /// Do not persist attempt diagnostics (as when their table is absent), to measure what
    /// they cost (docs/observability.md#attempt-diagnostics).
    #[arg(long)]
    pub no_diagnostics: bool,
    /// Outbound HTTP mode (docs/benchmarks.md#outbound-http-1000-in-flight): start a loopback
    /// HTTP server answering `GET /slow` after this many milliseconds, allow the task's sandbox
    /// that origin, and give every execution the payload `{"url": "<origin>/slow"}`. Needs a
    /// `--handler component:PATH` that fetches its payload's `url` (the `fetch` guest).
    #[arg(long)]
    pub http_delay_ms: Option<u64>,
    /// Lease length in seconds (default: the worker's default, 90 s; 6 s with
    /// `--http-delay-ms`, so that heartbeats happen during the run).
    #[arg(long)]
    pub lease_s: Option<f64>,
    /// Heartbeat period in seconds (default: the worker's default, 30 s; 2 s with
    /// `--http-delay-ms`). At most a third of the lease.
    #[arg(long)]
    pub heartbeat_s: Option<f64>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// What only the cli has and a component handler needs: its compile cache and its wasm task
/// runner (the one `onestep run` uses).
#[derive(Clone)]
pub struct Host {
    /// The wasm compile cache (`None`: no disk cache).
    pub wasm_cache_dir: Option<PathBuf>,
    /// Makes the task runner of a loaded component, given its sandbox and the largest result
    /// it may store.
    pub component_runner: ComponentRunner,
}

/// See [`Host::component_runner`].
pub type ComponentRunner =
    Arc<dyn Fn(Handler, SandboxSettings, usize) -> Arc<dyn TaskRunner> + Send + Sync>;

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("wasm_cache_dir", &self.wasm_cache_dir)
            .finish_non_exhaustive()
    }
}

/// A flag with a value `onestep bench` cannot use (exit code 2).
#[derive(Debug, thiserror::Error)]
pub(crate) enum FlagError {
    #[error("-n, --submit-chunk, --concurrency and --batch-size must be >= 1")]
    Zero,
    #[error("--http-delay-ms needs --handler component:PATH (e.g. the fetch guest)")]
    HttpNeedsComponent,
    #[error("--upgrade-after-round must be between 1 and --rounds - 1")]
    UpgradeRound,
    #[error("--rounds must be >= 1")]
    Rounds,
    #[error("--history {0} is over the limit of {MAX_HISTORY_ROWS} rows")]
    History(u64),
    #[error("{flag} must be a positive number of seconds, got {value}")]
    NotPositive { flag: &'static str, value: f64 },
    #[error("{flag} {value} is too large a number of seconds")]
    TooLarge { flag: &'static str, value: f64 },
    #[error("{0}")]
    Other(String),
}

/// The flags checked and converted, before anything touches a database.
#[derive(Debug, Clone)]
pub(crate) struct Flags {
    /// `--purge-older-than`.
    pub purge_older_than: Option<Duration>,
    /// `--timeout-s` (at least 0.1 s).
    pub timeout: Duration,
    /// `--lease-s`, or 6 s with `--http-delay-ms`.
    pub lease: Option<Duration>,
    /// `--heartbeat-s`, or 2 s with `--http-delay-ms`.
    pub heartbeat: Option<Duration>,
    /// `--ids`.
    pub ids: IdVersion,
}

/// A positive number of seconds as a `Duration`; an error, not a panic, when it is not
/// finite, not positive or beyond `Duration`.
pub(crate) fn secs(value: f64, flag: &'static str) -> Result<Duration, FlagError> {
    if !(value.is_finite() && value > 0.0) {
        return Err(FlagError::NotPositive { flag, value });
    }
    Duration::try_from_secs_f64(value).map_err(|_| FlagError::TooLarge { flag, value })
}

impl Flags {
    fn check(args: &BenchArgs) -> Result<Flags, FlagError> {
        if args.count == 0
            || args.submit_chunk == 0
            || args.concurrency == 0
            || args.batch_size == 0
        {
            return Err(FlagError::Zero);
        }
        if args.http_delay_ms.is_some() && !args.handler.starts_with("component:") {
            return Err(FlagError::HttpNeedsComponent);
        }
        if args
            .upgrade_after_round
            .is_some_and(|k| k == 0 || k >= args.rounds)
        {
            return Err(FlagError::UpgradeRound);
        }
        if args.rounds == 0 {
            return Err(FlagError::Rounds);
        }
        let purge_older_than = args
            .purge_older_than
            .as_deref()
            .map(retention::parse_older_than)
            .transpose()?;
        if args.history > MAX_HISTORY_ROWS {
            return Err(FlagError::History(args.history));
        }
        let http_mode = args.http_delay_ms.is_some();
        let lease = args
            .lease_s
            .or(http_mode.then_some(6.0))
            .map(|s| secs(s, "--lease-s"))
            .transpose()?;
        let heartbeat = args
            .heartbeat_s
            .or(http_mode.then_some(2.0))
            .map(|s| secs(s, "--heartbeat-s"))
            .transpose()?;
        // NaN and values below 0.1 s mean 0.1 s, as before; only the too large is refused.
        let timeout = secs(args.timeout_s.max(0.1), "--timeout-s")?;
        Ok(Flags {
            purge_older_than,
            timeout,
            lease,
            heartbeat,
            ids: if args.ids == "v4" {
                IdVersion::V4
            } else {
                IdVersion::V7
            },
        })
    }
}

/// Runs `onestep bench`; returns the process exit code (0 ok, 1 failure, 2 bad arguments).
pub async fn run(args: BenchArgs, host: Host) -> u8 {
    let flags = match Flags::check(&args) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("onestep bench: {e}");
            return 2;
        }
    };
    match round::bench(&args, &flags, &host).await {
        Ok(reports) => {
            if args.json {
                let text = match reports.as_slice() {
                    [one] => serde_json::to_string_pretty(one),
                    many => serde_json::to_string_pretty(many),
                };
                match text {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("onestep bench: {e}");
                        return 1;
                    }
                }
            } else {
                for report in &reports {
                    report::print_text(report);
                }
                if reports.len() > 1 {
                    retention::print_rounds(&reports);
                }
            }
            0
        }
        Err(e) => {
            eprintln!("onestep bench: {e:#}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchArgs,
    }

    fn flags(extra: &[&str]) -> Result<Flags, FlagError> {
        let mut argv = vec!["bench"];
        argv.extend_from_slice(extra);
        let cli = Cli::try_parse_from(argv).expect("parses");
        Flags::check(&cli.args)
    }

    #[test]
    fn huge_or_bad_seconds_are_errors_not_panics() {
        assert!(matches!(
            flags(&["--timeout-s", "1e20"]),
            Err(FlagError::TooLarge { .. })
        ));
        assert!(matches!(
            flags(&["--lease-s", "1e300"]),
            Err(FlagError::TooLarge { .. })
        ));
        assert!(matches!(
            flags(&["--heartbeat-s=-1"]),
            Err(FlagError::NotPositive { .. })
        ));
        assert!(matches!(
            flags(&["--lease-s", "inf"]),
            Err(FlagError::NotPositive { .. })
        ));
        let f = flags(&["--timeout-s", "0"]).expect("0 means the minimum");
        assert_eq!(f.timeout, Duration::from_millis(100));
    }

    #[test]
    fn defaults_and_ids() {
        let f = flags(&[]).expect("defaults");
        assert_eq!(f.ids, IdVersion::V7);
        assert_eq!(f.timeout, Duration::from_secs(600));
        assert!(f.lease.is_none() && f.heartbeat.is_none());
        assert_eq!(flags(&["--ids", "v4"]).expect("v4").ids, IdVersion::V4);
        let http = flags(&["--http-delay-ms", "5", "--handler", "component:x.wasm"]).expect("http");
        assert_eq!(http.lease, Some(Duration::from_secs(6)));
        assert_eq!(http.heartbeat, Some(Duration::from_secs(2)));
    }

    #[test]
    fn bad_combinations_are_refused() {
        assert!(matches!(flags(&["-n", "0"]), Err(FlagError::Zero)));
        assert!(matches!(
            flags(&["--http-delay-ms", "5"]),
            Err(FlagError::HttpNeedsComponent)
        ));
        assert!(matches!(
            flags(&["--rounds", "2", "--upgrade-after-round", "2"]),
            Err(FlagError::UpgradeRound)
        ));
        assert!(matches!(
            flags(&["--purge-older-than", "0s"]),
            Err(FlagError::Other(_))
        ));
        assert!(matches!(
            flags(&["--history", "100000001"]),
            Err(FlagError::History(_))
        ));
    }
}
