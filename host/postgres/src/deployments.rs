//! Task deployments (docs/deployments.md#data-model): [`DeploymentStore`] over `<T>_deployments`
//! (one row per version), `<T>_deployment_events` (the audit trail) and
//! `<T>_deployment_revision` (the change marker, one row). Every change is one transaction that
//! first upserts the revision row (`INSERT … ON CONFLICT DO UPDATE`, which locks it until
//! commit), so changes are serialised and commit in revision order; each later statement reads a
//! fresh READ COMMITTED snapshot. It then plans with [`onestep_core::deployments`] and writes the
//! rows, the event and the new revision. The partial unique index `uq_<T>_deployments_active`
//! keeps one active version per task.

use async_trait::async_trait;
use onestep_core::components::ComponentDigest;
use onestep_core::deployments::{
    ActiveSet, DEPLOYMENT_COLUMNS, DEPLOYMENTS_TABLE_ABSENT, Deployed, Deployment, DeploymentError,
    DeploymentEvent, DeploymentFilter, DeploymentRow, DeploymentStore, EVENT_COLUMNS, EventRow,
    GcReport, NewDeployment, Page, Plan, TaskBound, check_name, check_new, check_note, check_page,
    check_version, gc_cutoff, plan_activate, plan_deactivate, plan_deploy,
};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::backend::PgBackend;
use crate::errors::{OpError, OpResult};
use crate::schema::{
    component_chunks_table, component_holders_table, components_table, deployment_events_table,
    deployment_revision_table, deployments_table, q,
};
use crate::worker_ops::finish;

/// The quoted tables.
struct Tables {
    deployments: String,
    events: String,
    revision: String,
    components: String,
    chunks: String,
    holders: String,
}

fn deployment(r: &Row) -> OpResult<Deployment> {
    let raw = DeploymentRow {
        namespace: r.try_get(0)?,
        task: r.try_get(1)?,
        version: r.try_get(2)?,
        digest: r.try_get(3)?,
        settings: r.try_get(4)?,
        state: r.try_get(5)?,
        deployed_by: r.try_get(6)?,
        deployed_at: r.try_get(7)?,
        previous_version: r.try_get(8)?,
        previous_digest: r.try_get(9)?,
        note: r.try_get(10)?,
        revision: r.try_get(11)?,
        updated_at: r.try_get(12)?,
    };
    Ok(raw.decode()?)
}

fn event(r: &Row) -> OpResult<DeploymentEvent> {
    let raw = EventRow {
        revision: r.try_get(0)?,
        namespace: r.try_get(1)?,
        task: r.try_get(2)?,
        action: r.try_get(3)?,
        version: r.try_get(4)?,
        digest: r.try_get(5)?,
        from_version: r.try_get(6)?,
        from_digest: r.try_get(7)?,
        actor: r.try_get(8)?,
        at: r.try_get(9)?,
        note: r.try_get(10)?,
    };
    Ok(raw.decode()?)
}

async fn one<C: deadpool_postgres::GenericClient>(
    c: &C,
    t: &Tables,
    namespace: &str,
    task: &str,
    version: Option<i64>,
) -> OpResult<Option<Deployment>> {
    let row = c
        .query_opt(
            &format!(
                "SELECT {DEPLOYMENT_COLUMNS} FROM {} WHERE namespace = $1 AND task = $2 \
                 AND (CASE WHEN $3::bigint IS NULL THEN state = 'active' ELSE version = $3 END)",
                t.deployments
            ),
            &[&namespace, &task, &version],
        )
        .await?;
    row.as_ref().map(deployment).transpose()
}

/// The namespace's tasks with an active version, when `max_tasks` bounds them (`None`
/// otherwise: not read). Read under the revision lock.
async fn active_tasks<C: deadpool_postgres::GenericClient>(
    c: &C,
    t: &Tables,
    namespace: &str,
    max_tasks: Option<u32>,
) -> OpResult<Option<u64>> {
    if max_tasks.is_none() {
        return Ok(None);
    }
    let n: i64 = c
        .query_one(
            &format!(
                "SELECT count(*) FROM {} WHERE namespace = $1 AND state = 'active'",
                t.deployments
            ),
            &[&namespace],
        )
        .await?
        .try_get(0)?;
    Ok(Some(u64::try_from(n).unwrap_or(0)))
}

/// Locks the revision row (creating it at 0 when absent) and returns the revision.
async fn lock_revision<C: deadpool_postgres::GenericClient>(c: &C, t: &Tables) -> OpResult<i64> {
    let row = c
        .query_one(
            &format!(
                "INSERT INTO {r} AS r (id, revision) VALUES (1, 0) \
                 ON CONFLICT (id) DO UPDATE SET revision = r.revision RETURNING revision",
                r = t.revision
            ),
            &[],
        )
        .await?;
    Ok(row.try_get(0)?)
}

/// Writes a plan's rows, event and revision; returns its answer.
async fn apply<C: deadpool_postgres::GenericClient>(
    c: &C,
    t: &Tables,
    namespace: &str,
    task: &str,
    plan: Plan,
) -> OpResult<Deployment> {
    let (change, after) = match plan {
        Plan::Unchanged(d) => return Ok(d),
        Plan::Change(change, after) => (change, after),
    };
    let at = change.event.at;
    for ch in &change.changes {
        c.execute(
            &format!(
                "UPDATE {} SET state = $1, updated_at = $2 \
                 WHERE namespace = $3 AND task = $4 AND version = $5",
                t.deployments
            ),
            &[&ch.state.as_str(), &at, &namespace, &task, &ch.version],
        )
        .await?;
    }
    if let Some(d) = &change.insert {
        c.execute(
            &format!(
                "INSERT INTO {} ({DEPLOYMENT_COLUMNS}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                t.deployments
            ),
            &[
                &d.namespace,
                &d.task,
                &d.version,
                &d.digest.as_str(),
                &d.settings.as_str(),
                &d.state.as_str(),
                &d.deployed_by,
                &d.deployed_at,
                &d.previous_version,
                &d.previous_digest.as_ref().map(ComponentDigest::as_str),
                &d.note,
                &d.revision,
                &d.updated_at,
            ],
        )
        .await?;
    }
    let e = &change.event;
    c.execute(
        &format!(
            "INSERT INTO {} ({EVENT_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            t.events
        ),
        &[
            &e.revision,
            &e.namespace,
            &e.task,
            &e.action.as_str(),
            &e.version,
            &e.digest.as_str(),
            &e.from_version,
            &e.from_digest.as_ref().map(ComponentDigest::as_str),
            &e.actor,
            &e.at,
            &e.note,
        ],
    )
    .await?;
    c.execute(
        &format!("UPDATE {} SET revision = $1 WHERE id = 1", t.revision),
        &[&change.revision],
    )
    .await?;
    Ok(after)
}

/// What a change's transaction decided: its answer, or a refusal (nothing written).
type Answer<T> = OpResult<Result<T, DeploymentError>>;

/// The change a transaction makes.
enum Change<'a> {
    Deploy(&'a NewDeployment),
    Activate {
        namespace: &'a str,
        task: &'a str,
        version: i64,
        actor: &'a str,
        note: Option<&'a str>,
        max_tasks: Option<u32>,
    },
    Deactivate {
        namespace: &'a str,
        task: &'a str,
        actor: &'a str,
        note: Option<&'a str>,
    },
}

impl PgBackend {
    fn deployment_tables(&self) -> Result<Tables, DeploymentError> {
        let f = &self.schema_report().features;
        if f.deployments_tables && f.components_tables {
            let n = self.tables();
            Ok(Tables {
                deployments: q(&deployments_table(n)),
                events: q(&deployment_events_table(n)),
                revision: q(&deployment_revision_table(n)),
                components: q(&components_table(n)),
                chunks: q(&component_chunks_table(n)),
                holders: q(&component_holders_table(n)),
            })
        } else {
            Err(DeploymentError::Invalid(
                DEPLOYMENTS_TABLE_ABSENT.to_owned(),
            ))
        }
    }

    fn stamp(&self) -> chrono::DateTime<chrono::Utc> {
        onestep_core::time::truncate_micros(self.now())
    }

    async fn change_once(&self, t: &Tables, change: &Change<'_>) -> Answer<(Deployment, bool)> {
        let now = self.stamp();
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        let outcome: Answer<(Deployment, bool)> = async {
            let revision = lock_revision(&tx, t).await?;
            let (namespace, task, plan) = match *change {
                Change::Deploy(new) => {
                    let stored = tx
                        .query_opt(
                            &format!("SELECT 1 FROM {} WHERE digest = $1", t.components),
                            &[&new.digest.as_str()],
                        )
                        .await?
                        .is_some();
                    let active = one(&tx, t, &new.namespace, &new.task, None).await?;
                    let tasks = match active {
                        None => active_tasks(&tx, t, &new.namespace, new.max_tasks).await?,
                        Some(_) => None,
                    };
                    let max: Option<i64> = tx
                        .query_one(
                            &format!(
                                "SELECT max(version) FROM {} WHERE namespace = $1 AND task = $2",
                                t.deployments
                            ),
                            &[&new.namespace, &new.task],
                        )
                        .await?
                        .try_get(0)?;
                    (
                        new.namespace.as_str(),
                        new.task.as_str(),
                        plan_deploy(new, revision, active.as_ref(), max, stored, tasks, now),
                    )
                }
                Change::Activate {
                    namespace,
                    task,
                    version,
                    actor,
                    note,
                    max_tasks,
                } => {
                    let target = one(&tx, t, namespace, task, Some(version)).await?;
                    let active = one(&tx, t, namespace, task, None).await?;
                    let bound = TaskBound {
                        max_tasks,
                        active_tasks: match active {
                            None => active_tasks(&tx, t, namespace, max_tasks).await?,
                            Some(_) => None,
                        },
                    };
                    (
                        namespace,
                        task,
                        plan_activate(
                            namespace,
                            task,
                            version,
                            target,
                            active.as_ref(),
                            revision,
                            actor,
                            note,
                            bound,
                            now,
                        ),
                    )
                }
                Change::Deactivate {
                    namespace,
                    task,
                    actor,
                    note,
                } => {
                    let active = one(&tx, t, namespace, task, None).await?;
                    (
                        namespace,
                        task,
                        plan_deactivate(namespace, task, active, revision, actor, note, now),
                    )
                }
            };
            let plan = match plan {
                Ok(p) => p,
                Err(e) => return Ok(Err(e)),
            };
            let created = matches!(plan, Plan::Change(..));
            Ok(Ok((apply(&tx, t, namespace, task, plan).await?, created)))
        }
        .await;
        finish(tx, outcome).await
    }

    async fn change(
        &self,
        operation: &'static str,
        change: Change<'_>,
    ) -> Result<(Deployment, bool), DeploymentError> {
        let t = self.deployment_tables()?;
        self.run(operation, || self.change_once(&t, &change))
            .await?
    }

    async fn gc_once(&self, t: &Tables, grace: std::time::Duration) -> OpResult<GcReport> {
        let cutoff = gc_cutoff(self.stamp(), grace);
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        let outcome = async {
            lock_revision(&tx, t).await?;
            // Holders stored before the cutoff whose namespace deploys nothing of theirs go
            // first (that namespace must store the bytes again to deploy them).
            tx.execute(
                &format!(
                    "DELETE FROM {h} AS h WHERE h.stored_at < $1 AND NOT EXISTS \
                     (SELECT 1 FROM {d} AS d WHERE d.namespace = h.namespace AND d.digest = h.digest)",
                    h = t.holders,
                    d = t.deployments
                ),
                &[&cutoff],
            )
            .await?;
            let rows = tx
                .query(
                    &format!(
                        "DELETE FROM {c} AS c WHERE c.created_at < $1 \
                         AND NOT EXISTS (SELECT 1 FROM {d} AS d WHERE d.digest = c.digest) \
                         AND NOT EXISTS (SELECT 1 FROM {h} AS h WHERE h.digest = c.digest) \
                         RETURNING c.digest, c.size",
                        c = t.components,
                        d = t.deployments,
                        h = t.holders
                    ),
                    &[&cutoff],
                )
                .await?;
            let mut report = GcReport::default();
            let mut digests = Vec::with_capacity(rows.len());
            for r in &rows {
                digests.push(r.try_get::<_, String>(0)?);
                report.components += 1;
                report.bytes += u64::try_from(r.try_get::<_, i64>(1)?).unwrap_or(0);
            }
            if !digests.is_empty() {
                tx.execute(
                    &format!("DELETE FROM {} WHERE digest = ANY($1)", t.chunks),
                    &[&digests],
                )
                .await?;
            }
            Ok::<_, OpError>(report)
        }
        .await;
        finish(tx, outcome).await
    }

    async fn look<T>(
        &self,
        operation: &'static str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        decode: fn(&Row) -> OpResult<T>,
    ) -> Result<Vec<T>, DeploymentError> {
        Ok(self
            .run(operation, || async {
                let conn = self.conn().await?;
                let rows = conn.query(sql, params).await?;
                rows.iter().map(decode).collect::<OpResult<Vec<T>>>()
            })
            .await?)
    }
}

fn revision_of(r: &Row) -> OpResult<i64> {
    Ok(r.try_get(0)?)
}

#[async_trait]
impl DeploymentStore for PgBackend {
    async fn deploy(&self, new: &NewDeployment) -> Result<Deployed, DeploymentError> {
        check_new(new)?;
        let (deployment, created) = self
            .change("deployment_deploy", Change::Deploy(new))
            .await?;
        Ok(Deployed {
            deployment,
            created,
        })
    }

    async fn get(
        &self,
        namespace: &str,
        task: &str,
        version: i64,
    ) -> Result<Option<Deployment>, DeploymentError> {
        check_name("namespace", namespace)?;
        check_name("task", task)?;
        check_version(version)?;
        let t = self.deployment_tables()?;
        let sql = format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM {} WHERE namespace = $1 AND task = $2 \
             AND version = $3",
            t.deployments
        );
        Ok(self
            .look(
                "deployment_get",
                &sql,
                &[&namespace, &task, &version],
                deployment,
            )
            .await?
            .into_iter()
            .next())
    }

    async fn active(
        &self,
        namespace: &str,
        task: &str,
    ) -> Result<Option<Deployment>, DeploymentError> {
        check_name("namespace", namespace)?;
        check_name("task", task)?;
        let t = self.deployment_tables()?;
        let sql = format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM {} WHERE namespace = $1 AND task = $2 \
             AND state = 'active'",
            t.deployments
        );
        Ok(self
            .look("deployment_active", &sql, &[&namespace, &task], deployment)
            .await?
            .into_iter()
            .next())
    }

    async fn list(
        &self,
        filter: &DeploymentFilter,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Page<Deployment>, DeploymentError> {
        check_page(before, limit)?;
        let t = self.deployment_tables()?;
        let sql = format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM {} WHERE ($1::text IS NULL OR namespace = $1) \
             AND ($2::text IS NULL OR task = $2) AND ($3::bigint IS NULL OR revision < $3) \
             ORDER BY revision DESC LIMIT $4",
            t.deployments
        );
        let fetch = i64::from(limit) + 1;
        let rows = self
            .look(
                "deployment_list",
                &sql,
                &[&filter.namespace, &filter.task, &before, &fetch],
                deployment,
            )
            .await?;
        Ok(Page::of(rows, limit, |d| d.revision))
    }

    async fn activate(
        &self,
        namespace: &str,
        task: &str,
        version: i64,
        actor: &str,
        note: Option<&str>,
        max_tasks: Option<u32>,
    ) -> Result<Deployment, DeploymentError> {
        check_name("namespace", namespace)?;
        check_name("task", task)?;
        check_version(version)?;
        check_name("actor", actor)?;
        check_note(note)?;
        let change = Change::Activate {
            namespace,
            task,
            version,
            max_tasks,
            actor,
            note,
        };
        Ok(self.change("deployment_activate", change).await?.0)
    }

    async fn deactivate(
        &self,
        namespace: &str,
        task: &str,
        actor: &str,
        note: Option<&str>,
    ) -> Result<Deployment, DeploymentError> {
        check_name("namespace", namespace)?;
        check_name("task", task)?;
        check_name("actor", actor)?;
        check_note(note)?;
        let change = Change::Deactivate {
            namespace,
            task,
            actor,
            note,
        };
        Ok(self.change("deployment_deactivate", change).await?.0)
    }

    async fn revision(&self) -> Result<i64, DeploymentError> {
        // Every follower calls this every `poll_s` (docs/deployments.md#following-changes-the-revision):
        // a statement prepared once per connection makes each call one Bind/Execute/Sync round
        // trip, one implicit transaction. An unprepared `query` would first send its own
        // Parse/Describe/Sync, a second round trip and a second transaction per poll
        // (docs/benchmarks.md#deployments).
        let t = self.deployment_tables()?;
        let sql = format!("SELECT revision FROM {} WHERE id = 1", t.revision);
        let rows = self
            .run("deployment_revision", || async {
                let conn = self.conn().await?;
                let st = conn.prepare_cached(&sql).await?;
                let rows = conn.query(&st, &[]).await?;
                rows.iter().map(revision_of).collect::<OpResult<Vec<i64>>>()
            })
            .await?;
        Ok(rows.into_iter().next().unwrap_or(0))
    }

    async fn active_all(
        &self,
        namespaces: Option<&[String]>,
    ) -> Result<ActiveSet, DeploymentError> {
        let revision = self.revision().await?;
        let t = self.deployment_tables()?;
        let sql = format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM {} WHERE state = 'active' \
             AND ($1::text[] IS NULL OR namespace = ANY($1)) ORDER BY namespace, task",
            t.deployments
        );
        let namespaces: Option<Vec<String>> = namespaces.map(<[String]>::to_vec);
        let deployments = self
            .look("deployment_active_all", &sql, &[&namespaces], deployment)
            .await?;
        Ok(ActiveSet {
            revision,
            deployments,
        })
    }

    async fn audit(
        &self,
        namespace: &str,
        task: Option<&str>,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Page<DeploymentEvent>, DeploymentError> {
        check_name("namespace", namespace)?;
        if let Some(task) = task {
            check_name("task", task)?;
        }
        check_page(before, limit)?;
        let t = self.deployment_tables()?;
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM {} WHERE namespace = $1 \
             AND ($2::text IS NULL OR task = $2) AND ($3::bigint IS NULL OR revision < $3) \
             ORDER BY revision DESC LIMIT $4",
            t.events
        );
        let fetch = i64::from(limit) + 1;
        let rows = self
            .look(
                "deployment_audit",
                &sql,
                &[&namespace, &task, &before, &fetch],
                event,
            )
            .await?;
        Ok(Page::of(rows, limit, |e| e.revision))
    }

    async fn collect_garbage(
        &self,
        grace: std::time::Duration,
    ) -> Result<GcReport, DeploymentError> {
        let t = self.deployment_tables()?;
        Ok(self.run("component_gc", || self.gc_once(&t, grace)).await?)
    }
}
