//! Costs that must not grow with history (docs/schema.md#evidence).
//!
//! `history_does_not_cost_*`: with 100,000 finished executions (and their attempts) in the table
//! pair, every maintenance read, the claim read, the fair claim's reads
//! (`MySqlBackend::fair_claim_read_statements`) and the running count of a task's `max_running`
//! (`MySqlBackend::cap_statements`) are served by an index range that excludes the
//! finished rows. Checked with EXPLAIN (no full scan, an index is used) and with the session
//! `Handler_read_*` counters of the statement (bounded rows examined).
//!
//! `every_statement_*` (issue 15): every statement the backend actually sends.
//!
//! * History: `ONESTEP_SCALE_ROWS` finished executions (default 100,000, what `cargo test` runs)
//!   seeded by the backend's own seeder (`MySqlBackend::seed_history`, the knob of `onestep
//!   bench --history`, with idempotency keys) in the namespace and task the live work uses, a
//!   tenth as many in a second namespace that sorts after it, and one diagnostics row and one
//!   traceparent per seeded attempt/execution (written here: the seeder writes the pair only);
//!   then `ANALYZE TABLE`. Table names are unique to the run.
//! * Capture: a scripted sequence of real calls through the ports (submit with and without key,
//!   replay, conflict, `submit_many`, claims running each maintenance step, heartbeats, cancel
//!   poll, durable step saves, loads and lists, completions, a retry, release, cancels, get,
//!   list pages with and without filters, attempts, logs, live and final diagnostics, purge
//!   (with steps); `onestep_testkit::backend_cases::scale`,
//!   shared with PostgreSQL's `every_statement_postgres`) runs with the server's general log on
//!   (`log_output = 'TABLE'`, turned off again before anything is asserted). The statements
//!   naming the run's tables are read back and grouped by shape (literals, lists, `CASE` arms
//!   and repeated `OR` groups collapsed).
//! * Check: each SELECT/UPDATE/DELETE is EXPLAINed and re-run in a rolled-back transaction
//!   between `FLUSH STATUS` and `SHOW SESSION STATUS LIKE 'Handler_read%'`. It fails on a full
//!   table scan (`type = ALL`) or full index scan of our tables, a table read without an index,
//!   an estimate above the bound that is then sorted, or a measured read above the bound
//!   `4 × result + 100` rows (the result: the statement's `LIMIT`, its longest `IN` list or the
//!   rows it returned or changed; 100 covers the test's own ~30 live rows). Reads that walk the
//!   list index in its order past rows they reject (a filter the index does not hold, or MySQL's
//!   whole-index plan for the purge) are reported as **walk** and fail only with
//!   `ONESTEP_SCALE_STRICT=1`. A search-window statement (metadata or exception-type list,
//!   docs/semantics.md#search-window) has its window as result: its index reads are bounded
//!   like any other, and its temporary-table reads (`Handler_read_rnd*`: the window functions'
//!   passes over the window) by `12 × window + 100`.
//!
//! It prints one Markdown table per server (`ONESTEP_SCALE_SHAPES=1` adds each shape,
//! `ONESTEP_SCALE_KEEP=1` keeps the database). At 10M rows (not part of CI):
//!
//! ```text
//! ONESTEP_SCALE_ROWS=10000000 cargo test -p onestep-mysql --test scale every_statement -- --nocapture --test-threads 1
//! ```
// Test code: a helper that cannot set up its fixture panics, like an assertion (clippy.toml
// allows this inside #[test] functions; these helpers live outside them).
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use common::{Server, admin_pool, create_db, db_url, drop_db, open, server_version};
use mysql_async::Row;
use mysql_async::prelude::Queryable;
use onestep_core::Limits;
use onestep_core::names::TableNames;
use onestep_core::ports::{ExecutionStore, LeaseStore};
use onestep_mysql::{DdlStyle, MySqlBackend, StoreOptions};
use onestep_testkit::ManualClock;
use onestep_testkit::backend_cases::scale::{
    BEFORE_THE_SCRIPT, NS, Names, OTHER_NS, PER_RESULT, RARE, RARE_ROWS, SLACK, StepMarker,
    history_seeds, scale_rows, script, strict,
};
use onestep_testkit::backend_cases::shapes::{Dialect, collapse_repeats, ordering, shape_literals};
use onestep_testkit::builders::{claim, prepare};
use serde_json::json;

const DIGITS: &str = "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
    UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 \
    UNION ALL SELECT 9)";

fn seq_100k() -> String {
    format!(
        "(SELECT a.d + 10*b.d + 100*c.d + 1000*d.d + 10000*e.d AS n FROM {DIGITS} a, {DIGITS} b, \
         {DIGITS} c, {DIGITS} d, {DIGITS} e) s"
    )
}

/// Replaces each `?` with the next literal.
fn bind_literals(sql: &str, literals: &[String]) -> String {
    let mut out = String::new();
    let mut it = literals.iter();
    for ch in sql.chars() {
        if ch == '?' {
            out.push_str(it.next().map(String::as_str).unwrap_or("NULL"));
        } else {
            out.push(ch);
        }
    }
    out
}

async fn history_does_not_cost(server: Server) {
    let Some(url) = server.admin_url() else {
        return;
    };
    let admin = admin_pool(&url);
    eprintln!(
        "[{}] VERSION() = {}",
        server.label(),
        server_version(&admin).await
    );
    let db = create_db(&admin).await;
    let clock = Arc::new(ManualClock::default());
    let b = open(
        &url,
        &db,
        clock.clone(),
        Limits::default(),
        DdlStyle::Onestep,
        TableNames::default(),
    )
    .await;
    let (t, a) = (b.tables().executions.clone(), b.tables().attempts.clone());
    let mut c = b.test_pool().get_conn().await.expect("conn");
    // 100,000 finished rows of the same namespace and task, expired in the past, plus attempts.
    c.query_drop(format!(
        "INSERT INTO `{t}` (id, namespace, task_name, status, payload, metadata, attempts, \
         available_at, lease_token, expires_at, created_at, updated_at, finished_at, version) \
         SELECT CONCAT('e', LPAD(HEX(n), 31, '0')), 'ns', 't', 'succeeded', '1', '{{}}', 1, '2026-01-01', NULL, \
         '2026-01-02', '2026-01-01', '2026-01-01', '2026-01-01', 2 FROM {}",
        seq_100k()
    ))
    .await
    .expect("history");
    c.query_drop(format!(
        "INSERT INTO `{a}` (id, execution_id, attempt_no, lease_token, worker_id, status, \
         started_at, heartbeat_at, finished_at) SELECT CONCAT('a', LPAD(HEX(n), 31, '0')), CONCAT('e', LPAD(HEX(n), 31, '0')), \
         1, CONCAT('b', LPAD(HEX(n), 31, '0')), 'w', 'succeeded', '2026-01-01', '2026-01-01', '2026-01-01' FROM {}",
        seq_100k()
    ))
    .await
    .expect("attempts");
    c.query_drop(format!("ANALYZE TABLE `{t}`, `{a}`"))
        .await
        .expect("analyze");
    // A little live work, at three priorities (docs/schema.md#claim-order-with-priority).
    for i in 0..5i64 {
        b.submit(prepare(
            "ns",
            &onestep_core::request::SubmitRequest {
                task_name: "t".into(),
                payload: json!(i),
                priority: Some(9 - 4 * (i % 3)),
                ..Default::default()
            },
        ))
        .await
        .expect("submit");
    }
    let now = format!(
        "'{}'",
        clock
            .now_value()
            .naive_utc()
            .format("%Y-%m-%d %H:%M:%S%.6f")
    );
    // The plain claim's reads, then the fair claim's (docs/schema.md#fair-claim-keys), which
    // serves this single-task claim on our tables.
    assert!(b.schema_report().features.fair_keys);
    // The key of the live rows, as the first sweep would insert it (the lock read of an empty
    // keys table is planned as "no matching row in const table").
    c.query_drop(format!(
        "INSERT INTO `{t}_keys` (task_name, namespace, fairness_key, pass, ready_at) \
         VALUES ('t', 'ns', 'ns', 0, {now})"
    ))
    .await
    .expect("key row");
    let statements = b
        .claim_read_statements(1, 10)
        .into_iter()
        .chain(b.fair_claim_read_statements(10))
        // The running count of a task's max_running (docs/semantics.md#max-running).
        .chain(
            b.cap_statements()
                .into_iter()
                .filter(|(l, _)| *l == "cap_running"),
        );
    for (label, sql) in statements {
        let (task, ns) = ("'t'".to_owned(), "'ns'".to_owned());
        let literals: Vec<String> = match label {
            "claim" => vec![ns.clone(), task.clone(), now.clone(), now.clone()],
            "fair_sweep" => vec![task.clone()],
            "fair_wake" => vec![task.clone(), now.clone(), now.clone()],
            "fair_candidates" => vec![task.clone(), now.clone(), ns.clone()],
            "fair_lock" => vec![task.clone(), ns.clone(), ns.clone()],
            "fair_running" | "fair_empty" => vec![task.clone(), ns.clone()],
            "cap_running" => vec![task.clone()],
            "fair_heads" => vec![task.clone(), ns.clone(), now.clone(), now.clone()],
            _ => vec![now.clone()],
        };
        let sql = bind_literals(&sql, &literals);
        let explain = match b.server().flavor {
            onestep_mysql::Flavor::MySql => "EXPLAIN FORMAT=TRADITIONAL",
            onestep_mysql::Flavor::MariaDb => "EXPLAIN",
        };
        let plan: Vec<Row> = c.query(format!("{explain} {sql}")).await.expect("explain");
        let mut lines = Vec::new();
        for r in &plan {
            let table: Option<String> = r.get("table").flatten();
            let access: Option<String> = r.get("type").flatten();
            let key: Option<String> = r.get("key").flatten();
            let rows: Option<String> = r.get::<Option<String>, _>("rows").flatten();
            let extra: Option<String> = r.get("Extra").flatten();
            lines.push(format!(
                "{table:?} type={access:?} key={key:?} rows={rows:?} extra={extra:?}"
            ));
            assert_ne!(
                access.as_deref(),
                Some("ALL"),
                "[{label}] full scan: {lines:?}"
            );
            if table.as_deref() == Some("e") || table.as_deref() == Some(t.as_str()) {
                assert!(key.is_some(), "[{label}] no index: {lines:?}");
            }
        }
        assert!(
            lines.iter().any(|l| l.starts_with("Some(")),
            "[{label}] EXPLAIN returned no table rows: {lines:?}"
        );
        if label == "fair_wake" {
            // The wake's probe of the executions must stay a per-key dependent sub-query: as a
            // semi-join the optimizer may drive it from the executions and read every waiting
            // key once per pending row (docs/schema.md#fair-claim-keys, step 4).
            let dependent = plan.iter().any(|r| {
                let table: Option<String> = r.get("table").flatten();
                let select: Option<String> = r.get("select_type").flatten();
                table.as_deref() == Some("e") && select.as_deref() == Some("DEPENDENT SUBQUERY")
            });
            assert!(
                dependent,
                "[{label}] the executions are not probed per key: {lines:?}"
            );
        }
        // Rows examined by the statement itself (session handler counters).
        c.query_drop("FLUSH STATUS").await.expect("flush status");
        let sql_run = sql.replace(" FOR UPDATE SKIP LOCKED", "");
        let _: Vec<Row> = c.query(sql_run).await.expect("run");
        let counters: Vec<(String, String)> = c
            .query("SHOW SESSION STATUS LIKE 'Handler_read%'")
            .await
            .expect("status");
        let total: u64 = counters
            .iter()
            .map(|(_, v)| v.parse::<u64>().unwrap_or(0))
            .sum();
        eprintln!(
            "[{}] {label}: handler reads {total}; plan {lines:?}",
            server.label()
        );
        assert!(
            total < 1_000,
            "[{label}] examined {total} rows with 100k finished rows: {counters:?}"
        );
    }
    // And the real claim works with the history in place.
    let got = b
        .claim(&claim("ns", "t", 10, 30.0, "w"))
        .await
        .expect("claim");
    assert_eq!(got.len(), 5);
    // Lower priority numbers first, then the oldest.
    let order: Vec<(u8, i64)> = got
        .iter()
        .map(|l| {
            (
                l.execution.priority,
                l.execution.payload.as_i64().unwrap_or(-1),
            )
        })
        .collect();
    assert_eq!(order, [(1, 2), (5, 1), (5, 4), (9, 0), (9, 3)]);
    drop(c);
    b.close().await.expect("close");
    drop_db(&admin, &db).await;
}

#[tokio::test]
async fn history_does_not_cost_mariadb() {
    history_does_not_cost(Server::MariaDb).await;
}

#[tokio::test]
async fn history_does_not_cost_mysql() {
    history_does_not_cost(Server::MySql).await;
}

// ---------------------------------------------------------------------------------------------
// Every statement the backend sends, over a seeded history (issue 15).
// ---------------------------------------------------------------------------------------------

/// Reads of in-memory temporary tables per window row a search-window statement
/// (docs/semantics.md#search-window) may do: its window functions sort and re-read the window
/// (measured: about 9 per row on MariaDB 10.11 and MySQL 9, at any history).
const WINDOW_TEMP_PASSES: u64 = 12;

/// The name of the run's list index (`ix_<T>_list`).
fn list_index(names: &Names) -> String {
    names.tables().ix_list()
}

/// Marks the start of a script step in the general log (a statement that names no table but
/// carries the run's prefix), so each captured statement is attributed to the call that sent it.
struct Marker {
    conn: mysql_async::Conn,
    names: Names,
}

#[async_trait]
impl StepMarker for Marker {
    async fn step(&mut self, step: &str) {
        let sql = self.names.marker_sql(step);
        self.conn.query_drop(sql).await.expect("marker");
    }
}

/// A statement as the general log recorded it, and the script step that sent it.
struct Logged {
    step: String,
    sql: String,
}

/// Runs [`script`] with the general log on, then reads back this run's statements. The log is
/// turned off again before anything is asserted, also when the script fails (its panic is
/// re-raised afterwards). A server-wide lock keeps two runs of this test on one server from
/// switching the log under each other.
async fn capture(
    b: &MySqlBackend,
    clock: &Arc<ManualClock>,
    admin: &mysql_async::Pool,
    names: &Names,
    history_first: DateTime<Utc>,
) -> Vec<Logged> {
    let mut c = admin.get_conn().await.expect("admin conn");
    let locked: Option<i64> = c
        .query_first("SELECT GET_LOCK('onestep_scale_general_log', 3600)")
        .await
        .expect("lock");
    assert_eq!(locked, Some(1), "general log lock");
    let output: Option<String> = c
        .query_first("SELECT @@GLOBAL.log_output")
        .await
        .expect("log_output");
    let start: Option<String> = c
        .query_first("SELECT CAST(NOW(6) AS CHAR)")
        .await
        .expect("now");
    let start = start.expect("now");
    c.query_drop("SET GLOBAL log_output = 'TABLE'")
        .await
        .expect("log_output");
    c.query_drop("SET GLOBAL general_log = ON")
        .await
        .expect("general_log");
    let marker = Marker {
        conn: admin.get_conn().await.expect("marker conn"),
        names: names.clone(),
    };
    let run = tokio::spawn(script(b.clone(), clock.clone(), marker, history_first)).await;
    let off = c.query_drop("SET GLOBAL general_log = OFF").await;
    let restore = c
        .query_drop(format!(
            "SET GLOBAL log_output = '{}'",
            output.unwrap_or_else(|| "FILE".into())
        ))
        .await;
    if let Err(e) = run {
        let _ = c
            .query_drop("SELECT RELEASE_LOCK('onestep_scale_general_log')")
            .await;
        match e.try_into_panic() {
            Ok(p) => std::panic::resume_unwind(p),
            Err(e) => panic!("script: {e}"),
        }
    }
    off.expect("general_log off");
    restore.expect("log_output");
    let rows: Vec<(String, String)> = c
        .query(format!(
            "SELECT command_type, CONVERT(argument USING utf8mb4) FROM mysql.general_log \
             WHERE event_time >= '{start}' AND command_type IN ('Query', 'Execute') \
             AND argument LIKE '%{}%'",
            names.prefix
        ))
        .await
        .expect("general log");
    // Only this test writes the log table (the log is off otherwise): keep it from growing.
    c.query_drop("TRUNCATE TABLE mysql.general_log")
        .await
        .expect("truncate");
    c.query_drop("SELECT RELEASE_LOCK('onestep_scale_general_log')")
        .await
        .expect("unlock");
    let mut step = String::from(BEFORE_THE_SCRIPT);
    let mut out = Vec::new();
    for (_, sql) in rows {
        if let Some(marked) = names.marked_step(&sql) {
            step = marked;
            continue;
        }
        out.push(Logged {
            step: step.clone(),
            sql,
        });
    }
    out
}

/// The shape of a statement: literals replaced by `?`, lists of placeholders, rows of a
/// multi-row `VALUES`, `CASE` arms and repeated `OR` groups collapsed to one, whitespace
/// collapsed. Statements of one shape differ only in their values.
fn normalize(sql: &str) -> String {
    let s = shape_literals(sql, &MYSQL)
        .replace(" ,", ",")
        .replace(", ", ",")
        .replace("IS NOT NULL", "IS_NOT_NULL")
        .replace("IS NULL", "IS_NULL")
        .replace("NULL", "?")
        .replace("IS_NOT_NULL", "IS NOT NULL")
        .replace("IS_NULL", "IS NULL");
    let s = collapse_repeats(
        s,
        &[
            ("?,?", "?"),
            ("(?),(?)", "(?)"),
            ("WHEN ? THEN ? WHEN ? THEN ?", "WHEN ? THEN ?"),
            ("_binary?", "?"),
        ],
    );
    collapse_or(s)
}

/// MySQL's and MariaDB's spelling of literals (bare dates and times too) and identifiers.
const MYSQL: Dialect = Dialect {
    ident_quote: '`',
    backslash_escapes: true,
    number_chars: ".-:",
    dollar_params: false,
};

/// `(x) OR (x)` → `(x)` for identical balanced groups (the per-row fences of batched writes).
fn collapse_or(mut s: String) -> String {
    'again: loop {
        let bytes = s.as_bytes();
        let mut from = 0;
        while let Some(i) = s[from..].find(") OR (").map(|i| i + from) {
            // The group ending at i and the one starting at i + 5.
            let mut depth = 0i32;
            let mut start = None;
            for j in (0..=i).rev() {
                match bytes[j] {
                    b')' => depth += 1,
                    b'(' => {
                        depth -= 1;
                        if depth == 0 {
                            start = Some(j);
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let next = i + 5;
            let mut depth = 0i32;
            let mut end = None;
            for (j, b) in bytes.iter().enumerate().skip(next) {
                match b {
                    b'(' => depth += 1,
                    b')' => {
                        depth -= 1;
                        if depth == 0 {
                            end = Some(j);
                            break;
                        }
                    }
                    _ => {}
                }
            }
            if let (Some(a), Some(e)) = (start, end)
                && s[a..=i] == s[next..=e]
            {
                s.replace_range(i + 1..=e, "");
                continue 'again;
            }
            from = i + 1;
        }
        return s;
    }
}

/// A short label of a statement shape: verb, selected or set columns, table(s), the columns its
/// predicates compare (outside `EXISTS` sub-queries), the ordering, `LIMIT` and locking.
fn label(shape: &str, sql: &str, names: &Names) -> String {
    let s = names.short(shape);
    let tokens: Vec<String> = s
        .replace('(', " ( ")
        .replace(')', " ) ")
        .replace(',', " , ")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let up: Vec<String> = tokens.iter().map(|t| t.to_uppercase()).collect();
    let bare = |t: &str| -> String {
        t.rsplit('.')
            .next()
            .unwrap_or(t)
            .trim_matches('`')
            .to_owned()
    };
    let is_ident = |t: &str| {
        let b = bare(t);
        b.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && b.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && !["AND", "OR", "NOT", "NULL", "THEN", "END", "ELSE"]
                .contains(&b.to_uppercase().as_str())
    };
    let first = up.first().cloned().unwrap_or_default();
    let union = s.starts_with("(SELECT");
    let mut tables = Vec::new();
    let mut cols: Vec<String> = Vec::new();
    let mut set_cols: Vec<String> = Vec::new();
    let mut select_items = 1;
    let mut select_list: Vec<String> = Vec::new();
    // Sections at depth 0: "select" (the select list), "set", "where" (predicates), "values".
    let mut section = if first == "SELECT" { "select" } else { "" };
    let mut skip_depth: Option<i32> = None;
    let mut depth = 0i32;
    for i in 0..tokens.len() {
        let t = tokens[i].as_str();
        let u = up[i].as_str();
        match t {
            "(" => depth += 1,
            ")" => {
                depth -= 1;
                if skip_depth.is_some_and(|d| depth < d) {
                    skip_depth = None;
                }
            }
            _ => {}
        }
        if skip_depth.is_some() {
            continue;
        }
        if u == "EXISTS" {
            skip_depth = Some(depth + 1);
            continue;
        }
        if ["FROM", "UPDATE", "INTO", "JOIN"].contains(&u)
            && let Some(next) = tokens.get(i + 1)
            && next.starts_with('`')
        {
            let name = next.trim_matches('`').to_owned();
            if !tables.contains(&name) {
                tables.push(name);
            }
        }
        if depth == 0 {
            match u {
                "FROM" if section == "select" => section = "",
                "SET" => section = "set",
                "WHERE" | "ON" => section = "where",
                "VALUES" | "DUPLICATE" | "ORDER" => section = "",
                _ => {}
            }
        }
        match section {
            "select" if depth == 0 && i > 0 => {
                if t == "," {
                    select_items += 1;
                } else if t == "(" || t == ")" || u == "DISTINCT" {
                } else if tokens.get(i + 1).is_some_and(|n| n == "(") {
                    select_list.push(format!("{t}(…)"));
                } else if select_items <= 2 {
                    select_list.push(bare(t));
                }
            }
            "set" if depth == 0 && t == "=" && i > 0 && is_ident(&tokens[i - 1]) => {
                set_cols.push(bare(&tokens[i - 1]));
            }
            _ => {}
        }
        let in_predicates = section == "where" || (union && section != "select");
        let op = ["=", "<", ">", "<=", ">=", "<>", "!=", "IN", "IS", "LIKE"].contains(&u);
        if in_predicates && op && i > 0 && is_ident(&tokens[i - 1]) {
            let b = bare(&tokens[i - 1]);
            if !cols.contains(&b) {
                cols.push(b);
            }
        }
    }
    for (needle, col) in [
        ("JSON_EXTRACT(metadata", "metadata→json"),
        ("JSON_EXTRACT(error", "error→json"),
        ("CONCAT(REPLACE(", "CONCAT(keys)"),
    ] {
        if s.contains(needle) {
            cols.push(col.to_owned());
        }
    }
    if s.contains("EXISTS") {
        cols.push("EXISTS(<A>)".to_owned());
    }
    let tables = tables.join(" ⋈ ");
    let mut out = if union {
        format!(
            "SELECT ∪{} FROM {tables}",
            s.matches("UNION ALL").count() + 1
        )
    } else {
        match first.as_str() {
            "SELECT" => {
                let what = if select_items <= 2 {
                    select_list.join(", ")
                } else {
                    format!("[{select_items} columns]")
                };
                let distinct = if up.get(1).is_some_and(|u| u == "DISTINCT") {
                    "DISTINCT "
                } else {
                    ""
                };
                format!("SELECT {distinct}{what} FROM {tables}")
            }
            "UPDATE" => {
                let n = set_cols.len();
                set_cols.truncate(3);
                let more = if n > 3 { ", …" } else { "" };
                format!("UPDATE {tables} SET {}{more}", set_cols.join(", "))
            }
            "DELETE" => format!("DELETE FROM {tables}"),
            "WITH" => format!("WITH RECURSIVE … SELECT FROM {tables}"),
            _ if s.starts_with("INSERT IGNORE") => format!("INSERT IGNORE INTO {tables}"),
            _ => format!("INSERT INTO {tables}"),
        }
    };
    if !cols.is_empty() {
        out.push_str(&format!(" WHERE {}", cols.join(", ")));
    }
    if let Some(i) = s.find("ORDER BY ") {
        let order = ordering(&s, i).replace("e.", "");
        out.push_str(&format!(" ORDER BY {order}"));
    }
    if let Some(n) = limit_of(sql) {
        out.push_str(&format!(" LIMIT {n}"));
    }
    if s.contains("SKIP LOCKED") {
        out.push_str(" FOR UPDATE SKIP LOCKED");
    } else if s.contains("FOR UPDATE") {
        out.push_str(" FOR UPDATE");
    }
    if s.contains(" VALUES ") {
        out.push_str(" VALUES");
    }
    if s.contains("ON DUPLICATE KEY") {
        out.push_str(" ON DUPLICATE KEY UPDATE");
    }
    out
}

/// The largest `LIMIT n` of a statement.
fn limit_of(sql: &str) -> Option<u64> {
    sql.match_indices("LIMIT ")
        .filter_map(|(i, _)| {
            let digits: String = sql[i + 6..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse::<u64>().ok()
        })
        .max()
}

/// Items of the longest `IN (…)` list (outside string literals).
fn largest_in_list(sql: &str) -> u64 {
    let mut best = 0;
    for (i, _) in sql.match_indices(" IN (") {
        let mut depth = 0;
        let mut items = 1;
        let mut quoted = false;
        for c in sql[i + 4..].chars() {
            match c {
                '\'' => quoted = !quoted,
                _ if quoted => {}
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                ',' if depth == 1 => items += 1,
                _ => {}
            }
        }
        best = best.max(items);
    }
    best
}

/// One row of an EXPLAIN.
#[derive(Debug, Clone)]
struct PlanRow {
    /// `INSERT` for the row MySQL shows for the target of an `INSERT … SELECT` (type `ALL`, no
    /// key: the rows are written, not read).
    select_type: Option<String>,
    table: Option<String>,
    access: Option<String>,
    key: Option<String>,
    rows: Option<u64>,
    extra: String,
}

impl PlanRow {
    /// A row that reads one of our tables (not a derived table, union result or sub-query
    /// materialisation, whose names start with `<`).
    fn base(&self) -> bool {
        self.table.as_deref().is_some_and(|t| !t.starts_with('<'))
            && self.select_type.as_deref() != Some("INSERT")
    }
}

/// What one captured statement costs.
struct Measured {
    sql: String,
    plan: Vec<PlanRow>,
    handler_reads: u64,
    /// The part of `handler_reads` that reads rows by position or in storage order
    /// (`Handler_read_rnd`, `Handler_read_rnd_next`): a table scan, or the passes over a
    /// temporary table.
    position_reads: u64,
    returned: u64,
    error: Option<String>,
}

async fn explain(
    c: &mut mysql_async::Conn,
    flavor: onestep_mysql::Flavor,
    sql: &str,
) -> Vec<PlanRow> {
    let explain = match flavor {
        onestep_mysql::Flavor::MySql => "EXPLAIN FORMAT=TRADITIONAL",
        onestep_mysql::Flavor::MariaDb => "EXPLAIN",
    };
    let rows: Vec<Row> = c
        .query(format!("{explain} {sql}"))
        .await
        .unwrap_or_else(|e| panic!("EXPLAIN {sql}: {e}"));
    rows.into_iter()
        .map(|r| PlanRow {
            select_type: r.get::<Option<String>, _>("select_type").flatten(),
            table: r.get::<Option<String>, _>("table").flatten(),
            access: r.get::<Option<String>, _>("type").flatten(),
            key: r.get::<Option<String>, _>("key").flatten(),
            rows: r
                .get::<Option<String>, _>("rows")
                .flatten()
                .and_then(|v| v.parse().ok()),
            extra: r
                .get::<Option<String>, _>("Extra")
                .flatten()
                .unwrap_or_default(),
        })
        .collect()
}

/// The session's `Handler_read_*` counters: all of them, and the position reads among them
/// ([`Measured::position_reads`]).
async fn handler_sum(c: &mut mysql_async::Conn) -> (u64, u64) {
    let counters: Vec<(String, String)> = c
        .query("SHOW SESSION STATUS LIKE 'Handler_read%'")
        .await
        .expect("status");
    counters.iter().fold((0, 0), |(all, position), (name, v)| {
        let n = v.parse::<u64>().unwrap_or(0);
        let rnd = name.eq_ignore_ascii_case("Handler_read_rnd")
            || name.eq_ignore_ascii_case("Handler_read_rnd_next");
        (all + n, position + if rnd { n } else { 0 })
    })
}

/// EXPLAIN, then the statement itself inside a transaction that is rolled back, between
/// `FLUSH STATUS` and the session's `Handler_read_*` counters (less what reading them costs).
async fn measure(
    c: &mut mysql_async::Conn,
    flavor: onestep_mysql::Flavor,
    sql: &str,
    baseline: (u64, u64),
) -> Measured {
    let plan = explain(c, flavor, sql).await;
    c.query_drop("FLUSH STATUS").await.expect("flush status");
    c.query_drop("START TRANSACTION").await.expect("begin");
    let run: Result<Vec<Row>, _> = c.query(sql).await;
    let affected = c.affected_rows();
    let reads = handler_sum(c).await;
    c.query_drop("ROLLBACK").await.expect("rollback");
    let (returned, error) = match run {
        Ok(rows) => ((rows.len() as u64).max(affected), None),
        Err(e) => (0, Some(e.to_string())),
    };
    Measured {
        sql: sql.to_owned(),
        plan,
        handler_reads: reads.0.saturating_sub(baseline.0),
        position_reads: reads.1.saturating_sub(baseline.1),
        returned,
        error,
    }
}

/// The verdict on one measured statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Bounded by its result.
    Ok,
    /// Walks the namespace through the list index in order until the page is full: its cost is
    /// the rows between two matches, not the page (a filter the index does not hold).
    Walk,
    /// Scans or reads more than its bound.
    Fail,
}

struct Judged {
    verdict: Verdict,
    bound: u64,
    /// For a search-window statement: the bound of its temporary-table reads, which `bound`
    /// then does not cover.
    temp_bound: Option<u64>,
    why: Vec<String>,
}

/// A search-window statement (docs/semantics.md#search-window): it reads at most a window of
/// the list range (its largest `LIMIT`) and numbers it with window functions.
fn windowed(sql: &str) -> bool {
    sql.contains("ROW_NUMBER() OVER")
}

fn judge(m: &Measured, list_index: &str) -> Judged {
    let result = limit_of(&m.sql)
        .unwrap_or(0)
        .max(largest_in_list(&m.sql))
        .max(m.returned)
        .max(1);
    let bound = PER_RESULT * result + SLACK;
    // A search window reads its range of our table by index (bounded like any statement) and
    // re-reads the window in temporary tables, which is bounded by the window too.
    let windowed = windowed(&m.sql);
    let temp_bound = windowed.then_some(WINDOW_TEMP_PASSES * result + SLACK);
    let (reads, temp_reads) = if windowed {
        (
            m.handler_reads.saturating_sub(m.position_reads),
            m.position_reads,
        )
    } else {
        (m.handler_reads, 0)
    };
    let mut why = Vec::new();
    if let Some(e) = &m.error {
        why.push(format!("re-run failed: {e}"));
    }
    let base: Vec<&PlanRow> = m.plan.iter().filter(|r| r.base()).collect();
    // The optimizer looked the const row up already and found none.
    let nothing = m.plan.iter().any(|r| {
        let x = r.extra.to_lowercase();
        x.contains("impossible where") || x.contains("no matching row")
    });
    if base.is_empty() && !nothing {
        why.push("EXPLAIN names none of the tables".into());
    }
    // A window's sorts are of its own temporary tables (at most `result` rows): what matters
    // there is whether the base range is read in order.
    let sorted = m
        .plan
        .iter()
        .filter(|r| !windowed || r.base())
        .any(|r| r.extra.contains("filesort") || r.extra.contains("temporary"));
    // A full scan of the list index in its order, stopped by the LIMIT (MySQL's plan for the
    // purge read): judged by what it reads, like a walk.
    let ordered_index_scan = |r: &PlanRow| {
        r.access.as_deref() == Some("index")
            && r.key.as_deref() == Some(list_index)
            && !sorted
            && limit_of(&m.sql).is_some()
    };
    for r in &base {
        match r.access.as_deref() {
            Some("ALL") => why.push(format!("{:?}: full table scan", r.table)),
            Some("index") if !ordered_index_scan(r) => {
                why.push(format!("{:?}: full index scan", r.table));
            }
            _ => {}
        }
        if r.key.is_none() {
            why.push(format!("{:?}: no index", r.table));
        }
    }
    let estimate = base.iter().filter_map(|r| r.rows).max().unwrap_or(0);
    if estimate > bound && sorted {
        why.push(format!("estimates {estimate} rows, then sorts them"));
    }
    let walk = reads > bound
        && !sorted
        && !windowed
        && base.iter().any(|r| r.key.as_deref() == Some(list_index));
    if reads > bound && !walk {
        why.push(format!(
            "reads {reads} rows for a result of at most {result}"
        ));
    }
    if let Some(tb) = temp_bound.filter(|tb| temp_reads > *tb) {
        why.push(format!(
            "reads {temp_reads} temporary-table rows for a window of {result} (bound {tb})"
        ));
    }
    let verdict = if !why.is_empty() {
        Verdict::Fail
    } else if walk {
        let how = if base.iter().any(|r| ordered_index_scan(r)) {
            "the whole list index in its order (type=index, no range on the namespace)"
        } else {
            "the namespace's range of the list index"
        };
        why.push(format!(
            "walks {} rows of {how} for a result of at most {result}",
            m.handler_reads
        ));
        Verdict::Walk
    } else {
        Verdict::Ok
    };
    Judged {
        verdict,
        bound,
        temp_bound,
        why,
    }
}

/// Statements of one shape.
struct Shape {
    label: String,
    steps: Vec<String>,
    instances: Vec<String>,
    /// The steps of `instances`.
    seen: Vec<String>,
}

/// Matches that are few and old, the case where a filter the index does not hold walks the
/// whole history: three history rows a thousand rows from the oldest end (purge's cutoffs in
/// the script stay below them) become `failed`, three more two thousand rows in move to
/// [`RARE`]. Nothing newer than them is failed except two live rows, and no live row has the
/// rare task, so the second page of a status-filtered list, a task+status-filtered one and the
/// first page of the rare task all have to reach them.
async fn rare_history(c: &mut mysql_async::Conn, tables: &TableNames) {
    let t = &tables.executions;
    let failed = r#"{"kind":"error","exception_type":"OldError","stage":null}"#;
    for (offset, set) in [
        (1_000, format!("status = 'failed', error = '{failed}'")),
        (2_000, format!("task_name = '{RARE}'")),
    ] {
        c.query_drop(format!(
            "UPDATE `{t}` e JOIN (SELECT id FROM `{t}` WHERE namespace = '{NS}' \
             ORDER BY created_at, id LIMIT {offset}, {RARE_ROWS}) x ON x.id = e.id SET {set}"
        ))
        .await
        .expect("rare history rows");
        assert_eq!(c.affected_rows(), RARE_ROWS);
    }
}

/// The diagnostics and trace-context tables with one row per seeded attempt and execution
/// (`seed_history` writes the pair only): what they hold once every attempt has stored
/// diagnostics and every submission a traceparent, so their reads are planned over a full
/// table, not a near-empty one. Chunks of 100,000 rows in primary-key order.
async fn seed_side_tables(c: &mut mysql_async::Conn, tables: &TableNames) {
    let hex = |col: &str| format!("REPLACE(CAST({col} AS CHAR), '-', '')");
    let side = [
        (
            tables.attempts.clone(),
            format!(
                "INSERT INTO `{}` (attempt_id, execution_id, is_final, message, progress_done, \
                 progress_total, progress_note, progress_at, log_lines, log_tail, updated_at) \
                 SELECT {}, {}, 1, 'seeded', 1, 1, '', finished_at, 1, \
                 '[{{\"seq\":1,\"at\":\"2026-01-01T00:00:00Z\",\"level\":\"info\",\"message\":\"seeded\"}}]', \
                 finished_at FROM `{}`",
                tables.diagnostics(),
                hex("id"),
                hex("execution_id"),
                tables.attempts
            ),
        ),
        (
            tables.executions.clone(),
            format!(
                "INSERT INTO `{}` (execution_id, traceparent, created_at) \
                 SELECT {id}, CONCAT('00-', {id}, '-', SUBSTR({id}, 1, 16), '-01'), created_at \
                 FROM `{}`",
                tables.traces(),
                tables.executions,
                id = hex("id"),
            ),
        ),
        // A delivered webhook (callback and one delivery attempt) per execution, so that the
        // purge's deletes of both are planned over full tables too.
        (
            tables.executions.clone(),
            format!(
                "INSERT INTO `{}` (execution_id, namespace, url, events, state, attempts, \
                 round_start, next_at, last_status, created_at, updated_at) \
                 SELECT {id}, namespace, 'https://hooks.example.com/x', 'terminal', 'delivered', \
                 1, 0, created_at, 204, created_at, created_at FROM `{}`",
                onestep_mysql::schema::callbacks_table(tables),
                tables.executions,
                id = hex("id"),
            ),
        ),
        // A recorded durable step per execution (docs/steps.md), so that the purge's count and
        // delete of steps are planned over a full table too.
        (
            tables.executions.clone(),
            format!(
                "INSERT INTO `{}` (execution_id, step_key, seq, value, bytes, attempt_id, \
                 attempt_no, saved_at) \
                 SELECT {id}, 'seeded', 1, '{{}}', 2, {id}, 1, created_at FROM `{}`",
                onestep_mysql::schema::steps_table(tables),
                tables.executions,
                id = hex("id"),
            ),
        ),
        (
            tables.executions.clone(),
            format!(
                "INSERT INTO `{}` (execution_id, attempt_no, event, webhook_id, status, at) \
                 SELECT {id}, 1, 'terminal', CONCAT('msg_', {id}), 204, created_at FROM `{}`",
                onestep_mysql::schema::deliveries_table(tables),
                tables.executions,
                id = hex("id"),
            ),
        ),
    ];
    for (source, insert) in side {
        let mut after: Option<String> = None;
        loop {
            let lower = after
                .as_ref()
                .map_or(String::new(), |a| format!(" WHERE id > '{a}'"));
            let upper: Option<String> = c
                .query_first(format!(
                    "SELECT CAST(id AS CHAR) FROM `{source}`{lower} ORDER BY id LIMIT 1 OFFSET 99999"
                ))
                .await
                .expect("chunk bound");
            let range = match (&after, &upper) {
                (None, None) => String::new(),
                (None, Some(u)) => format!(" WHERE id <= '{u}'"),
                (Some(a), None) => format!(" WHERE id > '{a}'"),
                (Some(a), Some(u)) => format!(" WHERE id > '{a}' AND id <= '{u}'"),
            };
            c.query_drop(format!("{insert}{range}"))
                .await
                .expect("side table rows");
            match upper {
                Some(u) => after = Some(u),
                None => break,
            }
        }
    }
}

async fn every_statement(server: Server) {
    let Some(url) = server.admin_url() else {
        return;
    };
    let admin = admin_pool(&url);
    let version = server_version(&admin).await;
    let rows = scale_rows();
    let db = create_db(&admin).await;
    let clock = Arc::new(ManualClock::default());
    let names = Names::new();
    let mut o = StoreOptions::new(db_url(&url, &db));
    o.clock = clock.clone();
    o.tables = names.tables();
    o.traces = true;
    let b = MySqlBackend::open(o).await.expect("open backend");
    let features = b.schema_report().features;
    assert!(features.claimable_column && features.diagnostics_table && features.traces_table);
    assert!(features.list_indexes);
    let before = clock.now_value();
    let seeded = std::time::Instant::now();
    let [ours, other] = history_seeds(rows, before);
    assert_eq!(b.seed_history(&ours).await.expect("seed"), rows);
    let other_rows = other.count;
    assert_eq!(b.seed_history(&other).await.expect("seed"), other_rows);
    let seed_s = seeded.elapsed().as_secs_f64();
    let mut c = b.test_pool().get_conn().await.expect("conn");
    let tables = b.tables().clone();
    rare_history(&mut c, &tables).await;
    seed_side_tables(&mut c, &tables).await;
    let side_s = seeded.elapsed().as_secs_f64() - seed_s;
    c.query_drop(format!(
        "ANALYZE TABLE `{}`, `{}`, `{}`, `{}`, `{}`, `{}`, `{}`",
        tables.executions,
        tables.attempts,
        tables.diagnostics(),
        tables.traces(),
        onestep_mysql::schema::callbacks_table(&tables),
        onestep_mysql::schema::deliveries_table(&tables),
        onestep_mysql::schema::steps_table(&tables)
    ))
    .await
    .expect("analyze");
    let seed_total_s = seeded.elapsed().as_secs_f64();
    eprintln!(
        "[{}] {version}: seeded {rows} + {other_rows} executions + attempts in {seed_s:.1} s, \
         their diagnostics and traceparents in {side_s:.1} s ({seed_total_s:.1} s with ANALYZE)",
        server.label()
    );
    let history_first = before - chrono::Duration::milliseconds(rows as i64);
    let scripted = std::time::Instant::now();
    let logged = capture(&b, &clock, &admin, &names, history_first).await;
    let script_s = scripted.elapsed().as_secs_f64();

    // Shapes, in the order first seen.
    let mut shapes: Vec<(String, Shape)> = Vec::new();
    for l in &logged {
        let mut shape = normalize(&l.sql);
        // Writes that read nothing (`INSERT … VALUES`) are told apart by their label only.
        let label = label(&shape, &l.sql, &names);
        if shape.starts_with("INSERT") && !shape.contains(" SELECT ") {
            shape.clone_from(&label);
        }
        let i = match shapes.iter().position(|(s, _)| *s == shape) {
            Some(i) => i,
            None => {
                shapes.push((
                    shape,
                    Shape {
                        label,
                        steps: Vec::new(),
                        instances: Vec::new(),
                        seen: Vec::new(),
                    },
                ));
                shapes.len() - 1
            }
        };
        let s = &mut shapes[i].1;
        if !s.steps.contains(&l.step) {
            s.steps.push(l.step.clone());
        }
        // One instance per call that sent the shape (up to 8), and up to 3 in all otherwise.
        let new_step = !s.seen.contains(&l.step);
        if (new_step && s.instances.len() < 8 || s.instances.len() < 3)
            && !s.instances.contains(&l.sql)
        {
            s.instances.push(l.sql.clone());
            s.seen.push(l.step.clone());
        }
    }
    assert!(
        shapes.len() >= 30,
        "only {} statement shapes captured from {} log rows: is the general log written?",
        shapes.len(),
        logged.len()
    );
    // The same label for two shapes gets a number.
    for i in 1..shapes.len() {
        let n = shapes[..i]
            .iter()
            .filter(|(_, s)| {
                s.label == shapes[i].1.label
                    || s.label.starts_with(&format!("{} #", shapes[i].1.label))
            })
            .count();
        if n > 0 {
            shapes[i].1.label = format!("{} #{}", shapes[i].1.label, n + 1);
        }
    }

    // EXPLAIN and measure, in the test database, with the backend's session settings.
    c.query_drop("SET time_zone = '+00:00'").await.expect("tz");
    c.query_drop("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .await
        .expect("isolation");
    c.query_drop("FLUSH STATUS").await.expect("flush");
    let baseline = handler_sum(&mut c).await;
    let flavor = b.server().flavor;
    let list_index = list_index(&names);
    let mut table = String::new();
    table.push_str(&format!(
        "\n[{}] {version}: {rows} finished executions in `{NS}` + {other_rows} in `{OTHER_NS}`, \
         with their attempts, diagnostics and traceparents (seeded in {seed_total_s:.0} s); \
         script {script_s:.1} s, {} statements of {} shapes\n\n",
        server.label(),
        logged.len(),
        shapes.len()
    ));
    table.push_str(
        "| statement | sent by | access | key | rows (est.) | handler reads | verdict |\n",
    );
    table.push_str("|---|---|---|---|---|---|---|\n");
    let mut failures = Vec::new();
    let mut walks = Vec::new();
    let mut details = String::new();
    for (shape, s) in &shapes {
        let steps = if s.steps.len() > 3 {
            format!("{}; +{} more", s.steps[..3].join("; "), s.steps.len() - 3)
        } else {
            s.steps.join("; ")
        };
        let reads = ["SELECT", "(SELECT", "UPDATE", "DELETE", "WITH"];
        let insert_select = shape.starts_with("INSERT") && shape.contains(" SELECT ");
        if !reads.iter().any(|v| shape.starts_with(v)) && !insert_select {
            table.push_str(&format!(
                "| `{}` | {steps} | — (no read: VALUES, unique checks by index) | | | | |\n",
                s.label
            ));
            continue;
        }
        // The costliest of its instances.
        let mut worst: Option<(Measured, Judged)> = None;
        let mut each = Vec::new();
        for (sql, step) in s.instances.iter().zip(&s.seen) {
            let m = measure(&mut c, flavor, sql, baseline).await;
            let j = judge(&m, &list_index);
            let plan: Vec<String> = m
                .plan
                .iter()
                .filter(|r| r.base())
                .map(|r| {
                    format!(
                        "{} {}",
                        r.access.as_deref().unwrap_or("-"),
                        names.short(r.key.as_deref().unwrap_or("-"))
                    )
                })
                .collect();
            each.push(format!(
                "    {step}: {} handler reads, {} rows, {}",
                m.handler_reads,
                m.returned,
                plan.join(" / ")
            ));
            let worse = worst.as_ref().is_none_or(|(wm, wj)| {
                (j.verdict as u8, m.handler_reads) > (wj.verdict as u8, wm.handler_reads)
            });
            if worse {
                worst = Some((m, j));
            }
        }
        let Some((m, j)) = worst else { continue };
        let base: Vec<&PlanRow> = m.plan.iter().filter(|r| r.base()).collect();
        let access = if base.is_empty() {
            "const (no row)".to_owned()
        } else {
            base.iter()
                .map(|r| r.access.clone().unwrap_or_else(|| "-".into()))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        let keys = base
            .iter()
            .map(|r| names.short(r.key.as_deref().unwrap_or("-")))
            .collect::<Vec<_>>()
            .join(" / ");
        let est = base
            .iter()
            .map(|r| r.rows.map_or("-".into(), |n| n.to_string()))
            .collect::<Vec<_>>()
            .join(" / ");
        let bounds = match j.temp_bound {
            Some(tb) => format!("{}; temporary ≤ {tb}", j.bound),
            None => j.bound.to_string(),
        };
        let verdict = match j.verdict {
            Verdict::Ok => format!("ok (≤ {bounds})"),
            Verdict::Walk => format!("**walk** (> {bounds})"),
            Verdict::Fail => format!("**FAIL** (> {bounds})"),
        };
        let reads = if j.temp_bound.is_some() {
            format!(
                "{} + {} temporary",
                m.handler_reads.saturating_sub(m.position_reads),
                m.position_reads
            )
        } else {
            m.handler_reads.to_string()
        };
        table.push_str(&format!(
            "| `{}` | {steps} | {access} | {keys} | {est} | {reads} | {verdict} |\n",
            s.label
        ));
        if j.verdict != Verdict::Ok {
            details.push_str(&format!(
                "\n{} — {}:\n  {}\n  plan: {:?}\n  by call:\n{}\n",
                s.label,
                j.why.join("; "),
                names.short(&m.sql),
                m.plan,
                each.join("\n")
            ));
            let entry = format!("{}: {}", s.label, j.why.join("; "));
            match j.verdict {
                Verdict::Walk => walks.push(entry),
                _ => failures.push(entry),
            }
        }
    }
    if std::env::var("ONESTEP_SCALE_SHAPES").is_ok_and(|v| v == "1") {
        for (shape, s) in &shapes {
            eprintln!("{}\n    {}", s.label, names.short(shape));
        }
    }
    eprintln!("{table}{details}");
    drop(c);
    b.close().await.expect("close");
    if std::env::var("ONESTEP_SCALE_KEEP").is_ok_and(|v| v == "1") {
        eprintln!(
            "ONESTEP_SCALE_KEEP=1: database `{db}` kept, tables {} {}",
            names.t, names.a
        );
    } else {
        drop_db(&admin, &db).await;
    }
    if strict() {
        failures.append(&mut walks);
    }
    assert!(
        failures.is_empty(),
        "[{}] statements whose cost grows with the history:\n{}",
        server.label(),
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_statement_mariadb() {
    every_statement(Server::MariaDb).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_statement_mysql() {
    every_statement(Server::MySql).await;
}
