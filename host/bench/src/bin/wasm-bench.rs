//! `wasm-bench`: latency/throughput figures of onestep-wasm (not a test).
//!
//! ```text
//! scripts/build-guests.sh
//! cargo run --release -p onestep-bench --bin wasm-bench -- [ITERATIONS]
//! ```
//!
//! Prints p50/p99 (µs) and calls/s of `echo` (new store + instantiate +
//! call) with pooling on and off at 1 and 4 concurrent tasks, then compile vs
//! cached-load time of `summarize` (and of `python-echo` and the JavaScript
//! `js-echo` when built).
//! Guests are read from `$ONESTEP_GUESTS` or `guest-examples/out`.

use onestep_wasm::{
    CancelHandle, InvocationContext, Outcome, PoolingMode, Runtime, RuntimeSettings,
    SandboxSettings,
};
use std::error::Error;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

type BoxResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

fn guests_dir() -> PathBuf {
    std::env::var_os("ONESTEP_GUESTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../guest-examples/out"))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

async fn bench_echo(pooling: PoolingMode, iterations: usize, cache: &Path) -> BoxResult<()> {
    let rt = Runtime::new(RuntimeSettings {
        pooling,
        cache_dir: Some(cache.to_path_buf()),
        ..RuntimeSettings::default()
    })?;
    let echo = rt.load(guests_dir().join("echo.wasm"))?;
    let payload = r#"{"n": 12345, "s": "some text to copy around"}"#;
    let sandbox = SandboxSettings::default();
    // Warm up (pool slots, allocator caches).
    for _ in 0..500 {
        echo.invoke(
            &sandbox,
            InvocationContext::default(),
            payload,
            CancelHandle::new(),
            None,
        )
        .await;
    }
    for concurrency in [1usize, 4] {
        let per_task = iterations / concurrency;
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..concurrency {
            let echo = echo.clone();
            let sandbox = sandbox.clone();
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::with_capacity(per_task);
                for _ in 0..per_task {
                    let t = Instant::now();
                    let outcome = echo
                        .invoke(
                            &sandbox,
                            InvocationContext::default(),
                            payload,
                            CancelHandle::new(),
                            None,
                        )
                        .await;
                    lat.push(t.elapsed());
                    if !matches!(outcome, Outcome::Succeeded(_)) {
                        return Err(format!("unexpected outcome {outcome:?}"));
                    }
                }
                Ok(lat)
            }));
        }
        let mut all = Vec::with_capacity(iterations);
        for t in tasks {
            all.extend(t.await??);
        }
        let wall = started.elapsed();
        all.sort();
        println!(
            "echo  pooling={:<5} tasks={}  p50={:>6.1} µs  p99={:>7.1} µs  {:>8.0} calls/s  ({} calls)",
            format!("{:?}", rt.pooling_enabled()),
            concurrency,
            percentile(&all, 0.50).as_secs_f64() * 1e6,
            percentile(&all, 0.99).as_secs_f64() * 1e6,
            all.len() as f64 / wall.as_secs_f64(),
            all.len()
        );
    }
    Ok(())
}

fn bench_load(name: &str, cache_root: &Path) -> BoxResult<()> {
    let path = guests_dir().join(format!("{name}.wasm"));
    if !path.exists() {
        println!("load  {name}: skipped ({} not built)", path.display());
        return Ok(());
    }
    let cache = cache_root.join(format!("load-{name}"));
    let _ = std::fs::remove_dir_all(&cache);
    let settings = RuntimeSettings {
        cache_dir: Some(cache.clone()),
        ..RuntimeSettings::default()
    };
    let cold = Runtime::new(settings.clone())?;
    let t = Instant::now();
    cold.load(&path)?;
    let compile = t.elapsed();
    let warm = Runtime::new(settings)?;
    let t = Instant::now();
    warm.load(&path)?;
    let cached = t.elapsed();
    println!(
        "load  {name:<12} compile={:>9.1} ms (compiles={})  cached={:>7.1} ms (compiles={}, disk hits={})",
        compile.as_secs_f64() * 1e3,
        cold.compile_count(),
        cached.as_secs_f64() * 1e3,
        warm.compile_count(),
        warm.cache_stats().disk_hits
    );
    let _ = std::fs::remove_dir_all(&cache);
    Ok(())
}

fn main() -> BoxResult<()> {
    let iterations: usize = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 20_000,
    };
    let cache = std::env::temp_dir().join(format!("onestep-wasm-bench-{}", std::process::id()));
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    println!(
        "onestep-wasm bench: {iterations} echo calls per row, {} cores",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    tokio.block_on(async {
        bench_echo(PoolingMode::On, iterations, &cache).await?;
        bench_echo(PoolingMode::Off, iterations, &cache).await
    })?;
    bench_load("summarize", &cache)?;
    bench_load("python-echo", &cache)?;
    bench_load("js-echo", &cache)?;
    let _ = std::fs::remove_dir_all(&cache);
    Ok(())
}
