//! Costs that must not grow with history, on PostgreSQL (docs/postgres.md, issue 15): the twin
//! of `host/mysql/tests/scale.rs` `every_statement_*`, running the same scripted workload
//! (`onestep_testkit::backend_cases::scale::script`).
//!
//! * History: `ONESTEP_SCALE_ROWS` finished executions (default 100,000) seeded by the backend's
//!   own seeder (`PgBackend::seed_history`, with idempotency keys) in the namespace and task the
//!   live work uses, a tenth as many in a second namespace sorting after it, and one diagnostics
//!   row, one traceparent, one durable step and one delivered webhook (callback and delivery)
//!   per seeded attempt/execution (written here); then `ANALYZE`.
//! * Capture: `auto_explain` (`ALTER DATABASE … SET session_preload_libraries = 'auto_explain'`,
//!   `log_min_duration = 0`, `log_analyze = on`, JSON) logs the plan of every statement the
//!   backend executes in the test database, with the actual rows of each node, to the server
//!   log; the test reads the log from the server's stderr (found through `/proc/<backend
//!   pid>/fd/2`, so the server must run on this machine; `ONESTEP_SCALE_PG_LOG` names the file
//!   otherwise). `pg_stat_statements` needs `shared_preload_libraries` (a restart), so it is
//!   not used. The database settings are reset afterwards, also when the script fails.
//! * Check: for each statement shape (placeholders and lists collapsed), every executed plan:
//!   no sequential scan of our tables, and the rows each scan node of our tables read (returned
//!   plus removed by filter or recheck, × loops) at most `4 × result + 100`, the result being the
//!   rows the statement returned or changed, or its `LIMIT`. Index scans of the list index that
//!   walk past rows a filter rejects (no sort) are reported as **walk** and fail only with
//!   `ONESTEP_SCALE_STRICT=1`. `ONESTEP_SCALE_PG_PLANS=generic` checks the generic plans
//!   (`plan_cache_mode = force_generic_plan`), the plans cached statements may end up with;
//!   the list pages and purge batches, which the backend sends one-shot (always planned for
//!   their values), are then reported but not judged.
//!
//! Not in the default run (it reads the server's log): run it by hand,
//!
//! ```text
//! ONESTEP_SCALE_ROWS=10000000 cargo test -p onestep-postgres --test scale -- --ignored --nocapture
//! ```
// Test code: a helper that cannot set up its fixture panics, like an assertion.
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use onestep_core::names::TableNames;
use onestep_postgres::schema::{diagnostics_table, q, steps_table, traces_table};
use onestep_postgres::{PgBackend, StoreOptions};
use onestep_testkit::ManualClock;
use onestep_testkit::backend_cases::scale::{
    BEFORE_THE_SCRIPT, NS, Names, OTHER_NS, PER_RESULT, RARE, RARE_ROWS, SLACK, StepMarker,
    history_seeds, scale_rows, script, strict,
};
use onestep_testkit::backend_cases::shapes::{Dialect, collapse_repeats, ordering, shape_literals};
use serde_json::Value;

/// A connection to the test database that marks the script's steps: `auto_explain` logs the
/// marker like any statement.
struct Marker {
    client: deadpool_postgres::Object,
    names: Names,
}

#[async_trait]
impl StepMarker for Marker {
    async fn step(&mut self, step: &str) {
        let sql = self.names.marker_sql(step);
        self.client.simple_query(&sql).await.expect("marker");
    }
}

/// The server's log file: `ONESTEP_SCALE_PG_LOG`, else the stderr of this session's server
/// process (a local server logging to a file, as the Debian service does).
async fn log_path(c: &tokio_postgres::Client) -> String {
    if let Ok(p) = std::env::var("ONESTEP_SCALE_PG_LOG")
        && !p.trim().is_empty()
    {
        return p;
    }
    let pid: i32 = c
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("pid")
        .get(0);
    let link = std::fs::read_link(format!("/proc/{pid}/fd/2")).unwrap_or_else(|e| {
        panic!(
            "cannot find the server log through /proc/{pid}/fd/2 ({e}): run the test on the \
             server's machine, or set ONESTEP_SCALE_PG_LOG to the file its stderr goes to"
        )
    });
    let path = link.to_string_lossy().into_owned();
    assert!(
        path.starts_with('/') && std::fs::metadata(&path).is_ok_and(|m| m.is_file()),
        "the server's stderr is {path:?}, not a readable file: set ONESTEP_SCALE_PG_LOG"
    );
    path
}

/// One logged plan and the step that ran it.
struct Logged {
    step: String,
    text: String,
    plan: Value,
}

/// Splits the log written after `offset` into `auto_explain` entries of database `db`.
fn read_plans(path: &str, offset: u64, db: &str, names: &Names) -> Vec<Logged> {
    let bytes = std::fs::read(path).expect("server log");
    let text = String::from_utf8_lossy(&bytes[usize::try_from(offset).unwrap_or(0)..]);
    let header = format!("@{db} LOG:  duration: ");
    let mut entries: Vec<String> = Vec::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if line.starts_with('\t') {
            if let Some(c) = current.as_mut() {
                c.push_str(line);
                c.push('\n');
            }
            continue;
        }
        if let Some(c) = current.take() {
            entries.push(c);
        }
        if line.contains(&header) && line.ends_with("plan:") {
            current = Some(String::new());
        }
    }
    entries.extend(current);
    let mut step = String::from(BEFORE_THE_SCRIPT);
    let mut out = Vec::new();
    for e in entries {
        let Ok(v) = serde_json::from_str::<Value>(&e) else {
            continue;
        };
        let q = v["Query Text"].as_str().unwrap_or_default().to_owned();
        if let Some(marked) = names.marked_step(&q) {
            step = marked;
            continue;
        }
        if !q.contains(&names.prefix) {
            continue;
        }
        out.push(Logged {
            step: step.clone(),
            text: q,
            plan: v["Plan"].clone(),
        });
    }
    out
}

/// The shape of a statement: `$n` placeholders and literals as `?`, lists collapsed,
/// whitespace collapsed.
fn normalize(sql: &str) -> String {
    let s = shape_literals(sql, &POSTGRES)
        .replace(" ,", ",")
        .replace(", ", ",");
    collapse_repeats(s, &[("?,?", "?"), ("(?),(?)", "(?)")])
}

/// PostgreSQL's spelling of literals, identifiers and placeholders.
const POSTGRES: Dialect = Dialect {
    ident_quote: '"',
    backslash_escapes: false,
    number_chars: ".",
    dollar_params: true,
};

/// A short label: the first words up to the first table, the table(s), the WHERE text cut short.
fn label(shape: &str, names: &Names) -> String {
    let s = names.short(shape);
    let s = s.replace('"', "");
    let words: Vec<&str> = s.split(' ').collect();
    let verb = if s.starts_with("WITH") {
        "WITH"
    } else {
        words.first().copied().unwrap_or_default()
    };
    let mut tables: Vec<String> = Vec::new();
    for (i, w) in words.iter().enumerate() {
        if ["FROM", "UPDATE", "INTO", "JOIN"].contains(w)
            && let Some(n) = words.get(i + 1)
            && (n.starts_with("<T>") || n.starts_with("<A>"))
        {
            let n = n.trim_end_matches(|c: char| !c.is_ascii_alphanumeric() && c != '>');
            if !tables.iter().any(|t| t == n) {
                tables.push(n.to_owned());
            }
        }
    }
    let mut cols: Vec<String> = Vec::new();
    if let Some(i) = s.find(" WHERE ") {
        let rest = &s[i + 7..];
        let toks: Vec<&str> = rest
            .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
            .filter(|t| !t.is_empty())
            .collect();
        for w in toks.windows(2) {
            let op = [
                "=", "<", ">", "<=", ">=", "IN", "IS", "LIKE", "ILIKE", "->>",
            ]
            .contains(&w[1].to_uppercase().as_str());
            let c = w[0].rsplit('.').next().unwrap_or(w[0]);
            let ident = c.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && c.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                && !["AND", "OR", "NOT", "NULL", "ANY"].contains(&c.to_uppercase().as_str());
            if op && ident && !cols.iter().any(|x| x == c) {
                cols.push(c.to_owned());
            }
        }
    }
    let mut out = format!("{verb} {}", tables.join(" ⋈ "));
    if !cols.is_empty() {
        out.push_str(&format!(" WHERE {}", cols.join(", ")));
    }
    if let Some(i) = s.rfind("ORDER BY ") {
        out.push_str(&format!(" ORDER BY {}", ordering(&s, i)));
    }
    if s.contains(" LIMIT ") {
        out.push_str(" LIMIT");
    }
    if s.contains("SKIP LOCKED") {
        out.push_str(" FOR UPDATE SKIP LOCKED");
    } else if s.contains("FOR UPDATE") {
        out.push_str(" FOR UPDATE");
    }
    out
}

/// What one executed plan read from our tables.
#[derive(Default)]
struct Cost {
    /// `Node Type` and index of each scan of our tables.
    scans: Vec<(String, String, String)>,
    /// Rows the scans of our tables produced or removed (× loops).
    read: u64,
    /// Rows the statement returned or changed (top node), or the largest LIMIT estimate.
    result: u64,
    sorted: bool,
}

fn num(v: &Value, key: &str) -> u64 {
    v[key].as_f64().map_or(0, |x| x.max(0.0) as u64)
}

fn walk_plan(node: &Value, names: &Names, cost: &mut Cost) {
    let kind = node["Node Type"].as_str().unwrap_or_default();
    if kind == "Sort" || kind == "Incremental Sort" {
        cost.sorted = true;
    }
    if kind == "Limit" {
        cost.result = cost.result.max(num(node, "Plan Rows"));
    }
    let relation = node["Relation Name"].as_str().unwrap_or_default();
    let index = node["Index Name"].as_str().unwrap_or_default();
    let ours = relation.starts_with(&names.prefix) || index.contains(&names.prefix);
    if ours && kind != "ModifyTable" && kind != "LockRows" {
        let loops = num(node, "Actual Loops").max(1);
        let rows = num(node, "Actual Rows")
            + num(node, "Rows Removed by Filter")
            + num(node, "Rows Removed by Index Recheck");
        cost.read += rows * loops;
        cost.scans.push((
            kind.to_owned(),
            names.short(if index.is_empty() { relation } else { index }),
            format!("{}", num(node, "Plan Rows")),
        ));
    }
    if let Some(children) = node["Plans"].as_array() {
        for c in children {
            walk_plan(c, names, cost);
        }
    }
}

fn cost_of(plan: &Value, names: &Names) -> Cost {
    let mut cost = Cost::default();
    walk_plan(plan, names, &mut cost);
    let top = num(plan, "Actual Rows");
    // A write returns nothing unless RETURNING: what it changed is its input's rows.
    let input = plan["Plans"]
        .as_array()
        .and_then(|c| c.first())
        .map_or(0, |c| num(c, "Actual Rows"));
    cost.result = cost.result.max(top).max(input).max(1);
    cost
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Verdict {
    Ok,
    Walk,
    Fail,
}

/// A statement's verdict: a sequential scan of our tables fails; otherwise what its scans read
/// against the bound, a read past the bound through the list index in its order being a walk.
fn judge(cost: &Cost, list_index: &str) -> (Verdict, u64, String) {
    let bound = PER_RESULT * cost.result + SLACK;
    let seq = cost.scans.iter().any(|(k, _, _)| k == "Seq Scan");
    if seq {
        return (Verdict::Fail, bound, "sequential scan".into());
    }
    if cost.read <= bound {
        return (Verdict::Ok, bound, String::new());
    }
    let walk = !cost.sorted && cost.scans.iter().any(|(_, i, _)| i == list_index);
    let why = format!(
        "reads {} rows for a result of at most {}",
        cost.read, cost.result
    );
    if walk {
        (Verdict::Walk, bound, why)
    } else {
        (Verdict::Fail, bound, why)
    }
}

/// Matches that are few and old, the case where a filter no index holds walks the whole
/// history: three history rows a thousand rows from the oldest end (purge's cutoffs in the
/// script stay below them) become `failed`, three more two thousand rows in move to [`RARE`].
/// Nothing newer is failed except two live rows, and no live row has the rare task, so the
/// second page of a status-filtered list, a task+status-filtered one and the first page of the
/// rare task all have to reach them.
async fn rare_history(c: &tokio_postgres::Client, tables: &TableNames) {
    let t = q(&tables.executions);
    let failed = r#"{"kind":"error","exception_type":"OldError","stage":null}"#;
    for (offset, set) in [
        (
            1_000,
            format!("status = 'failed', error = '{failed}'::jsonb"),
        ),
        (2_000, format!("task_name = '{RARE}'")),
    ] {
        let n = c
            .execute(
                &format!(
                    "UPDATE {t} SET {set} WHERE id IN (SELECT id FROM {t} WHERE namespace = '{NS}' \
                     ORDER BY created_at, id LIMIT {RARE_ROWS} OFFSET {offset})"
                ),
                &[],
            )
            .await
            .expect("rare history rows");
        assert_eq!(n, RARE_ROWS);
    }
}

/// Extra rows in the diagnostics and trace tables, one per seeded attempt/execution, one
/// recorded durable step per execution (docs/steps.md) and one delivered completion webhook
/// (callback and delivery attempt) per execution, so that the step saves, loads and lists and
/// the purge's counts and deletes of steps, callbacks and deliveries are planned over full
/// tables (on empty ones PostgreSQL plans a sequential scan).
async fn seed_side_tables(c: &tokio_postgres::Client, tables: &TableNames) {
    c.batch_execute(&format!(
        "INSERT INTO {d} (attempt_id, execution_id, is_final, message, progress_done, \
         progress_total, progress_note, progress_at, log_lines, log_tail, updated_at) \
         SELECT id, execution_id, true, 'seeded', 1, 1, '', finished_at, 1, \
         '[{{\"seq\":1,\"at\":\"2026-01-01T00:00:00Z\",\"level\":\"info\",\"message\":\"seeded\"}}]', \
         finished_at FROM {a}; \
         INSERT INTO {tr} (execution_id, traceparent, created_at) \
         SELECT id, '00-' || replace(id::text, '-', '') || '-' || \
         substr(replace(id::text, '-', ''), 1, 16) || '-01', created_at FROM {t}; \
         INSERT INTO {st} (execution_id, step_key, seq, value, bytes, attempt_id, attempt_no, \
         saved_at) SELECT id, 'seeded', 1, '{{}}', 2, id, 1, created_at FROM {t}; \
         INSERT INTO {cb} (execution_id, namespace, url, events, state, attempts, round_start, \
         next_at, last_status, created_at, updated_at) SELECT id, namespace, \
         'https://hooks.example.com/x', 'terminal', 'delivered', 1, 0, created_at, 204, \
         created_at, created_at FROM {t}; \
         INSERT INTO {dl} (execution_id, attempt_no, event, webhook_id, status, at) \
         SELECT id, 1, 'terminal', 'msg_' || replace(id::text, '-', ''), 204, created_at FROM {t}; \
         ANALYZE {t}; ANALYZE {a}; ANALYZE {d}; ANALYZE {tr}; ANALYZE {st}; ANALYZE {cb}; \
         ANALYZE {dl};",
        d = q(&diagnostics_table(tables)),
        tr = q(&traces_table(tables)),
        st = q(&steps_table(tables)),
        cb = q(&onestep_postgres::schema::callbacks_table(tables)),
        dl = q(&onestep_postgres::schema::deliveries_table(tables)),
        a = q(&tables.attempts),
        t = q(&tables.executions),
    ))
    .await
    .expect("side tables");
}

async fn admin() -> tokio_postgres::Client {
    let url = common::admin_url();
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("admin connection");
    tokio::spawn(conn);
    client
}

async fn open(dsn: &str, clock: &Arc<ManualClock>, names: &Names) -> PgBackend {
    let mut o = StoreOptions::new(dsn);
    o.clock = clock.clone();
    o.tables = names.tables();
    o.traces = true;
    o.pool_max = 8;
    PgBackend::open(o).await.expect("open backend")
}

/// `ONESTEP_SCALE_PG_PLANS=generic`: every prepared statement runs its generic plan (the
/// plan PostgreSQL may switch to after five executions of a cached statement, made for any
/// parameter values), so the check covers the plans a long-lived connection ends up with;
/// otherwise PostgreSQL's default (`auto`), which plans the first executions for their values.
fn plan_cache_mode() -> &'static str {
    if generic_plans() {
        "plan_cache_mode = force_generic_plan"
    } else {
        "plan_cache_mode = auto"
    }
}

fn generic_plans() -> bool {
    std::env::var("ONESTEP_SCALE_PG_PLANS").is_ok_and(|v| v == "generic")
}

/// A statement the backend sends as a statement of its own each time rather than from the
/// connection's statement cache, so PostgreSQL plans it for its values (a custom plan) and
/// never switches it to the generic plan: the list pages and the purge batches. The task-name
/// probe of a key search (`WITH RECURSIVE`) is cached.
fn one_shot(shape: &str, steps: &[String]) -> bool {
    !shape.starts_with("WITH")
        && steps
            .iter()
            .all(|s| s.starts_with("list") || s.starts_with("purge"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "reads the server's log (auto_explain): run by hand, see the module docs"]
async fn every_statement_postgres() {
    let rows = scale_rows();
    let db = common::scratch().await;
    let admin = admin().await;
    let version: String = admin
        .query_one("SELECT version()", &[])
        .await
        .expect("version")
        .get(0);
    let clock = Arc::new(ManualClock::default());
    let names = Names::new();
    let tables = names.tables();
    let before = clock.now_value();
    let seeded = std::time::Instant::now();
    {
        let b = open(db.dsn(), &clock, &names).await;
        let f = b.schema_report().features;
        assert!(
            f.expiry_index && f.list_indexes && f.diagnostics_table && f.traces_table,
            "{f:?}"
        );
        for seed in history_seeds(rows, before) {
            assert_eq!(b.seed_history(&seed).await.expect("seed"), seed.count);
        }
        let c = b.test_pool().get().await.expect("conn");
        rare_history(&c, &tables).await;
        seed_side_tables(&c, &tables).await;
        drop(c);
        b.close().await.expect("close");
    }
    let seed_s = seeded.elapsed().as_secs_f64();
    eprintln!("[postgres] {version}: seeded {rows} (+ a tenth) rows in {seed_s:.1} s");

    // auto_explain for the sessions opened from now on in the test database.
    let dbq = q(db.name());
    for setting in [
        "session_preload_libraries = 'auto_explain'",
        "auto_explain.log_min_duration = 0",
        "auto_explain.log_analyze = on",
        "auto_explain.log_timing = off",
        "auto_explain.log_format = 'json'",
        plan_cache_mode(),
    ] {
        admin
            .batch_execute(&format!("ALTER DATABASE {dbq} SET {setting}"))
            .await
            .expect("alter database");
    }
    let path = log_path(&admin).await;
    let offset = std::fs::metadata(&path).expect("log").len();
    let history_first = before - chrono::Duration::milliseconds(rows as i64);
    let scripted = std::time::Instant::now();
    let b = open(db.dsn(), &clock, &names).await;
    let marker = Marker {
        client: b.test_pool().get().await.expect("marker conn"),
        names: names.clone(),
    };
    let run = tokio::spawn(script(b.clone(), clock.clone(), marker, history_first)).await;
    let _ = b.close().await;
    let reset = admin
        .batch_execute(&format!("ALTER DATABASE {dbq} RESET ALL"))
        .await;
    if let Err(e) = run {
        match e.try_into_panic() {
            Ok(p) => std::panic::resume_unwind(p),
            Err(e) => panic!("script: {e}"),
        }
    }
    reset.expect("reset");
    let script_s = scripted.elapsed().as_secs_f64();
    let logged = read_plans(&path, offset, db.name(), &names);

    let list_index = "ix_<T>_list".to_owned();
    // (shape, label, steps, each run's step and cost)
    type Runs = Vec<(String, Cost)>;
    let mut shapes: Vec<(String, String, Vec<String>, Runs)> = Vec::new();
    for l in logged {
        let shape = normalize(&l.text);
        let cost = cost_of(&l.plan, &names);
        let i = match shapes.iter().position(|(s, ..)| *s == shape) {
            Some(i) => i,
            None => {
                shapes.push((shape.clone(), label(&shape, &names), Vec::new(), Vec::new()));
                shapes.len() - 1
            }
        };
        let entry = &mut shapes[i];
        if !entry.2.contains(&l.step) {
            entry.2.push(l.step.clone());
        }
        entry.3.push((l.step, cost));
    }
    assert!(
        shapes.len() >= 25,
        "only {} statement shapes in the log: does auto_explain log to {path}?",
        shapes.len()
    );
    let mut table = format!(
        "\n[postgres] {version}: {rows} finished executions in `{NS}` + {} in `{OTHER_NS}`, with \
         their attempts, diagnostics and traceparents (seeded in {seed_s:.0} s); script \
         {script_s:.1} s, {} shapes\n\n\
         | statement | sent by | scans (node, index, est. rows) | rows read | verdict |\n\
         |---|---|---|---|---|\n",
        (rows / 10).max(1_000),
        shapes.len()
    );
    let mut failures = Vec::new();
    let mut walks = Vec::new();
    let mut details = String::new();
    let mut seen_labels: Vec<String> = Vec::new();
    for (shape, label, steps, runs) in &shapes {
        let n = seen_labels.iter().filter(|l| *l == label).count();
        seen_labels.push(label.clone());
        let label = if n > 0 {
            format!("{label} #{}", n + 1)
        } else {
            label.clone()
        };
        let mut worst: Option<(&String, &Cost, (Verdict, u64, String))> = None;
        for (step, cost) in runs {
            let j = judge(cost, &list_index);
            if worst
                .as_ref()
                .is_none_or(|(_, wc, wj)| (j.0, cost.read) > (wj.0, wc.read))
            {
                worst = Some((step, cost, j));
            }
        }
        let Some((step, cost, (verdict, bound, why))) = worst else {
            continue;
        };
        let sent = if steps.len() > 3 {
            format!("{}; +{} more", steps[..3].join("; "), steps.len() - 3)
        } else {
            steps.join("; ")
        };
        let scans = if cost.scans.is_empty() {
            "— (no table read)".to_owned()
        } else {
            cost.scans
                .iter()
                .map(|(k, i, e)| format!("{k} {i} ({e})"))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        // The generic plan of a statement the backend never caches is not a plan it runs.
        let exempt = generic_plans() && verdict != Verdict::Ok && one_shot(shape, steps);
        let v = match verdict {
            Verdict::Ok => format!("ok (≤ {bound})"),
            _ if exempt => format!("generic plan > {bound}; sent one-shot (custom plans)"),
            Verdict::Walk => format!("**walk** (> {bound})"),
            Verdict::Fail => format!("**FAIL** (> {bound})"),
        };
        table.push_str(&format!(
            "| `{label}` | {sent} | {scans} | {} | {v} |\n",
            cost.read
        ));
        if verdict != Verdict::Ok && !exempt {
            let entry = format!("{label} ({step}): {why}");
            details.push_str(&format!("\n{entry}\n  {}\n", names.short(shape)));
            if verdict == Verdict::Walk {
                walks.push(entry);
            } else {
                failures.push(entry);
            }
        }
    }
    eprintln!("{table}{details}");
    if std::env::var("ONESTEP_SCALE_KEEP").is_ok_and(|v| v == "1") {
        eprintln!("ONESTEP_SCALE_KEEP=1: database {} kept", db.name());
    } else {
        db.drop_database().await.expect("drop database");
    }
    if strict() {
        failures.append(&mut walks);
    }
    assert!(
        failures.is_empty(),
        "[postgres] statements whose cost grows with the history:\n{}",
        failures.join("\n")
    );
}
