//! Upgrading reference-created tables on PostgreSQL (docs/postgres.md#upgrading-reference-tables):
//! the reference's partial claim and lease indexes already leave finished history out of the
//! claim, so only our additions are missing there — `ix_<T>_expiry`, the range of the expiry
//! maintenance, `ix_<T>_status`, the dashboard's grouped counts and the task+status list, and
//! `ix_<T>_status_list` and `ix_<T>_task_list`, the status-only and task-only lists. Each is
//! built with
//! `CREATE INDEX CONCURRENTLY` (reads and writes go on during the build; outside any
//! transaction, as PostgreSQL requires). A concurrent build that was interrupted leaves an
//! invalid index behind; the upgrade drops it (`DROP INDEX CONCURRENTLY`) and builds it again.

use onestep_core::ExecutionError;
use onestep_core::names::TableNames;
use tokio_postgres::GenericClient;

use crate::backend::PgBackend;
use crate::dsn::ParsedDsn;
use crate::errors::OpResult;
use crate::schema::{
    ATTEMPTS_FILLFACTOR, CK_PRIORITY, IX_STATUS_WIDTH, claim_priority_index_sql, expiry_index_sql,
    fair_index_sql, fair_running_index_sql, has_priority_columns, index_info, index_width,
    ix_claim_priority, ix_expiry, ix_fair, ix_fair_running, ix_status, ix_status_list,
    ix_status_wide, ix_task_list, pair_lock_key, q, status_index_named, status_index_sql,
    status_list_index_sql, task_list_index_sql,
};
pub use onestep_core::backend::{UpgradeReport, UpgradeStep};
use onestep_core::store::{StoreOptions, for_ddl, upgrade_then_close};

/// The columns the upgrade adds first (docs/postgres.md#upgrading-reference-tables): a column
/// with a constant default changes the catalog only (PostgreSQL 11+), so each `ADD COLUMN`
/// holds its lock for an instant; the CHECK on `priority` is added `NOT VALID` and validated
/// by a second statement, which reads the table while reads and writes go on.
fn column_sql(names: &TableNames) -> [String; 3] {
    let t = q(&names.executions);
    [
        format!(
            "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS priority SMALLINT DEFAULT 5 NOT NULL, \
             ADD COLUMN IF NOT EXISTS fairness_key VARCHAR(255)"
        ),
        format!(
            "ALTER TABLE {t} ADD CONSTRAINT {CK_PRIORITY} CHECK (priority BETWEEN 0 AND 9) NOT VALID"
        ),
        format!("ALTER TABLE {t} VALIDATE CONSTRAINT {CK_PRIORITY}"),
    ]
}

/// Whether the executions table has the CHECK on `priority`, and whether it is validated.
async fn priority_check<C: GenericClient>(c: &C, table: &str) -> OpResult<Option<bool>> {
    let row = c
        .query_opt(
            "SELECT k.convalidated FROM pg_catalog.pg_constraint k \
             JOIN pg_catalog.pg_class r ON r.oid = k.conrelid \
             JOIN pg_catalog.pg_namespace n ON n.oid = r.relnamespace \
             WHERE n.nspname = current_schema() AND r.relname = $1 AND k.conname = $2",
            &[&table, &CK_PRIORITY],
        )
        .await?;
    Ok(match row {
        Some(r) => Some(r.try_get(0)?),
        None => None,
    })
}

/// Adds what the table lacks of the priority columns and their CHECK; the steps taken.
async fn add_priority_columns(
    client: &tokio_postgres::Client,
    names: &TableNames,
) -> OpResult<Vec<UpgradeStep>> {
    let t = &names.executions;
    let [columns, check, validate] = column_sql(names);
    let mut steps = Vec::new();
    if !has_priority_columns(client, t).await? {
        client.batch_execute(&columns).await?;
        steps.push(UpgradeStep {
            added: "columns priority, fairness_key".to_owned(),
            form: "ADD COLUMN (catalog only)".to_owned(),
        });
    }
    let state = priority_check(client, t).await?;
    if state.is_none() {
        client.batch_execute(&check).await?;
    }
    if state != Some(true) {
        client.batch_execute(&validate).await?;
        steps.push(UpgradeStep {
            added: format!("constraint {CK_PRIORITY}"),
            form: "NOT VALID, then VALIDATE".to_owned(),
        });
    }
    Ok(steps)
}

/// The two statements that let the attempts table hold `parked` (docs/steps.md#sleep): the
/// status `CHECK` replaced by the widened list `NOT VALID` (the catalog only, an instant's
/// lock), then validated while reads and writes go on.
fn parked_status_sql(names: &TableNames) -> [String; 2] {
    let a = q(&names.attempts);
    let ck = crate::schema::CK_ATTEMPT_STATUS;
    [
        format!(
            "ALTER TABLE {a} DROP CONSTRAINT {ck}, ADD CONSTRAINT {ck} CHECK (status IN ({})) \
             NOT VALID",
            crate::schema::ATTEMPT_STATUSES
        ),
        format!("ALTER TABLE {a} VALIDATE CONSTRAINT {ck}"),
    ]
}

/// The name of the attempts table's status `CHECK` when it does not allow `parked`: a check
/// whose definition names `lease_lost` but not `parked`. `None` when there is none.
pub(crate) async fn stale_status_check<C: GenericClient>(
    c: &C,
    attempts: &str,
) -> OpResult<Option<String>> {
    let rows = c
        .query(
            "SELECT k.conname::text, pg_catalog.pg_get_constraintdef(k.oid) \
             FROM pg_catalog.pg_constraint k \
             JOIN pg_catalog.pg_class r ON r.oid = k.conrelid \
             JOIN pg_catalog.pg_namespace n ON n.oid = r.relnamespace \
             WHERE n.nspname = current_schema() AND r.relname = $1 AND k.contype = 'c'",
            &[&attempts],
        )
        .await?;
    for row in rows {
        let (name, def): (String, String) = (row.try_get(0)?, row.try_get(1)?);
        if def.contains("lease_lost") && !def.contains("parked") {
            return Ok(Some(name));
        }
    }
    Ok(None)
}

/// Widens the attempts table's status `CHECK` to `parked` when it predates it.
async fn allow_parked(
    client: &tokio_postgres::Client,
    names: &TableNames,
) -> OpResult<Option<UpgradeStep>> {
    let Some(check) = stale_status_check(client, &names.attempts).await? else {
        return Ok(None);
    };
    let [replace, validate] = parked_status_sql(names);
    let (replace, validate) = if check == crate::schema::CK_ATTEMPT_STATUS {
        (replace, validate)
    } else {
        let ck = crate::schema::CK_ATTEMPT_STATUS;
        (
            replace.replace(
                &format!("DROP CONSTRAINT {ck}"),
                &format!("DROP CONSTRAINT {}", q(&check)),
            ),
            validate,
        )
    };
    client.batch_execute(&replace).await?;
    client.batch_execute(&validate).await?;
    Ok(Some(UpgradeStep {
        added: format!(
            "status 'parked' on {} (its status CHECK widened)",
            names.attempts
        ),
        form: "NOT VALID, then VALIDATE".to_owned(),
    }))
}

/// The indexes the upgrade adds: (name, `CREATE INDEX CONCURRENTLY …`).
fn index_defs(names: &TableNames) -> [(String, String); 8] {
    [
        (
            ix_claim_priority(names),
            claim_priority_index_sql(names, true),
        ),
        (ix_fair(names), fair_index_sql(names, true)),
        (ix_fair_running(names), fair_running_index_sql(names, true)),
        (
            crate::schema::ix_quota(names),
            crate::schema::quota_index_sql(names, true),
        ),
        (ix_expiry(names), expiry_index_sql(names, true)),
        (ix_status(names), status_index_sql(names, true)),
        (ix_status_list(names), status_list_index_sql(names, true)),
        (ix_task_list(names), task_list_index_sql(names, true)),
    ]
}

/// Builds `index` with `sql` (`CREATE INDEX CONCURRENTLY IF NOT EXISTS …`) unless a valid one
/// exists, first dropping an invalid one an interrupted build left; the form taken, or `None`
/// when nothing was done.
async fn build_concurrently(
    client: &tokio_postgres::Client,
    index: &str,
    sql: &str,
) -> OpResult<Option<&'static str>> {
    let form = match index_state(client, index).await? {
        Some(true) => return Ok(None),
        Some(false) => {
            client
                .batch_execute(&format!("DROP INDEX CONCURRENTLY IF EXISTS {}", q(index)))
                .await?;
            "CONCURRENTLY, after dropping an invalid index"
        }
        None => "CONCURRENTLY",
    };
    client.batch_execute(sql).await?;
    Ok(Some(form))
}

/// Tables an older onestep created have `ix_<T>_status` over (namespace, task_name, status)
/// only. PostgreSQL cannot rebuild an index in place without blocking writes, so the wide one
/// is built concurrently as `ix_<T>_status_wide`, the narrow one dropped concurrently, and the
/// new one renamed (a catalog change under a lock that lets reads and writes go on). Each
/// stage is detected on its own, so an interrupted widening resumes.
async fn widen_status_index(
    client: &tokio_postgres::Client,
    names: &TableNames,
) -> OpResult<Option<UpgradeStep>> {
    let (status, wide) = (ix_status(names), ix_status_wide(names));
    let width = index_width(client, &status).await?;
    let wide_state = index_state(client, &wide).await?;
    if width >= IX_STATUS_WIDTH || (width == 0 && wide_state.is_none()) {
        return Ok(None);
    }
    if wide_state != Some(true) {
        build_concurrently(client, &wide, &status_index_named(names, &wide, true)).await?;
    }
    if width > 0 {
        client
            .batch_execute(&format!("DROP INDEX CONCURRENTLY IF EXISTS {}", q(&status)))
            .await?;
    }
    client
        .batch_execute(&format!(
            "ALTER INDEX {} RENAME TO {}",
            q(&wide),
            q(&status)
        ))
        .await?;
    Ok(Some(UpgradeStep {
        added: format!(
            "index {status} (widened to {})",
            crate::schema::IX_STATUS_COLUMNS
        ),
        form: "CONCURRENTLY, then renamed over the narrower index".to_owned(),
    }))
}

/// `ALTER TABLE <A> SET (fillfactor = …)` (docs/postgres.md#attempts-fillfactor).
fn attempts_fillfactor_sql(names: &TableNames) -> String {
    format!(
        "ALTER TABLE {} SET (fillfactor = {ATTEMPTS_FILLFACTOR})",
        q(&names.attempts)
    )
}

/// Sets the attempts table's fillfactor when it has none (the reference's tables, an older
/// onestep's): a storage parameter, so the `ALTER TABLE` takes a `SHARE UPDATE EXCLUSIVE` lock
/// (reads and writes go on), rewrites nothing and applies to the pages filled from now on.
async fn set_attempts_fillfactor<C: GenericClient>(
    c: &C,
    names: &TableNames,
) -> OpResult<Option<UpgradeStep>> {
    let row = c
        .query_opt(
            "SELECT EXISTS (SELECT 1 FROM unnest(r.reloptions) o WHERE o LIKE 'fillfactor=%') \
             FROM pg_catalog.pg_class r \
             JOIN pg_catalog.pg_namespace n ON n.oid = r.relnamespace \
             WHERE n.nspname = current_schema() AND r.relname = $1 AND r.relkind = 'r'",
            &[&names.attempts],
        )
        .await?;
    let has_fillfactor = match row {
        Some(r) => r.try_get::<_, bool>(0)?,
        None => return Ok(None),
    };
    if has_fillfactor {
        return Ok(None);
    }
    c.batch_execute(&attempts_fillfactor_sql(names)).await?;
    Ok(Some(UpgradeStep {
        added: format!("fillfactor {ATTEMPTS_FILLFACTOR} on {}", names.attempts),
        form: "SET (storage parameter: new pages only, nothing rewritten)".to_owned(),
    }))
}

/// The statements an operator can run by hand instead (docs/postgres.md#upgrading-reference-tables).
pub fn upgrade_sql(names: &TableNames) -> Vec<String> {
    column_sql(names)
        .into_iter()
        .chain(index_defs(names).into_iter().map(|(_, sql)| sql))
        .chain(std::iter::once(attempts_fillfactor_sql(names)))
        .chain(crate::schema::keys_ddl(names))
        .chain(crate::schema::buckets_ddl(names))
        .chain(crate::schema::callbacks_ddl(names))
        .chain(std::iter::once(crate::schema::callback_columns_sql(names)))
        .chain(crate::schema::deliveries_ddl(names))
        .chain(crate::schema::component_chunks_ddl(names))
        .chain(crate::schema::components_ddl(names))
        .chain(crate::schema::deployments_ddl(names))
        .chain(crate::schema::deployment_events_ddl(names))
        .chain(crate::schema::deployment_revision_ddl(names))
        .chain(crate::schema::steps_ddl(names))
        .chain(crate::schema::component_holders_ddl(names))
        .chain(crate::schema::listeners_ddl(names))
        // The trigger in the default schema `public` (the upgrade uses the session's own).
        .chain(crate::schema::notify_ddl(names, "public"))
        .chain(parked_status_sql(names))
        .collect()
}

/// `Some(valid)` when the index exists in the current schema.
async fn index_state<C: GenericClient>(c: &C, index: &str) -> OpResult<Option<bool>> {
    Ok(index_info(c, index).await?.map(|i| i.valid))
}

async fn upgrade_on(
    client: &tokio_postgres::Client,
    names: &TableNames,
) -> OpResult<Vec<UpgradeStep>> {
    // The columns first: the claim index needs `priority`.
    let mut steps = add_priority_columns(client, names).await?;
    steps.extend(widen_status_index(client, names).await?);
    for (index, sql) in index_defs(names) {
        if let Some(form) = build_concurrently(client, &index, &sql).await? {
            steps.push(UpgradeStep {
                added: format!("index {index}"),
                form: form.to_owned(),
            });
        }
    }
    steps.extend(set_attempts_fillfactor(client, names).await?);
    // docs/semantics.md#fair-claim: the fairness-keys table (new and empty: the sweep fills
    // it); docs/semantics.md#rate-limits: the buckets table (new and empty: a bucket starts full).
    for (table, ddl) in [
        (
            crate::schema::keys_table(names),
            crate::schema::keys_ddl(names),
        ),
        (
            crate::schema::buckets_table(names),
            crate::schema::buckets_ddl(names),
        ),
        // docs/semantics.md#completion-webhooks: the outbox and its attempts (new and empty).
        (
            crate::schema::callbacks_table(names),
            crate::schema::callbacks_ddl(names),
        ),
        (
            crate::schema::deliveries_table(names),
            crate::schema::deliveries_ddl(names),
        ),
        // docs/semantics.md#component-store: the component store (new and empty).
        (
            crate::schema::component_chunks_table(names),
            crate::schema::component_chunks_ddl(names),
        ),
        (
            crate::schema::components_table(names),
            crate::schema::components_ddl(names),
        ),
        // docs/deployments.md#data-model: the deployments, their events and revision (new and
        // empty).
        (
            crate::schema::deployments_table(names),
            crate::schema::deployments_ddl(names),
        ),
        (
            crate::schema::deployment_events_table(names),
            crate::schema::deployment_events_ddl(names),
        ),
        (
            crate::schema::deployment_revision_table(names),
            crate::schema::deployment_revision_ddl(names),
        ),
        // docs/steps.md: the durable steps (new and empty).
        (
            crate::schema::steps_table(names),
            crate::schema::steps_ddl(names),
        ),
        // docs/semantics.md#component-store: who holds which component (new and empty: a
        // namespace stores its bytes again before it deploys them).
        (
            crate::schema::component_holders_table(names),
            crate::schema::component_holders_ddl(names),
        ),
    ] {
        let present: i64 = client
            .query_one(
                "SELECT count(*) FROM information_schema.tables \
                 WHERE table_schema = current_schema() AND table_name = $1",
                &[&table],
            )
            .await?
            .try_get(0)?;
        if present == 0 {
            for stmt in ddl {
                client.batch_execute(&stmt).await?;
            }
            steps.push(UpgradeStep {
                added: format!("table {table}"),
                form: "CREATE TABLE (new, empty)".to_owned(),
            });
        }
    }
    steps.extend(add_notify_trigger(client, names).await?);
    // An outbox created before the started/progress events lacks their columns.
    if !crate::schema::has_callback_columns(client, names).await? {
        client
            .batch_execute(&crate::schema::callback_columns_sql(names))
            .await?;
        steps.push(UpgradeStep {
            added: format!(
                "columns started_done, progress_seq, progress_sent_at, progress_after on {}",
                crate::schema::callbacks_table(names)
            ),
            form: "ADD COLUMN (catalog only)".to_owned(),
        });
    }
    // The attempt status `parked` (docs/steps.md#sleep).
    steps.extend(allow_parked(client, names).await?);
    Ok(steps)
}

/// Adds the listeners table and the notify trigger (docs/postgres.md#change-notifications) when
/// the executions table lacks the trigger: one transaction whose `CREATE TRIGGER` takes a
/// `SHARE ROW EXCLUSIVE` lock on the executions table for an instant (writes wait for it, reads
/// go on); it gives up after 10 s behind a long transaction rather than hold writers longer,
/// and the upgrade can be run again.
async fn add_notify_trigger(
    client: &tokio_postgres::Client,
    names: &TableNames,
) -> OpResult<Option<UpgradeStep>> {
    if crate::schema::has_notify_trigger(client, names).await? {
        return Ok(None);
    }
    let schema = crate::schema::current_schema(client).await?;
    client.batch_execute("BEGIN").await?;
    let run = async {
        client
            .batch_execute("SET LOCAL lock_timeout = '10s'")
            .await?;
        for stmt in crate::schema::listeners_ddl(names) {
            client.batch_execute(&stmt).await?;
        }
        let present: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_catalog.pg_trigger g \
                 JOIN pg_catalog.pg_class r ON r.oid = g.tgrelid \
                 JOIN pg_catalog.pg_namespace n ON n.oid = r.relnamespace \
                 WHERE n.nspname = current_schema() AND r.relname = $1 AND g.tgname = $2",
                &[&names.executions, &crate::schema::NOTIFY_TRIGGER],
            )
            .await?
            .try_get(0)?;
        let ddl = crate::schema::notify_ddl(names, &schema);
        // The function is (re)created either way; the trigger only when missing.
        let skip = if present > 0 { 1 } else { 0 };
        for stmt in ddl.iter().take(ddl.len() - skip) {
            client.batch_execute(stmt).await?;
        }
        Ok::<_, crate::errors::OpError>(())
    }
    .await;
    match run {
        Ok(()) => client.batch_execute("COMMIT").await?,
        Err(e) => {
            let _ = client.batch_execute("ROLLBACK").await;
            return Err(e);
        }
    }
    Ok(Some(UpgradeStep {
        added: format!(
            "table {} and trigger {} on {}",
            crate::schema::listeners_table(names),
            crate::schema::NOTIFY_TRIGGER,
            names.executions
        ),
        form: "CREATE TRIGGER (an instant's SHARE ROW EXCLUSIVE lock, lock_timeout 10 s)"
            .to_owned(),
    }))
}

/// The command that upgrades `names` on the server `parsed` points at, for the warning at open
/// and `onestep check --connect`: the DSN rebuilt from its parts, a password (if any) shown as
/// the placeholder `PASSWORD`.
pub(crate) fn upgrade_command(parsed: &ParsedDsn, names: &TableNames) -> String {
    let config = &parsed.config;
    let user = config.get_user().unwrap_or("postgres");
    let auth = if config.get_password().is_some_and(|p| !p.is_empty()) {
        format!("{user}:PASSWORD")
    } else {
        user.to_owned()
    };
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "localhost".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "onestep migrate --upgrade --dsn 'postgresql://{auth}@{host}:{port}/{}' --table {} --attempts-table {}",
        parsed.database, names.executions, names.attempts
    )
}

impl PgBackend {
    /// `onestep migrate --upgrade`: creates the table pair if missing, then builds the indexes
    /// the executions table lacks (module docs) while holding the pair's advisory lock (the key
    /// table creation takes, so two upgrades, or an upgrade and a creator, do not interleave).
    /// Idempotent: on tables this crate created it changes nothing and reports no step.
    pub async fn upgrade(opts: StoreOptions) -> Result<UpgradeReport, ExecutionError> {
        upgrade_then_close(&PgBackend::open(for_ddl(opts)).await?).await
    }

    /// The upgrade of [`Self::upgrade`] over this open backend (tables already created).
    pub(crate) async fn upgrade_tables(&self) -> Result<UpgradeReport, ExecutionError> {
        let backend = self;
        let names = backend.tables().clone();
        let key = pair_lock_key(&names);
        let run = async {
            let conn = backend.inner.pool.get().await?;
            let client: &tokio_postgres::Client = &conn;
            client
                .execute("SELECT pg_advisory_lock($1)", &[&key])
                .await?;
            let outcome = upgrade_on(client, &names).await;
            // A failed unlock is harmless: the session lock ends with the connection, which
            // close() drops.
            let _ = client
                .execute("SELECT pg_advisory_unlock($1)", &[&key])
                .await;
            outcome
        }
        .await;
        let created = backend.schema_report().created.clone();
        let steps = run.map_err(|e| backend.error(e, "upgrade"))?;
        Ok(UpgradeReport { created, steps })
    }
}

/// For benchmarks and tests (`onestep bench --reference-tables`): creates the table pair if
/// missing, as the reference creates it — our DDL without the priority columns and the indexes
/// this module adds, with the reference's claim index.
/// Tables that already existed are left as they are. Returns the tables created.
pub async fn create_reference_shaped(opts: StoreOptions) -> Result<Vec<String>, ExecutionError> {
    let backend = PgBackend::open(for_ddl(opts)).await?;
    let names = backend.tables().clone();
    let created = backend.schema_report().created.clone();
    let run = async {
        if created.contains(&names.executions) {
            let conn = backend.inner.pool.get().await?;
            for (index, _) in index_defs(&names) {
                conn.batch_execute(&format!("DROP INDEX IF EXISTS {}", q(&index)))
                    .await?;
            }
            // The reference's attempts table has the default fillfactor.
            conn.batch_execute(&format!(
                "ALTER TABLE {} RESET (fillfactor)",
                q(&names.attempts)
            ))
            .await?;
            // The reference's columns and claim index.
            let t = q(&names.executions);
            conn.batch_execute(&format!(
                "ALTER TABLE {t} DROP COLUMN priority, DROP COLUMN fairness_key"
            ))
            .await?;
            conn.batch_execute(&format!(
                "CREATE INDEX {} ON {t} (namespace, task_name, available_at, created_at, id) \
                 WHERE status IN ('queued', 'retrying')",
                q(&onestep_core::names::derived_name(
                    "ix_",
                    &names.executions,
                    "claim",
                    crate::schema::PG_NAME_LIMIT
                ))
            ))
            .await?;
        }
        Ok::<_, crate::errors::OpError>(())
    }
    .await;
    if let Err(e) = run {
        let _ = backend.close().await;
        return Err(backend.error(e, "migrate"));
    }
    backend.close().await?;
    Ok(created)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_hides_the_password() {
        let parsed =
            crate::dsn::parse_dsn("postgresql://app:s3cret@db.example:6432/jobs").expect("dsn");
        let cmd = upgrade_command(&parsed, &TableNames::default());
        assert_eq!(
            cmd,
            "onestep migrate --upgrade --dsn 'postgresql://app:PASSWORD@db.example:6432/jobs' \
             --table onestep_executions --attempts-table onestep_execution_attempts"
        );
        assert!(!cmd.contains("s3cret"));
    }

    #[test]
    fn the_statements_are_concurrent_and_guarded() {
        let sql = upgrade_sql(&TableNames::default());
        assert_eq!(sql.len(), 37);
        assert!(sql[35].contains("DROP CONSTRAINT ck_onestep_attempt_status, ADD CONSTRAINT"));
        assert!(sql[35].ends_with("NOT VALID"));
        assert!(sql[36].ends_with("VALIDATE CONSTRAINT ck_onestep_attempt_status"));
        assert!(sql[0].contains("ADD COLUMN IF NOT EXISTS priority SMALLINT DEFAULT 5 NOT NULL"));
        assert!(sql[0].contains("ADD COLUMN IF NOT EXISTS fairness_key VARCHAR(255)"));
        assert!(sql[1].ends_with("CHECK (priority BETWEEN 0 AND 9) NOT VALID"));
        assert!(sql[2].contains("VALIDATE CONSTRAINT ck_onestep_execution_priority"));
        assert_eq!(
            sql[11],
            "ALTER TABLE \"onestep_execution_attempts\" SET (fillfactor = 70)"
        );
        assert!(sql[12].starts_with("CREATE TABLE IF NOT EXISTS \"onestep_executions_keys\""));
        assert!(sql[13].starts_with("CREATE INDEX IF NOT EXISTS "));
        assert!(sql[14].starts_with("CREATE TABLE IF NOT EXISTS \"onestep_executions_buckets\""));
        assert!(sql[15].starts_with("CREATE TABLE IF NOT EXISTS \"onestep_executions_callbacks\""));
        assert!(sql[16].contains("\"ix_onestep_executions_callbacks_due\""));
        assert!(sql[17].starts_with(
            "ALTER TABLE \"onestep_executions_callbacks\" ADD COLUMN IF NOT EXISTS started_done"
        ));
        assert!(sql[17].contains("ADD COLUMN IF NOT EXISTS progress_after"));
        assert!(
            sql[18].starts_with("CREATE TABLE IF NOT EXISTS \"onestep_executions_deliveries\"")
        );
        assert!(
            sql[19]
                .starts_with("CREATE TABLE IF NOT EXISTS \"onestep_executions_component_chunks\"")
        );
        assert!(
            sql[20].starts_with("CREATE TABLE IF NOT EXISTS \"onestep_executions_components\"")
        );
        assert!(
            sql[21].starts_with("CREATE TABLE IF NOT EXISTS \"onestep_executions_deployments\"")
        );
        assert!(sql[22].contains("\"uq_onestep_executions_deployments_active\""));
        assert!(sql[22].ends_with("WHERE state = 'active'"));
        assert!(sql[25].contains("\"ix_onestep_executions_deployments_digest\""));
        assert!(
            sql[26]
                .starts_with("CREATE TABLE IF NOT EXISTS \"onestep_executions_deployment_events\"")
        );
        assert!(sql[27].contains("\"ix_onestep_executions_deployment_events_task\""));
        assert!(
            sql[28].starts_with(
                "CREATE TABLE IF NOT EXISTS \"onestep_executions_deployment_revision\""
            )
        );
        assert!(sql[29].starts_with("CREATE TABLE IF NOT EXISTS \"onestep_executions_steps\""));
        assert!(
            sql[30]
                .starts_with("CREATE TABLE IF NOT EXISTS \"onestep_executions_component_holders\"")
        );
        assert!(sql[31].contains("\"ix_onestep_executions_component_holders_digest\""));
        assert!(sql[32].starts_with("CREATE TABLE IF NOT EXISTS \"onestep_executions_listeners\""));
        assert!(sql[33].starts_with(
            "CREATE OR REPLACE FUNCTION \"public\".\"onestep_executions_notify\"() RETURNS trigger"
        ));
        assert!(sql[33].contains("SECURITY DEFINER SET search_path = pg_catalog, pg_temp"));
        assert!(sql[33].contains("FROM \"public\".\"onestep_executions_listeners\""));
        assert!(sql[33].contains("pg_notify('onestep_executions_changes', "));
        assert_eq!(
            sql[34],
            "CREATE TRIGGER onestep_notify AFTER UPDATE ON \"onestep_executions\" REFERENCING NEW \
             TABLE AS onestep_new FOR EACH STATEMENT EXECUTE FUNCTION \
             \"public\".\"onestep_executions_notify\"()"
        );
        let sql = &sql[3..11];
        for s in sql {
            assert!(
                s.starts_with("CREATE INDEX CONCURRENTLY IF NOT EXISTS "),
                "{s}"
            );
        }
        assert!(sql[0].contains(
            "(namespace, task_name, priority, available_at, created_at, id) \
             WHERE status IN ('queued', 'retrying')"
        ));
        assert!(sql[1].contains(
            "(task_name, (COALESCE(fairness_key, namespace)), namespace, priority, available_at, \
             created_at, id) WHERE status IN ('queued', 'retrying')"
        ));
        assert!(sql[2].contains("WHERE status IN ('running', 'cancel_requested')"));
        assert!(sql[3].contains("\"ix_onestep_executions_quota\""));
        assert!(sql[3].contains("WHERE status IN ('queued', 'retrying')"));
        assert!(sql[4].contains("(expires_at, id)"));
        assert!(sql[5].contains("(namespace, task_name, status, created_at DESC, id DESC)"));
        assert!(sql[6].contains("\"ix_onestep_executions_status_list\""));
        assert!(sql[6].contains("(namespace, status, created_at DESC, id DESC)"));
        assert!(sql[7].contains("(namespace, task_name, created_at DESC, id DESC)"));
    }
}
