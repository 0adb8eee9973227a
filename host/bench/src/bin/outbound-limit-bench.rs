//! `outbound-limit-bench`: the overhead of a fleet-wide outbound rate limit
//! (`sandbox.network.rate_limits`, docs/semantics.md#outbound-rate-limits) per outbound request
//! (a figure, not a test).
//!
//! ```text
//! scripts/build-guests.sh
//! cargo run --release -p onestep-bench --bin outbound-limit-bench -- [REQUESTS] [SERVER_URL...]
//! ```
//!
//! The `fetch` guest sends REQUESTS (default 2000) GET requests one after the other to a
//! loopback server, first with no rate limit, then with a limit too high to ever wait
//! (1,000,000/s, burst 1,000,000) whose buckets are the runtime's in-process ones, then the
//! same with the buckets of a throw-away database on each SERVER_URL (`mysql://…` for
//! MySQL/MariaDB, `postgres://…`). Prints the time per request of each run, the difference to
//! the unlimited run (the limiter's overhead per request: one bucket transaction) and the
//! p50/p99 of a bare `take` on the store. Guests are read from `$ONESTEP_GUESTS` or
//! `guest-examples/out`.

use std::error::Error;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use onestep_core::Backend;
use onestep_core::rate::{RateLimit, RateLimitStore, origin_bucket};
use onestep_core::store::StoreOptions;
use onestep_wasm::{
    CancelHandle, Handler, InvocationContext, NetworkSettings, Outcome, Runtime, RuntimeSettings,
    SandboxSettings,
};

type BoxResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

const NEVER_WAITS: RateLimit = RateLimit {
    per_second: 1_000_000.0,
    burst: 1_000_000,
};

fn guests_dir() -> PathBuf {
    std::env::var_os("ONESTEP_GUESTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../guest-examples/out"))
}

async fn start_server() -> BoxResult<u16> {
    let app = axum::Router::new().route("/r/{i}", axum::routing::get(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(port)
}

/// Runs the guest's `repeat` once; the time per request.
async fn per_request(
    handler: &Handler,
    sandbox: &SandboxSettings,
    port: u16,
    requests: u64,
) -> BoxResult<Duration> {
    let payload =
        serde_json::json!({"url": format!("http://127.0.0.1:{port}/r/{{i}}"), "repeat": requests})
            .to_string();
    let started = Instant::now();
    let outcome = handler
        .invoke(
            sandbox,
            InvocationContext::default(),
            &payload,
            CancelHandle::new(),
            None,
        )
        .await;
    let elapsed = started.elapsed();
    let Outcome::Succeeded(out) = outcome else {
        return Err(format!("unexpected outcome {outcome:?}").into());
    };
    let ok = serde_json::from_str::<serde_json::Value>(&out)?["ok"]
        .as_u64()
        .unwrap_or(0);
    if ok != requests {
        return Err(format!("{ok} of {requests} requests succeeded: {out}").into());
    }
    Ok(elapsed / u32::try_from(requests).unwrap_or(u32::MAX))
}

/// p50 and p99 of `n` bare takes.
async fn takes(store: &dyn RateLimitStore, n: usize) -> BoxResult<(Duration, Duration)> {
    let bucket = origin_bucket("http://bench.invalid:80");
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        store.take(&bucket, NEVER_WAITS, 1).await?;
        lat.push(t.elapsed());
    }
    lat.sort_unstable();
    let at = |p: f64| lat[((lat.len() - 1) as f64 * p).round() as usize];
    Ok((at(0.5), at(0.99)))
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

#[tokio::main]
async fn main() -> BoxResult<()> {
    let mut args = std::env::args().skip(1);
    let requests: u64 = match args.next() {
        Some(n) => n.parse()?,
        None => 2000,
    };
    let servers: Vec<String> = args.collect();
    let port = start_server().await?;
    let rt = Runtime::new(RuntimeSettings::default())?;
    let fetch = rt.load(guests_dir().join("fetch.wasm"))?;
    let origin = format!("http://127.0.0.1:{port}");
    let mut plain = SandboxSettings {
        network: NetworkSettings::allowing([origin.as_str()])?,
        ..SandboxSettings::default()
    };
    plain.network.max_requests = requests + 1;
    let mut limited = plain.clone();
    limited.network.allow[0].rate_limit = Some(NEVER_WAITS);

    // Warm up the pool, the connection and the allocator; then the better of three runs each,
    // alternating (a shared machine's noise is larger than the difference measured).
    per_request(&fetch, &plain, port, 200).await?;
    let mut base = Duration::MAX;
    let mut memory = Duration::MAX;
    for _ in 0..3 {
        base = base.min(per_request(&fetch, &plain, port, requests).await?);
        memory = memory.min(per_request(&fetch, &limited, port, requests).await?);
    }
    println!(
        "  {requests} sequential requests, no rate limit:                {:>8.1} µs/request",
        us(base)
    );
    println!(
        "  with a rate limit, in-process buckets:                  {:>8.1} µs/request (overhead {:+.1} µs)",
        us(memory),
        us(memory) - us(base)
    );
    for url in servers {
        // `host:port` of the server URL names it in the output.
        let at = url
            .rsplit_once('@')
            .map_or(url.as_str(), |(_, rest)| rest)
            .trim_start_matches("//")
            .split('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        let (kind, store, scratch): (&str, Arc<dyn RateLimitStore>, Scratch) =
            if onestep_postgres::dsn::is_postgres_scheme(url.split_once("://").map_or("", |s| s.0))
            {
                let db = onestep_postgres::ScratchDatabase::create(&url, "onestep_bench_").await?;
                let b = onestep_postgres::PgBackend::open(StoreOptions::new(db.dsn().to_owned()))
                    .await?;
                ("postgres", b.rate_limits(), Scratch::Postgres(db))
            } else {
                let db = onestep_mysql::ScratchDatabase::create(&url, "onestep_bench_").await?;
                let b = onestep_mysql::MySqlBackend::open(StoreOptions::new(db.dsn().to_owned()))
                    .await?;
                ("mysql", b.rate_limits(), Scratch::Mysql(db))
            };
        let (p50, p99) = takes(store.as_ref(), 500).await?;
        let handler = fetch.clone().with_outbound_rate_limits(store);
        let t = per_request(&handler, &limited, port, requests).await?;
        let label = format!("{kind} {at}");
        println!(
            "  with a rate limit, {label:<24} buckets: {:>8.1} µs/request (overhead {:+.1} µs; bare take p50 {:.0} µs, p99 {:.0} µs)",
            us(t),
            us(t) - us(base),
            us(p50),
            us(p99)
        );
        scratch.drop_database().await;
    }
    Ok(())
}

/// A throw-away database, dropped at the end.
enum Scratch {
    Mysql(onestep_mysql::ScratchDatabase),
    Postgres(onestep_postgres::ScratchDatabase),
}

impl Scratch {
    async fn drop_database(self) {
        let dropped = match self {
            Scratch::Mysql(d) => d.drop_database().await,
            Scratch::Postgres(d) => d.drop_database().await,
        };
        if let Err(e) = dropped {
            eprintln!("cannot drop the benchmark database: {e}");
        }
    }
}
