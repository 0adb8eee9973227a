//! End-to-end tests (one binary): the real `onestep` binary, real components, real databases.
//!
//! * [`bench`]: `onestep bench --history` seeds finished history and reports I/O per phase.
//! * [`bench_rounds`]: `onestep bench --rounds` with a purge after each round, v4 ids,
//!   random and ordered idempotency keys, and reference tables before and after
//!   `migrate --upgrade` in one run.
//! * [`check`]: `onestep check [--strict]` on the shipped configs and on bad files (exit codes
//!   and exact messages, one case per rule group of docs/configuration.md#strict-validation).
//! * [`check_vs_run`]: every file `onestep run` rejects at load time, `check --strict` rejects
//!   too (and `check` with the same message).
//! * [`copy`]: `onestep copy` between MariaDB, MySQL and PostgreSQL, every column compared;
//!   the live-lease and same-store refusals, the re-run, the round trip.
//! * [`upgrade`]: reference-created tables: one warning from `onestep run` and
//!   `schema=needs-upgrade` from `check --connect`, then `onestep migrate --upgrade` adds the
//!   column and indexes online (MySQL family) or builds our indexes concurrently (PostgreSQL).
//! * [`smoke`]: the deployment smoke checks (lifecycle, idempotency, cancellation, restart, paging).
//! * [`lease`]: SIGKILL (lease expiry and reclaim) and SIGTERM (drain).
//! * [`max_running`]: a task's `max_running` and a source's `max_running_per_key` hold in
//!   every 50 ms sample across three workers while workers are SIGKILLed and replaced.
//! * [`api_connections`]: 500 slow connections, an idle keep-alive one and a stalled body
//!   against `onestep serve`: closed within the timeouts, RSS under a ceiling, requests answered.
//! * [`api_flow`]: the curl flow of docs/http-api.md#the-curl-flow against `onestep serve` + `onestep run`.
//! * [`api_storable`]: dates outside years 1000–9999, leap seconds, NUL and JSON deeper than 31
//!   through `onestep serve`: the same 422 on every server, the bounds accepted, no panic.
//! * [`isolation_results`]: huge guest results next to a victim task: refused before they are
//!   parsed, not retried, worker RSS and log bounded.
//! * [`isolation_pool`]: a task whose component holds 52 tables per attempt cannot starve a
//!   neighbour task of instance-pool slots; a component over its task's limits is refused at load.
//! * [`isolation_fd`]: a guest opening files without closing them gets its cap and an error
//!   value, while a victim task in the same worker succeeds every time.
//! * [`isolation_http`]: a guest looping requests to its allowed origin spelled many ways
//!   (userinfo, zero-padded port) under a 256-descriptor limit: the worker's descriptors stay
//!   bounded and neighbour tasks (a preopen, their own requests) keep succeeding.
//! * [`isolation_logs`]: log floods through every channel, forged log lines and one-byte
//!   writes next to a victim task: the worker's log stays within the per-attempt budgets and the
//!   task's rate, no guest starts a line, victims succeed.
//! * [`isolation_cancel`]: cancel latency at the default settings is bounded by the cancel
//!   poll, not the heartbeat (busy guests cancelled beside a victim task in the same worker).
//! * [`http_fetch`]: the `fetch` guest (world `0.2.0`, outbound HTTP) against a loopback server
//!   through a real worker: an allowed request, a denied origin decided by the handler, an
//!   injected header that never reaches the log, a cancel during a slow request.
//! * [`agent`]: the `agent` guest asks a loopback chat-completions server through a real
//!   worker, the key injected by `sandbox.network.headers` from the worker's environment: the
//!   answer, a metadata override of the model, a 500 retried then failed, no key in the log;
//!   a tool-loop conversation whose worker is SIGKILLed at turn 2 resumes on another worker
//!   without asking the model again for the recorded turns (durable steps).
//! * [`outbound_rate_limit`]: three workers share an origin's `sandbox.network.rate_limits`
//!   bucket: the accepted rate stays within 5 % of the limit over the window against a loopback
//!   server answering 429 past it, a 429 with `Retry-After` pauses every worker, waiting guests
//!   are cancellable and their attempts' diagnostics show the wait.
//! * [`metrics`]: the worker's `/metrics` after a known mix of executions (exact counter values,
//!   parsed as Prometheus text), `/healthz` ok while running and degraded while draining.
//! * [`health_db`]: `/healthz` 200, then 503 while a private MariaDB instance is stopped, then
//!   200 again once it is back on the same data directory and port.
//! * [`traces`]: OpenTelemetry traces to an OTLP/HTTP receiver on loopback: the submit span
//!   (child of the request's traceparent) and every attempt's `process <task>` span in one
//!   trace, linked, with `invoke` and `complete` children; replays and answers stay clean.
//! * [`params`]: `handler.params` in the context of 0.2.0 guests (Rust, Python, JavaScript)
//!   through `task run` and a worker; the JavaScript guests' errors, progress and cancel.
//! * [`task_run`]: `onestep task run` (one attempt, no database: outcomes, exit codes, bad input)
//!   and `onestep replay` (a recorded execution run locally, nothing written).
//! * [`diagnostics`]: per-attempt messages, log lines, progress and component digests through
//!   `onestep attempts` / `logs` / `get`, and `onestep purge`.
//! * [`reload`]: a component redeployed under load (a broken build refused, a working one
//!   swapped in); no execution lost, attempts record the digest of the build they ran.
//! * [`quarantine`]: a task whose component cannot load (or is missing) is quarantined, the
//!   worker serves the others, `/readyz` and a metric say why, a good build lifts it.
//! * [`notify`]: PostgreSQL `LISTEN`/`NOTIFY` between two `onestep serve` (poll slowed to 5 s): a
//!   completion by another connection answers a caller on the other instance within a second;
//!   with the listening sessions killed the fallback poll answers, and the sessions come back.
//! * [`postgres`]: `onestep migrate`, the client commands and a real worker with real components
//!   on PostgreSQL; a connector of the wrong kind is a load error.
//! * [`render`]: `onestep render` of a config, as text and as a Mermaid flowchart.
//! * [`sqlite`]: three workers on one SQLite file drain 200 executions while one is killed
//!   with SIGKILL: none lost, attempts consistent, no completion by a fenced-out lease.
//! * [`submit_batch`]: `onestep submit --batch FILE.jsonl` on every server and an SQLite file:
//!   per-line answers for a mixed file (new, replay, duplicate, conflict, invalid), a malformed
//!   file refused whole, 1,001 lines from stdin in two chunks.
//! * [`scaffold`]: `onestep new handler` in Rust, Python and JavaScript: each project builds
//!   outside the repository and passes `check --strict` and `task run`; the Rust `agent`
//!   template against a loopback fake endpoint with the host-injected key; bad input.
//! * [`schemathesis`]: schemathesis against `onestep serve`'s `/openapi.json` with generated
//!   valid and invalid input, with a token and without: no 5xx, no panic, the server stays up.
//! * [`dev`]: `onestep dev`: API, dashboard and workers in one process on a `--dsn` database
//!   (tables created, token printed and kept, 401 without it, a rebuilt component reloaded,
//!   SIGTERM exits 0).
//! * [`stream`]: `onestep watch --json` against `onestep serve` with one-second streams and a
//!   real worker: every attempt start and end, log line and progress report once across the
//!   resumed streams, exit 0 / 1 (MariaDB, MySQL, PostgreSQL and SQLite).
//! * [`api_instances`]: two `onestep serve` processes on one database: a wait on one answers
//!   within the documented bound of a cancel through the other, and a stream of several
//!   executions resumes across them without loss or repetition (MariaDB, MySQL, PostgreSQL);
//!   then a real worker completes executions waited on through the other instance, within the
//!   bound, and [`wait_cli`] runs `onestep wait --api` (success, failure, timeout, unknown id,
//!   unreachable API) and `onestep wait` on the database against them.
//! * [`watch`]: `onestep task run --watch` runs a new build of the component again.
//! * [`ui_browser`]: the dashboard in a real headless Chromium over WebDriver: log in, list,
//!   filter, detail, cancel, retry, bulk cancel, a read token without actions, page loads on
//!   100k rows.
//! * [`webhooks`]: completion webhooks against loopback receivers on every server and SQLite:
//!   retries then one acknowledged delivery, `dead` past the retry window, signatures checked by
//!   the Standard Webhooks reference implementation, refusals at submit, `kill -9` mid-delivery.
//! * [`runtime`]: retries with backoff, fatal errors, timeouts of spinning guests while
//!   heartbeats go on, CPU-bound guests without lease loss.
//! * [`steps`]: a worker SIGKILLed mid-execution resumes from the recorded steps; a stale
//!   (SIGSTOPped) attempt never writes a step after the takeover.
//! * [`steps_chaos`]: 100 steps, each POSTing its key to a loopback recorder, under three workers
//!   of which eight random ones are SIGKILLed at random moments (and replaced): every key
//!   recorded, re-runs at most one per kill and per interrupted attempt, the steps table, the
//!   output and the recorder agree on which attempt did each step.
//! * [`sleep`]: the `steps` guest sleeps: its attempt parks and frees the task's only slot for
//!   another execution, resumes at the wake time with its steps; a cancel during the sleep ends
//!   it at once; `max_duration_s` fails it with `MaxDurationExceeded`.
//!
//! Every worker case runs against MariaDB, MySQL and PostgreSQL (`onestep_e2e::on_each_server`),
//! each in a database of its own, with `config/e2e/worker.yaml` (2 s leases, 0.5 s heartbeats);
//! the few that need a feature PostgreSQL lacks run on the MySQL family only
//! (docs/test-databases.md#postgresql-in-the-e2e-suite).
// Test code: a helper that cannot set up its fixture panics, like an assertion (clippy.toml
// allows this inside #[test] functions; these helpers live outside them).
#![allow(clippy::expect_used, clippy::panic)]

mod agent;
mod api_connections;
mod api_flow;
mod api_instances;
mod api_storable;
mod bench;
mod bench_rounds;
mod check;
mod check_vs_run;
mod copy;
mod deploy_cli;
mod deployed;
mod dev;
mod diagnostics;
mod fair_starvation;
mod health_db;
mod http_fetch;
mod isolation_cancel;
mod isolation_fd;
mod isolation_http;
mod isolation_http_resources;
mod isolation_logs;
mod isolation_pool;
mod isolation_results;
mod lease;
mod max_running;
mod metrics;
mod notify;
mod outbound_rate_limit;
mod params;
mod postgres;
mod procfs;
mod quarantine;
mod rate_limit;
mod reload;
mod render;
mod runtime;
mod scaffold;
mod schemathesis;
mod sleep;
mod smoke;
mod sqlite;
mod steps;
mod steps_chaos;
mod stream;
mod submit_batch;
mod task_run;
mod traces;
mod ui_browser;
mod upgrade;
mod wait_cli;
mod watch;
mod webhooks;
