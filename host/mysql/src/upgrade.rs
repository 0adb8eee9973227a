//! Upgrading reference-created tables (docs/schema.md#upgrading-reference-tables): add the
//! `claimable` generated column and its two indexes to an executions table that lacks them, and
//! the three filtered-list indexes (status, status-list, task-list) to any executions table
//! without them (reference tables and tables an older onestep created), with additive DDL only,
//! each statement in the most online form the server accepts; the one exception widens an
//! older onestep's own narrower status index in place.
//!
//! The column is added `VIRTUAL` (not `STORED` as in the tables we create): both servers add a
//! virtual column in place of the metadata only (`ALGORITHM=INSTANT`), whereas a stored one
//! copies the whole table under a write lock. The indexes hold the computed value either way, so
//! the claim and expiry reads use them exactly as on our tables. Each index is built with
//! `ALGORITHM=INPLACE, LOCK=NONE` (reads and writes go on during the build). Where the server
//! refuses an online form (errors 1845/1846), the next form is tried, ending with the server's
//! default; the report says which form each step took. Missing pieces are added one by one, so
//! an interrupted upgrade resumes where it stopped.

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use onestep_core::ExecutionError;
use onestep_core::names::{GLOBAL_DDL_LOCK, TableNames};

use crate::backend::MySqlBackend;
use crate::errors::{OpError, OpResult};
use crate::schema::{
    CLAIMABLE_COLUMN, FAIR_KEY_COLUMN, FAIR_KEY_DEF, IX_CLAIM_PRIORITY_COLUMNS, IX_FAIR_COLUMNS,
    IX_FAIR_RUNNING_COLUMNS, IX_STATUS_COLUMNS, IX_STATUS_LIST_COLUMNS, IX_TASK_LIST_COLUMNS,
    get_lock, ix_claim_priority, ix_claimable, ix_expiry, ix_fair, ix_fair_running, ix_status,
    ix_status_list, ix_task_list, release_lock,
};
pub use onestep_core::backend::{UpgradeReport, UpgradeStep};
use onestep_core::store::{StoreOptions, for_ddl, upgrade_then_close};

/// Server errors meaning "this ALGORITHM/LOCK is not supported for the operation".
const UNSUPPORTED_ALGORITHM: [u16; 2] = [1845, 1846];

/// The column definition added by the upgrade.
fn column_def() -> String {
    format!(
        "ADD COLUMN {CLAIMABLE_COLUMN} TINYINT AS (IF(status IN ('queued','retrying'), 1, NULL)) VIRTUAL"
    )
}

/// The columns the upgrade adds after `claimable` (docs/semantics.md#priority-and-fairness-key):
/// plain columns with a constant default, added `ALGORITHM=INSTANT` (metadata only) on both
/// servers. No CHECK is added to existing tables: both servers validate a new CHECK by copying
/// the table; submits are validated before they are written and reads refuse a value outside
/// 0..=9 (tables this crate creates have the CHECK).
fn priority_columns_def() -> &'static str {
    "ADD COLUMN priority TINYINT NOT NULL DEFAULT '5', \
     ADD COLUMN fairness_key VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
}

/// The fair claim's generated column (docs/semantics.md#fair-claim), added after the priority
/// columns: virtual, so `ALGORITHM=INSTANT` on both servers.
fn fair_key_def() -> String {
    format!("ADD COLUMN {FAIR_KEY_DEF}")
}

/// The indexes the upgrade adds: (name, `ADD INDEX …` clause). The claim paths need the first
/// two ([`is_upgraded`]); the first is the claim index with priority ([`ix_claim_priority`]),
/// which needs the priority column; the last three, over (namespace, task_name, status, created_at, id),
/// (namespace, status, created_at, id) and (namespace, task_name, created_at, id), make the
/// grouped counts of the dashboard and the API's gauge read one index and the lists filtered
/// by task, status or both and the purge by status read ranges in list order (tables without
/// them work, their cost grows with history there).
/// The last two are the fair claim's ([`ix_fair`], [`ix_fair_running`]); they need the
/// `fair_key` column.
fn index_defs(names: &TableNames) -> [(String, String); 8] {
    let status = ix_status(names);
    let status_list = ix_status_list(names);
    let task_list = ix_task_list(names);
    let claim = ix_claim_priority(names);
    let expiry = ix_expiry(names);
    let fair = ix_fair(names);
    let fair_running = ix_fair_running(names);
    let quota = crate::schema::ix_quota(names);
    [
        (
            claim.clone(),
            format!("ADD INDEX `{claim}` ({IX_CLAIM_PRIORITY_COLUMNS})"),
        ),
        (
            expiry.clone(),
            format!("ADD INDEX `{expiry}` (claimable, expires_at, id)"),
        ),
        (
            status.clone(),
            format!("ADD INDEX `{status}` ({IX_STATUS_COLUMNS})"),
        ),
        (
            status_list.clone(),
            format!("ADD INDEX `{status_list}` ({IX_STATUS_LIST_COLUMNS})"),
        ),
        (
            task_list.clone(),
            format!("ADD INDEX `{task_list}` ({IX_TASK_LIST_COLUMNS})"),
        ),
        (
            fair.clone(),
            format!("ADD INDEX `{fair}` ({IX_FAIR_COLUMNS})"),
        ),
        (
            fair_running.clone(),
            format!("ADD INDEX `{fair_running}` ({IX_FAIR_RUNNING_COLUMNS})"),
        ),
        (
            quota.clone(),
            format!("ADD INDEX `{quota}` ({})", crate::schema::IX_QUOTA_COLUMNS),
        ),
    ]
}

/// The statements an operator can run by hand instead (docs/schema.md#upgrading-reference-tables).
pub fn upgrade_sql(names: &TableNames) -> Vec<String> {
    let t = &names.executions;
    let mut out = vec![
        format!("ALTER TABLE `{t}` {}, ALGORITHM=INSTANT", column_def()),
        format!(
            "ALTER TABLE `{t}` {}, ALGORITHM=INSTANT",
            priority_columns_def()
        ),
        format!("ALTER TABLE `{t}` {}, ALGORITHM=INSTANT", fair_key_def()),
    ];
    for (_, def) in index_defs(names) {
        out.push(format!(
            "ALTER TABLE `{t}` {def}, ALGORITHM=INPLACE, LOCK=NONE"
        ));
    }
    // The fair claim's keys table (`onestep migrate` creates it with the other tables).
    out.extend(crate::schema::keys_ddl(names));
    // The submit quotas' lock table (docs/semantics.md#quotas).
    out.extend(crate::schema::quotas_ddl(names));
    // The rate-limit buckets table (docs/semantics.md#rate-limits).
    out.extend(crate::schema::buckets_ddl(names));
    // The completion-webhook outbox and its attempts (docs/semantics.md#completion-webhooks).
    out.extend(crate::schema::callbacks_ddl(names));
    // … and, on an outbox created before the started/progress events, their columns.
    out.push(format!(
        "ALTER TABLE `{}` {}, ALGORITHM=INSTANT",
        crate::schema::callbacks_table(names),
        crate::schema::callback_columns_def()
    ));
    out.extend(crate::schema::deliveries_ddl(names));
    // The component store's tables (docs/semantics.md#component-store).
    out.extend(crate::schema::component_chunks_ddl(names));
    out.extend(crate::schema::components_ddl(names));
    // The deployments, their audit events and revision (docs/deployments.md#data-model).
    out.extend(crate::schema::deployments_ddl(names));
    out.extend(crate::schema::deployment_events_ddl(names));
    out.extend(crate::schema::deployment_revision_ddl(names));
    // The durable steps (docs/steps.md).
    out.extend(crate::schema::steps_ddl(names));
    // The component store's holders (docs/semantics.md#component-store).
    out.extend(crate::schema::component_holders_ddl(names));
    // The attempt status `parked` (docs/steps.md#sleep), MySQL's form (MariaDB: `DROP
    // CONSTRAINT` alone).
    out.push(format!(
        "ALTER TABLE `{a}` DROP CHECK `{ck}`, ADD CONSTRAINT `{ck}` CHECK (status IN ({})) \
         NOT ENFORCED, ALGORITHM=INPLACE, LOCK=NONE",
        crate::schema::ATTEMPT_STATUSES,
        a = names.attempts,
        ck = names.ck_attempt_status(),
    ));
    out
}

/// The command that upgrades `names` on the server `opts` points at, for the warning at open:
/// the DSN rebuilt from its parts with the password (if any) as the placeholder `PASSWORD`.
pub(crate) fn upgrade_command(opts: &mysql_async::Opts, names: &TableNames) -> String {
    let user = opts.user().unwrap_or("root");
    let auth = if opts.pass().is_some_and(|p| !p.is_empty()) {
        format!("{user}:PASSWORD")
    } else {
        user.to_owned()
    };
    format!(
        "onestep migrate --upgrade --dsn 'mysql://{auth}@{}:{}/{}' --table {} --attempts-table {}",
        opts.ip_or_hostname(),
        opts.tcp_port(),
        opts.db_name().unwrap_or_default(),
        names.executions,
        names.attempts
    )
}

/// Whether `table` of the current database has the column (`COLUMNS`) or index (`STATISTICS`)
/// `name`.
async fn has(conn: &mut Conn, view: Catalog, table: &str, name: &str) -> OpResult<bool> {
    let (view, column) = match view {
        Catalog::Column => ("COLUMNS", "COLUMN_NAME"),
        Catalog::Index => ("STATISTICS", "INDEX_NAME"),
    };
    let sql = format!(
        "SELECT COUNT(*) FROM information_schema.{view} \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND {column} = ?"
    );
    let n: Option<i64> = conn.exec_first(sql, (table, name)).await?;
    Ok(n.unwrap_or(0) > 0)
}

#[derive(Clone, Copy)]
enum Catalog {
    Column,
    Index,
}

pub(crate) async fn column_exists(conn: &mut Conn, table: &str, column: &str) -> OpResult<bool> {
    has(conn, Catalog::Column, table, column).await
}

async fn index_exists(conn: &mut Conn, table: &str, index: &str) -> OpResult<bool> {
    has(conn, Catalog::Index, table, index).await
}

/// How many columns `index` of `table` has (0 when it does not exist).
async fn index_width(conn: &mut Conn, table: &str, index: &str) -> OpResult<i64> {
    let n: Option<i64> = conn
        .exec_first(
            "SELECT COUNT(*) FROM information_schema.STATISTICS \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND INDEX_NAME = ?",
            (table, index),
        )
        .await?;
    Ok(n.unwrap_or(0))
}

/// Columns of [`IX_STATUS_COLUMNS`].
const IX_STATUS_WIDTH: i64 = 5;

/// Whether the executions table has the column and both its indexes (ours, or upgraded); the
/// status index is not needed for this.
pub(crate) async fn is_upgraded(conn: &mut Conn, names: &TableNames) -> OpResult<bool> {
    let t = &names.executions;
    Ok(column_exists(conn, t, CLAIMABLE_COLUMN).await?
        && (index_exists(conn, t, &ix_claimable(names)).await?
            || index_exists(conn, t, &ix_claim_priority(names)).await?)
        && index_exists(conn, t, &ix_expiry(names)).await?)
}

/// Whether the executions table has the index `index`.
pub(crate) async fn has_index(conn: &mut Conn, names: &TableNames, index: &str) -> OpResult<bool> {
    index_exists(conn, &names.executions, index).await
}

/// Whether the executions table has both `priority` and `fairness_key`.
pub(crate) async fn has_priority_columns(conn: &mut Conn, names: &TableNames) -> OpResult<bool> {
    Ok(column_exists(conn, &names.executions, "priority").await?
        && column_exists(conn, &names.executions, "fairness_key").await?)
}

/// Whether the executions table has the fair claim's column and indexes (the keys table is
/// checked by the caller).
pub(crate) async fn has_fair_schema(conn: &mut Conn, names: &TableNames) -> OpResult<bool> {
    let t = &names.executions;
    Ok(column_exists(conn, t, FAIR_KEY_COLUMN).await?
        && index_exists(conn, t, &ix_fair(names)).await?
        && index_exists(conn, t, &ix_fair_running(names)).await?)
}

/// Whether the executions table has the filtered-list indexes, the status index at its full
/// width.
pub(crate) async fn has_list_indexes(conn: &mut Conn, names: &TableNames) -> OpResult<bool> {
    let t = &names.executions;
    Ok(
        index_width(conn, t, &ix_status(names)).await? >= IX_STATUS_WIDTH
            && index_exists(conn, t, &ix_status_list(names)).await?
            && index_exists(conn, t, &ix_task_list(names)).await?,
    )
}

/// Runs `ALTER TABLE t <clause>, <form>` with the first form the server accepts.
async fn alter_online(
    conn: &mut Conn,
    table: &str,
    clause: &str,
    forms: &[&str],
) -> OpResult<String> {
    for form in forms {
        let sql = if form.is_empty() {
            format!("ALTER TABLE `{table}` {clause}")
        } else {
            format!("ALTER TABLE `{table}` {clause}, {form}")
        };
        match conn.query_drop(sql).await {
            Ok(()) => {
                return Ok(if form.is_empty() {
                    "default".to_owned()
                } else {
                    (*form).to_owned()
                });
            }
            Err(mysql_async::Error::Server(e))
                if UNSUPPORTED_ALGORITHM.contains(&e.code) && !form.is_empty() =>
            {
                tracing::info!(table, form, error = %e.message, "online DDL form refused; trying the next");
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(OpError::Domain(crate::errors::backend_error(
        "upgrade",
        onestep_core::ConnectorKind::Misconfigured,
        &format!("the server refused every form of ALTER TABLE `{table}` {clause}"),
        &[],
    )))
}

/// The name of the attempts table's status `CHECK` when it does not allow `parked`
/// (docs/steps.md#sleep): a check whose clause names `lease_lost` but not `parked`. `None` when
/// the table has no such check (ours, or upgraded).
pub(crate) async fn stale_status_check(
    conn: &mut Conn,
    attempts: &str,
) -> OpResult<Option<String>> {
    let rows: Vec<(String, String)> = conn
        .exec(
            "SELECT cc.CONSTRAINT_NAME, cc.CHECK_CLAUSE \
             FROM information_schema.TABLE_CONSTRAINTS tc \
             JOIN information_schema.CHECK_CONSTRAINTS cc \
               ON cc.CONSTRAINT_SCHEMA = tc.CONSTRAINT_SCHEMA \
              AND cc.CONSTRAINT_NAME = tc.CONSTRAINT_NAME \
             WHERE tc.TABLE_SCHEMA = DATABASE() AND tc.TABLE_NAME = ? \
               AND tc.CONSTRAINT_TYPE = 'CHECK'",
            (attempts,),
        )
        .await?;
    Ok(rows
        .into_iter()
        .find(|(_, clause)| clause.contains("lease_lost") && !clause.contains("parked"))
        .map(|(name, _)| name))
}

/// Lets the attempts table hold `parked` without copying it (docs/schema.md#upgrading-reference-tables):
/// MySQL replaces the status `CHECK` by the widened list `NOT ENFORCED` (an enforced new check
/// validates every row, i.e. copies the table); MariaDB, which has no `NOT ENFORCED`, drops it.
async fn allow_parked(conn: &mut Conn, attempts: &str, check: &str) -> OpResult<UpgradeStep> {
    let version: Option<String> = conn.query_first("SELECT VERSION()").await?;
    let mariadb = version.is_some_and(|v| v.to_ascii_lowercase().contains("mariadb"));
    let (clause, added) = if mariadb {
        (
            format!("DROP CONSTRAINT `{check}`"),
            format!("status 'parked' on {attempts} (its status CHECK {check} dropped)"),
        )
    } else {
        (
            format!(
                "DROP CHECK `{check}`, ADD CONSTRAINT `{check}` CHECK (status IN ({})) NOT ENFORCED",
                crate::schema::ATTEMPT_STATUSES
            ),
            format!(
                "status 'parked' on {attempts} (its status CHECK {check} widened, NOT ENFORCED)"
            ),
        )
    };
    let form = alter_online(conn, attempts, &clause, &["ALGORITHM=INPLACE, LOCK=NONE"]).await?;
    Ok(UpgradeStep { added, form })
}

async fn upgrade_on(conn: &mut Conn, names: &TableNames) -> OpResult<Vec<UpgradeStep>> {
    let t = &names.executions;
    let mut steps = Vec::new();
    if !column_exists(conn, t, CLAIMABLE_COLUMN).await? {
        let form = alter_online(
            conn,
            t,
            &column_def(),
            &["ALGORITHM=INSTANT", "ALGORITHM=INPLACE, LOCK=NONE", ""],
        )
        .await?;
        steps.push(UpgradeStep {
            added: format!("column {CLAIMABLE_COLUMN}"),
            form,
        });
    }
    if !has_priority_columns(conn, names).await? {
        let form = alter_online(
            conn,
            t,
            priority_columns_def(),
            &["ALGORITHM=INSTANT", "ALGORITHM=INPLACE, LOCK=NONE", ""],
        )
        .await?;
        steps.push(UpgradeStep {
            added: "columns priority, fairness_key".to_owned(),
            form,
        });
    }
    if !column_exists(conn, t, FAIR_KEY_COLUMN).await? {
        let form = alter_online(
            conn,
            t,
            &fair_key_def(),
            &["ALGORITHM=INSTANT", "ALGORITHM=INPLACE, LOCK=NONE", ""],
        )
        .await?;
        steps.push(UpgradeStep {
            added: format!("column {FAIR_KEY_COLUMN}"),
            form,
        });
    }
    // Tables an older onestep created have the status index over (namespace, task_name, status)
    // only: it is replaced by the wider one in one in-place ALTER (both halves commit together,
    // and reads keep the old index until then). Only our own index is ever dropped.
    let status = ix_status(names);
    let width = index_width(conn, t, &status).await?;
    if width > 0 && width < IX_STATUS_WIDTH {
        let clause = format!("DROP INDEX `{status}`, ADD INDEX `{status}` ({IX_STATUS_COLUMNS})");
        let form = alter_online(conn, t, &clause, &["ALGORITHM=INPLACE, LOCK=NONE", ""]).await?;
        steps.push(UpgradeStep {
            added: format!("index {status} (widened to {IX_STATUS_COLUMNS})"),
            form,
        });
    }
    for (index, def) in index_defs(names) {
        if !index_exists(conn, t, &index).await? {
            let form = alter_online(conn, t, &def, &["ALGORITHM=INPLACE, LOCK=NONE", ""]).await?;
            steps.push(UpgradeStep {
                added: format!("index {index}"),
                form,
            });
        }
    }
    // An outbox created before the started/progress events lacks their columns.
    let cb = crate::schema::callbacks_table(names);
    if crate::schema::table_exists(conn, &cb).await?
        && !column_exists(conn, &cb, "progress_after").await?
    {
        let form = alter_online(
            conn,
            &cb,
            crate::schema::callback_columns_def(),
            &["ALGORITHM=INSTANT", "ALGORITHM=INPLACE, LOCK=NONE", ""],
        )
        .await?;
        steps.push(UpgradeStep {
            added: format!(
                "columns started_done, progress_seq, progress_sent_at, progress_after on {cb}"
            ),
            form,
        });
    }
    // The attempt status `parked` (docs/steps.md#sleep).
    if let Some(check) = stale_status_check(conn, &names.attempts).await? {
        steps.push(allow_parked(conn, &names.attempts, &check).await?);
    }
    Ok(steps)
}

impl MySqlBackend {
    /// `onestep migrate --upgrade`: creates the table pair if missing, then adds what the
    /// executions table lacks of the `claimable` column and its indexes and of the status index
    /// (module docs), under the
    /// same DDL locks as table creation. Idempotent: on upgraded tables or tables this crate
    /// created it changes nothing and reports no step.
    pub async fn upgrade(opts: StoreOptions) -> Result<UpgradeReport, ExecutionError> {
        upgrade_then_close(&MySqlBackend::open(for_ddl(opts)).await?).await
    }

    /// The upgrade of [`Self::upgrade`] over this open backend (tables already created).
    pub(crate) async fn upgrade_tables(&self) -> Result<UpgradeReport, ExecutionError> {
        let backend = self;
        let names = backend.inner.names.clone();
        let run = async {
            let mut conn = backend.inner.pool.get_conn().await?;
            get_lock(&mut conn, GLOBAL_DDL_LOCK).await?;
            let pair = names.pair_lock();
            let outcome = match get_lock(&mut conn, &pair).await {
                Ok(()) => {
                    let r = upgrade_on(&mut conn, &names).await;
                    release_lock(&mut conn, &pair).await;
                    r
                }
                Err(e) => Err(e),
            };
            release_lock(&mut conn, GLOBAL_DDL_LOCK).await;
            outcome
        }
        .await;
        let created = backend.inner.report.created.clone();
        let steps = run.map_err(|e| backend.error(e, "upgrade"))?;
        Ok(UpgradeReport { created, steps })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warning_names_the_exact_command_without_the_password() {
        let parsed = crate::dsn::parse_dsn("mysql://app:s3cret@db.example:3307/jobs").expect("dsn");
        let names = TableNames::new("ex", "ex_attempts").expect("names");
        assert_eq!(
            upgrade_command(&parsed.opts, &names),
            "onestep migrate --upgrade --dsn 'mysql://app:PASSWORD@db.example:3307/jobs' \
             --table ex --attempts-table ex_attempts"
        );
        let parsed = crate::dsn::parse_dsn("mysql://root@127.0.0.1/db").expect("dsn");
        assert!(
            upgrade_command(&parsed.opts, &TableNames::default()).contains(
                "--dsn 'mysql://root@127.0.0.1:3306/db' --table onestep_executions \
                 --attempts-table onestep_execution_attempts"
            )
        );
    }

    #[test]
    fn manual_statements_are_additive_and_online() {
        let sql = upgrade_sql(&TableNames::default());
        assert_eq!(sql.len(), 25);
        assert!(sql[24].starts_with(
            "ALTER TABLE `onestep_execution_attempts` DROP CHECK \
             `ck_onestep_execution_attempts_status`, ADD CONSTRAINT"
        ));
        assert!(sql[24].contains("'parked')) NOT ENFORCED"));
        assert!(sql[14].starts_with("CREATE TABLE `onestep_executions_callbacks`"));
        assert!(sql[15].starts_with(
            "ALTER TABLE `onestep_executions_callbacks` ADD COLUMN started_done TINYINT"
        ));
        assert!(sql[15].ends_with("ALGORITHM=INSTANT"));
        assert!(sql[16].starts_with("CREATE TABLE `onestep_executions_deliveries`"));
        assert!(sql[11].starts_with("CREATE TABLE `onestep_executions_keys`"));
        assert!(sql[12].starts_with("CREATE TABLE `onestep_executions_quotas`"));
        assert!(sql[13].contains("`onestep_executions_buckets`"));
        assert!(sql[17].starts_with("CREATE TABLE `onestep_executions_component_chunks`"));
        assert!(sql[18].starts_with("CREATE TABLE `onestep_executions_components`"));
        assert!(sql[19].starts_with("CREATE TABLE `onestep_executions_deployments`"));
        assert!(sql[19].contains("UNIQUE KEY `uq_onestep_executions_deployments_active`"));
        assert!(sql[20].starts_with("CREATE TABLE `onestep_executions_deployment_events`"));
        assert!(sql[21].starts_with("CREATE TABLE `onestep_executions_deployment_revision`"));
        assert!(sql[22].starts_with("CREATE TABLE `onestep_executions_steps`"));
        assert!(sql[23].starts_with("CREATE TABLE `onestep_executions_component_holders`"));
        assert!(sql[0].starts_with("ALTER TABLE `onestep_executions` ADD COLUMN claimable"));
        assert!(sql[0].contains("VIRTUAL, ALGORITHM=INSTANT"));
        assert!(sql[1].contains("ADD COLUMN priority TINYINT NOT NULL DEFAULT '5'"));
        assert!(sql[1].contains("ADD COLUMN fairness_key VARCHAR(255)"));
        assert!(sql[1].ends_with("ALGORITHM=INSTANT"));
        assert!(sql[2].contains("ADD COLUMN fair_key VARBINARY(255)"));
        assert!(sql[2].ends_with("VIRTUAL, ALGORITHM=INSTANT"));
        assert!(sql[3].contains(
            "ADD INDEX `ix_onestep_executions_claim_priority` (namespace, task_name, claimable, \
             priority, available_at, created_at, id)"
        ));
        assert!(sql[4].contains("ADD INDEX `ix_onestep_executions_expiry`"));
        assert!(sql[5].contains("ADD INDEX `ix_onestep_executions_status`"));
        assert!(sql[6].contains("ADD INDEX `ix_onestep_executions_status_list`"));
        assert!(sql[7].contains("ADD INDEX `ix_onestep_executions_task_list`"));
        assert!(sql[8].contains("ADD INDEX `ix_onestep_executions_fair` (task_name, claimable"));
        assert!(sql[9].contains("ADD INDEX `ix_onestep_executions_fair_running`"));
        for s in &sql[3..10] {
            assert!(s.ends_with("ALGORITHM=INPLACE, LOCK=NONE"), "{s}");
        }
        // Additive: the one DROP replaces the attempts' status CHECK by a wider one.
        assert!(
            sql[..24]
                .iter()
                .all(|s| !s.contains("DROP") && !s.contains("MODIFY"))
        );
    }
}
