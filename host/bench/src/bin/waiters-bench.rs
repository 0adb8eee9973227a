//! `waiters-bench`: one `onestep serve` holding many waiting callers, notified by polling and by
//! PostgreSQL `LISTEN`/`NOTIFY`, or by polling on MySQL/MariaDB
//! (docs/benchmarks.md#waiting-callers). Figures, not a test.
//!
//! ```text
//! waiters-bench ONESTEP_BIN ROOT_URL [LEVELS...]      (default levels: 0 1000 10000)
//! ```
//!
//! `ROOT_URL` is a `postgres://` or a `mysql://` (`mariadb://`) URL of a server on which the
//! bench may create and drop a scratch database; its scheme chooses the backend.
//!
//! For each `api.notify` mode (PostgreSQL: `poll`, then `listen`; MySQL/MariaDB: `poll`, the only
//! mode there) and each level N: submits 5,000 executions, opens N HTTP/1.1 connections to a real
//! `onestep serve` (a child process on the scratch database, `api.max_connections` raised for the
//! level), each waiting on `GET /v1/executions/{id}?wait=60` (N / 5,000 callers per execution),
//! then:
//! * the server's RSS before and while they wait (per waiting caller);
//! * the database's statements per second over 10 s while they wait and nothing changes: the
//!   cost of noticing changes, which must not grow with N. PostgreSQL: committed transactions
//!   (`pg_stat_database.xact_commit` of the scratch database), read after 11 s for the server's
//!   statistics of the callers' arrival to be reported, minus the bench's two statistics reads.
//!   MySQL/MariaDB: the delta of the server-wide `Questions` counter (`SHOW GLOBAL STATUS`:
//!   every statement any client of the server sent, prepared executes included, `PREPARE`s,
//!   closes and pings not), minus the bench's own counter read (measured just before the window
//!   as the delta between two reads). It counts every session of the server, so the figure holds
//!   only on a server nobody else uses while the bench runs, such as the private test server of
//!   scripts/test-db.sh in CI;
//! * drains the 5,000 in this process (claim and complete, about 1,000 a second) and reports,
//!   per caller, the time from the execution's `finished_at` to its answer (p50, p99, max).
//!
//! `WAITERS_POLL_MS` (e.g. `"100 50"`) runs the `poll` mode once per listed `api.poll_ms`
//! (the column `notify` then reads `poll@50`); unset, the poll mode runs once with the default
//! period (100 ms).
//!
//! Then, on PostgreSQL only, the drain's cost of the notifications: `ONESTEP_BIN bench` (the real
//! worker, no-op handler) drains `WAITERS_DRAIN` executions (default 10,000) in 1 and in 2 worker
//! processes at once, on the same tables, with the notify trigger disabled (as before it
//! existed), enabled while nobody listens, and enabled while an `onestep serve` with
//! `api.notify: listen` is up (so every completion transaction sends a `NOTIFY`); the variants
//! interleaved, `WAITERS_ROUNDS` rounds (default 2), completed executions per second of each.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use chrono::{DateTime, Utc};
use http_body_util::{BodyExt, Empty};
use onestep_core::ports::{ExecutionStore, LeaseStore, StoreStats};
use onestep_core::request::{ClaimRequest, NamespaceScope, SubmitRequest, prepare_submission};
use onestep_core::{Completion, ExecutionError, Limits};
use onestep_mysql::{Flavor, MySqlBackend};
use onestep_postgres::PgBackend;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use uuid::Uuid;

const EXECUTIONS: usize = 5_000;
const NAMESPACE: &str = "bench";
const TASK: &str = "wait";
/// Connections opened at once while the callers arrive (the listen backlog holds the rest).
const CONNECTING: usize = 256;
const IDLE_WINDOW: Duration = Duration::from_secs(10);
/// PostgreSQL's `PGSTAT_IDLE_INTERVAL` (10 s) and a margin.
const STATS_FLUSH: Duration = Duration::from_secs(11);

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(bin), Some(root)) = (args.get(1), args.get(2)) else {
        bail!("usage: waiters-bench ONESTEP_BIN POSTGRES_OR_MYSQL_ROOT_URL [LEVELS...]");
    };
    let levels: Vec<usize> = if args.len() > 3 {
        args[3..]
            .iter()
            .map(|a| {
                a.parse()
                    .with_context(|| format!("level {a:?} is not a number"))
            })
            .collect::<Result<_>>()?
    } else {
        vec![0, 1_000, 10_000]
    };
    let db = Scratch::create(root.trim())
        .await
        .context("scratch database")?;
    let outcome = run(bin, db.dsn(), &levels).await;
    let dropped = db.drop_database().await;
    outcome?;
    dropped.context("drop the scratch database")?;
    Ok(())
}

/// A throw-away database on the server of the root URL.
enum Scratch {
    Postgres(onestep_postgres::ScratchDatabase),
    Mysql(onestep_mysql::ScratchDatabase),
}

impl Scratch {
    /// `onestep_waiters_<random>` on `root`, a PostgreSQL or MySQL/MariaDB URL by its scheme.
    async fn create(root: &str) -> Result<Scratch> {
        const PREFIX: &str = "onestep_waiters_";
        Ok(match Kind::of(root)? {
            Kind::Postgres => {
                Scratch::Postgres(onestep_postgres::ScratchDatabase::create(root, PREFIX).await?)
            }
            Kind::Mysql => {
                Scratch::Mysql(onestep_mysql::ScratchDatabase::create(root, PREFIX).await?)
            }
        })
    }

    /// The DSN of the database (it carries the root URL's credentials: never print it).
    fn dsn(&self) -> &str {
        match self {
            Scratch::Postgres(d) => d.dsn(),
            Scratch::Mysql(d) => d.dsn(),
        }
    }

    async fn drop_database(self) -> Result<(), ExecutionError> {
        match self {
            Scratch::Postgres(d) => d.drop_database().await,
            Scratch::Mysql(d) => d.drop_database().await,
        }
    }
}

/// The backend a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Postgres,
    Mysql,
}

impl Kind {
    /// By the scheme: `postgres://`, `postgresql[+driver]://`; `mysql[+driver]://`,
    /// `mariadb://`.
    fn of(url: &str) -> Result<Kind> {
        let scheme = url.trim().split_once("://").map_or("", |(s, _)| s);
        if onestep_postgres::dsn::is_postgres_scheme(scheme) {
            Ok(Kind::Postgres)
        } else if scheme == "mysql" || scheme.starts_with("mysql+") || scheme == "mariadb" {
            Ok(Kind::Mysql)
        } else {
            bail!("the root URL must be a postgres:// or mysql:// URL, not {scheme:?}://…")
        }
    }
}

/// What a level needs of a store: submit, get, claim and complete.
trait Store: ExecutionStore + LeaseStore {}
impl<T: ExecutionStore + LeaseStore> Store for T {}

/// The backend under test: its store, and how its statements are counted (module docs).
enum Backend {
    Postgres {
        store: PgBackend,
        /// A connection of this process reading `pg_stat_database`.
        stats: tokio_postgres::Client,
        datname: String,
    },
    Mysql {
        store: MySqlBackend,
    },
}

impl Backend {
    async fn open(dsn: &str) -> Result<Backend> {
        let mut opts = onestep_core::StoreOptions::new(dsn);
        opts.auto_create = true;
        opts.pool_max = 8;
        Ok(match Kind::of(dsn)? {
            Kind::Postgres => {
                let store = PgBackend::open(opts).await.context("open the backend")?;
                let (stats, stats_conn) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
                    .await
                    .context("statistics connection")?;
                tokio::spawn(stats_conn);
                let datname: String = stats
                    .query_one("SELECT current_database()", &[])
                    .await?
                    .get(0);
                Backend::Postgres {
                    store,
                    stats,
                    datname,
                }
            }
            Kind::Mysql => Backend::Mysql {
                store: MySqlBackend::open(opts).await.context("open the backend")?,
            },
        })
    }

    fn store(&self) -> &dyn Store {
        match self {
            Backend::Postgres { store, .. } => store,
            Backend::Mysql { store } => store,
        }
    }

    /// The resource type of the connector in `onestep serve`'s configuration.
    fn resource_type(&self) -> &'static str {
        match self {
            Backend::Postgres { .. } => "postgres",
            Backend::Mysql { .. } => "mysql",
        }
    }

    /// The `api.notify` modes the backend has.
    fn modes(&self) -> &'static [&'static str] {
        match self {
            Backend::Postgres { .. } => &["poll", "listen"],
            Backend::Mysql { .. } => &["poll"],
        }
    }

    /// The server, for the table's title.
    fn title(&self) -> String {
        match self {
            Backend::Postgres { .. } => "PostgreSQL".into(),
            Backend::Mysql { store } => {
                let server = store.server();
                let product = match server.flavor {
                    Flavor::MariaDb => "MariaDB",
                    Flavor::MySql => "MySQL",
                };
                let (major, minor, patch) = server.version;
                format!("{product} {major}.{minor}.{patch}")
            }
        }
    }

    /// The header of the statements-per-second column.
    fn rate_header(&self) -> &'static str {
        match self {
            Backend::Postgres { .. } => "commits/s",
            Backend::Mysql { .. } => "queries/s",
        }
    }

    /// The database's statements per second over [`IDLE_WINDOW`] from now, without this
    /// process's own reads of the counter (module docs).
    async fn idle_rate(&self) -> Result<f64> {
        match self {
            Backend::Postgres { stats, datname, .. } => {
                // A PostgreSQL backend reports its statistics at most once a second while busy
                // and after 10 s once idle: let the reads of the callers' arrival reach the
                // counters first.
                tokio::time::sleep(STATS_FLUSH).await;
                let c0 = commits(stats, datname).await?;
                let t0 = Instant::now();
                tokio::time::sleep(IDLE_WINDOW).await;
                let c1 = commits(stats, datname).await?;
                // The two statistics reads of this process (clear + read) are one commit each.
                Ok((c1 - c0 - 2).max(0) as f64 / t0.elapsed().as_secs_f64())
            }
            Backend::Mysql { store } => {
                // The counter is live; what one read of it adds (the `SHOW` itself, and whatever
                // the pooled connection costs) is the delta between two reads back to back, the
                // smallest of three pairs (a poll may fall between the two of a pair).
                let mut own = f64::INFINITY;
                let mut q0 = questions(store).await?;
                for _ in 0..3 {
                    let q = questions(store).await?;
                    own = own.min(q - q0);
                    q0 = q;
                }
                let t0 = Instant::now();
                tokio::time::sleep(IDLE_WINDOW).await;
                let q1 = questions(store).await?;
                Ok((q1 - q0 - own).max(0.0) / t0.elapsed().as_secs_f64())
            }
        }
    }
}

/// The server-wide `Questions` counter of MySQL/MariaDB (`SHOW GLOBAL STATUS`).
async fn questions(store: &MySqlBackend) -> Result<f64> {
    store
        .server_counters()
        .await?
        .get("questions")
        .copied()
        .context("SHOW GLOBAL STATUS has no Questions counter")
}

async fn run(bin: &str, dsn: &str, levels: &[usize]) -> Result<()> {
    let backend = Backend::open(dsn).await?;
    println!(
        "waiting callers on one `onestep serve` ({}), {EXECUTIONS} executions per level",
        backend.title()
    );
    println!(
        "{:>7} {:>8} {:>9} {:>9} {:>11} {:>10} {:>8} {:>8} {:>8} {:>9}",
        "notify",
        "waiters",
        "rss MiB",
        "rss wait",
        "KiB/waiter",
        backend.rate_header(),
        "p50 ms",
        "p99 ms",
        "max ms",
        "answered"
    );
    // `api.poll_ms` variants of the poll mode (WAITERS_POLL_MS), none = the default period.
    let polls: Vec<Option<u64>> = match std::env::var("WAITERS_POLL_MS") {
        Ok(list) if !list.trim().is_empty() => list
            .split_whitespace()
            .map(|v| {
                v.parse::<u64>()
                    .map(Some)
                    .with_context(|| format!("WAITERS_POLL_MS: {v:?} is not a number of ms"))
            })
            .collect::<Result<_>>()?,
        _ => vec![None],
    };
    for notify in backend.modes() {
        let variants: &[Option<u64>] = if *notify == "poll" { &polls } else { &[None] };
        for poll_ms in variants {
            let label = match poll_ms {
                Some(ms) => format!("{notify}@{ms}"),
                None => (*notify).to_owned(),
            };
            for &n in levels {
                let server =
                    Server::start(bin, backend.resource_type(), dsn, notify, *poll_ms, n).await?;
                let row = level(&backend, &server, &label, n).await;
                drop(server);
                row?;
            }
        }
    }
    match &backend {
        Backend::Postgres { stats, .. } => drain_cost(bin, dsn, stats).await,
        // The notify trigger and its drain cost are PostgreSQL's.
        Backend::Mysql { .. } => Ok(()),
    }
}

/// The drain with and without notifications (module docs): completed executions per second of
/// `ONESTEP_BIN bench` in 1 and 2 worker processes, per variant of the notify trigger.
async fn drain_cost(bin: &str, dsn: &str, stats: &tokio_postgres::Client) -> Result<()> {
    let count: usize = env_number("WAITERS_DRAIN", 10_000)?;
    let rounds: usize = env_number("WAITERS_ROUNDS", 2)?;
    println!();
    println!(
        "drain cost of the notifications: `onestep bench -n {count}` per worker process (no-op \
         handler), {rounds} rounds interleaved, completed/s summed over the processes"
    );
    const VARIANTS: [(&str, bool, bool); 3] = [
        ("no trigger (as before)", false, false),
        ("trigger, nobody listens", true, false),
        ("trigger, API listening", true, true),
    ];
    // Registrations of servers that did not unregister (killed) would keep the trigger
    // notifying in the "nobody listens" variant.
    stats
        .batch_execute(
            "DELETE FROM onestep_executions_listeners \
             WHERE pid NOT IN (SELECT pid FROM pg_stat_activity)",
        )
        .await?;
    let mut results: Vec<Vec<(usize, f64)>> = vec![Vec::new(); VARIANTS.len()];
    for round in 0..rounds {
        for (v, (_, trigger, listening)) in VARIANTS.iter().enumerate() {
            // Bench-only DDL: switching the notify trigger off measures the drain as it was
            // before the trigger existed (docs/postgres.md#change-notifications).
            stats
                .batch_execute(&format!(
                    "ALTER TABLE onestep_executions {} TRIGGER onestep_notify",
                    if *trigger { "ENABLE" } else { "DISABLE" }
                ))
                .await
                .context("switch the notify trigger")?;
            let server = if *listening {
                let server = Server::start(bin, "postgres", dsn, "listen", None, 0).await?;
                let deadline = Instant::now() + Duration::from_secs(30);
                while listeners(stats).await? == 0 {
                    ensure!(
                        Instant::now() < deadline,
                        "onestep serve did not register its listening session within 30 s"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Some(server)
            } else {
                ensure!(
                    listeners(stats).await? == 0,
                    "a listening session is registered while none should be"
                );
                None
            };
            for workers in [1usize, 2] {
                let rate = drain(bin, dsn, count, workers, &format!("drain{round}v{v}w")).await?;
                results[v].push((workers, rate));
            }
            drop(server);
        }
    }
    stats
        .batch_execute("ALTER TABLE onestep_executions ENABLE TRIGGER onestep_notify")
        .await?;
    println!(
        "{:<26} {:>22} {:>22}",
        "variant", "1 worker /s", "2 workers /s (sum)"
    );
    for (v, (name, _, _)) in VARIANTS.iter().enumerate() {
        let of = |w: usize| -> String {
            let rates: Vec<String> = results[v]
                .iter()
                .filter(|(k, _)| *k == w)
                .map(|(_, r)| format!("{r:.0}"))
                .collect();
            rates.join(" / ")
        };
        println!("{name:<26} {:>22} {:>22}", of(1), of(2));
    }
    Ok(())
}

/// Sessions registered in the listeners table (the trigger notifies while there is one).
async fn listeners(stats: &tokio_postgres::Client) -> Result<i64> {
    Ok(stats
        .query_one("SELECT count(*) FROM onestep_executions_listeners", &[])
        .await?
        .get(0))
}

/// `workers` processes of `ONESTEP_BIN bench -n count --dsn …` at once, each in a namespace
/// of its own: the sum of their completed executions per second.
async fn drain(bin: &str, dsn: &str, count: usize, workers: usize, tag: &str) -> Result<f64> {
    let mut children = Vec::new();
    for w in 0..workers {
        let child = tokio::process::Command::new(bin)
            .args(["bench", "-n", &count.to_string(), "--dsn", dsn])
            .args(["--namespace", &format!("{tag}{workers}-{w}")])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("spawn {bin} bench"))?;
        children.push(child);
    }
    let mut sum = 0.0;
    for child in children {
        let out = child.wait_with_output().await?;
        let text = String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.success(),
            "onestep bench failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rate = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("completed:"))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|r| r.parse::<f64>().ok())
            .with_context(|| format!("no completed/s in: {text}"))?;
        sum += rate;
    }
    Ok(sum)
}

fn env_number<T: std::str::FromStr>(name: &str, default: T) -> Result<T> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("{name}={v:?} is not a number")),
        _ => Ok(default),
    }
}

/// A running `onestep serve`, killed when dropped.
struct Server {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Server {
    /// `onestep serve` on a connector of `resource_type` (`postgres`, `mysql`) with
    /// `api.notify: notify` (and `api.poll_ms: poll_ms` when given), its connection cap raised
    /// for `waiters`.
    async fn start(
        bin: &str,
        resource_type: &str,
        dsn: &str,
        notify: &str,
        poll_ms: Option<u64>,
        waiters: usize,
    ) -> Result<Server> {
        let dir = tempfile::tempdir()?;
        let port = free_port()?;
        let config = dir.path().join("serve.yaml");
        std::fs::write(
            &config,
            format!(
                "apiVersion: onestep/v1alpha1\nkind: App\napp: {{name: waiters-bench}}\n\
                 resources:\n  db:\n    type: {resource_type}\n    dsn: \"${{ONESTEP_DSN}}\"\n    \
                 engine_options: {{max_connections: 8}}\n\
                 api:\n  listen: 127.0.0.1:{port}\n  connector: db\n  namespace: {NAMESPACE}\n  \
                 max_connections: {}\n  notify: {notify}\n{}",
                (waiters + 512).min(65_536),
                poll_ms.map_or(String::new(), |ms| format!("  poll_ms: {ms}\n"))
            ),
        )?;
        let child = Command::new(bin)
            .arg("serve")
            .arg(&config)
            .env("ONESTEP_DSN", dsn)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("spawn {bin} serve"))?;
        let server = Server {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            ensure!(
                Instant::now() < deadline,
                "onestep serve did not listen within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(server)
    }

    /// Resident set size in bytes (`/proc/PID/status`).
    fn rss(&self) -> Result<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .context("no VmRSS")?;
        Ok(kib * 1024)
    }
}

impl Drop for Server {
    /// SIGTERM (a listening session unregisters on the way out), SIGKILL after 10 s.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// Committed transactions of the database so far (flushed by each backend at least every
/// second while it is busy).
async fn commits(stats: &tokio_postgres::Client, datname: &str) -> Result<i64> {
    // A fresh snapshot of the cumulative statistics, not the one cached in this transaction.
    stats
        .batch_execute("SELECT pg_stat_clear_snapshot()")
        .await?;
    let row = stats
        .query_one(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = $1",
            &[&datname],
        )
        .await?;
    Ok(row.get(0))
}

/// One answer of a waiting caller: the execution, when the answer came, and its status.
struct Answer {
    id: Uuid,
    at: DateTime<Utc>,
    terminal: bool,
}

async fn wait_on(port: u16, id: Uuid) -> Result<Answer> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let request = http::Request::get(format!("/v1/executions/{id}?wait=60"))
        .header(http::header::HOST, format!("127.0.0.1:{port}"))
        .body(Empty::<bytes::Bytes>::new())?;
    let response = sender.send_request(request).await?;
    let at = Utc::now();
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    ensure!(
        status.is_success(),
        "{status}: {}",
        String::from_utf8_lossy(&body)
    );
    let view: Value = serde_json::from_slice(&body)?;
    let terminal = matches!(
        view["status"].as_str(),
        Some("succeeded" | "failed" | "cancelled" | "expired")
    );
    Ok(Answer { id, at, terminal })
}

async fn level(backend: &Backend, server: &Server, notify: &str, n: usize) -> Result<()> {
    let store = backend.store();
    let limits = Limits::default();
    let mut ids = Vec::with_capacity(EXECUTIONS);
    for chunk in 0..EXECUTIONS.div_ceil(1000) {
        let mut batch = Vec::new();
        for i in chunk * 1000..((chunk + 1) * 1000).min(EXECUTIONS) {
            let req = SubmitRequest {
                task_name: TASK.into(),
                payload: json!({"i": i}),
                ..SubmitRequest::default()
            };
            batch.push(prepare_submission(NAMESPACE, &req, &limits)?);
        }
        for e in store.submit_many(batch).await? {
            ids.push(e?.id);
        }
    }
    let rss_before = server.rss()?;
    // The callers, N / EXECUTIONS per execution.
    let connecting = Arc::new(Semaphore::new(CONNECTING));
    let arrived = Arc::new(AtomicUsize::new(0));
    let mut callers = tokio::task::JoinSet::new();
    for i in 0..n {
        let id = ids[i % ids.len()];
        let (port, connecting) = (server.port, Arc::clone(&connecting));
        let arrived = Arc::clone(&arrived);
        callers.spawn(async move {
            let permit = connecting.acquire_owned().await;
            let answer = wait_on(port, id);
            tokio::pin!(answer);
            // The permit covers the connect and the request's start only.
            tokio::select! {
                biased;
                a = &mut answer => {
                    arrived.fetch_add(1, Ordering::Relaxed);
                    a
                }
                () = tokio::time::sleep(Duration::from_millis(200)) => {
                    drop(permit);
                    arrived.fetch_add(1, Ordering::Relaxed);
                    answer.await
                }
            }
        });
    }
    // Wait until every caller has connected and the server's memory has settled.
    let deadline = Instant::now() + Duration::from_secs(300);
    while arrived.load(Ordering::Relaxed) < n {
        ensure!(
            Instant::now() < deadline,
            "callers did not connect within 300 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut last = server.rss()?;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = server.rss()?;
        if now.abs_diff(last) < 256 * 1024 {
            break;
        }
        last = now;
    }
    let rss_waiting = server.rss()?;
    let per_second = backend.idle_rate().await?;
    // Drain: claim and complete about 1,000 a second.
    let claim = ClaimRequest {
        namespaces: NamespaceScope::One(NAMESPACE.into()),
        fair: Default::default(),
        task_names: vec![TASK.into()],
        limit: 100,
        lease_duration_s: 30.0,
        worker_id: "waiters-bench".into(),
        max_running: None,
    };
    loop {
        let leases = store.claim(&claim).await?;
        if leases.is_empty() {
            break;
        }
        let items: Vec<_> = leases
            .iter()
            .map(|l| (l.lease_ref(), Completion::succeeded(json!(null))))
            .collect();
        for r in store.complete_many(&items).await? {
            r?;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut answers = Vec::with_capacity(n);
    while let Some(joined) = callers.join_next().await {
        answers.push(joined??);
    }
    let mut finished = std::collections::HashMap::with_capacity(ids.len());
    for id in &ids {
        let e = store.get(NAMESPACE, *id).await?.context("execution gone")?;
        finished.insert(*id, e.finished_at);
    }
    let mut lat_ms: Vec<f64> = Vec::with_capacity(answers.len());
    let mut not_terminal = 0usize;
    for a in &answers {
        if !a.terminal {
            not_terminal += 1;
            continue;
        }
        if let Some(Some(f)) = finished.get(&a.id) {
            lat_ms.push((a.at - f).num_microseconds().unwrap_or(0) as f64 / 1000.0);
        }
    }
    lat_ms.sort_by(f64::total_cmp);
    let q = |p: f64| -> String {
        if lat_ms.is_empty() {
            return "-".into();
        }
        let i = ((lat_ms.len() as f64 - 1.0) * p).round() as usize;
        format!("{:.0}", lat_ms[i.min(lat_ms.len() - 1)])
    };
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let per_waiter = if n == 0 {
        "-".to_owned()
    } else {
        format!(
            "{:.1}",
            (rss_waiting.saturating_sub(rss_before)) as f64 / 1024.0 / n as f64
        )
    };
    println!(
        "{:>7} {:>8} {:>9.1} {:>9.1} {:>11} {:>10.1} {:>8} {:>8} {:>8} {:>9}",
        notify,
        n,
        mib(rss_before),
        mib(rss_waiting),
        per_waiter,
        per_second,
        q(0.5),
        q(0.99),
        q(1.0),
        format!("{}/{}", answers.len() - not_terminal, n)
    );
    Ok(())
}
