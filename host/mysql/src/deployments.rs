//! Task deployments (docs/deployments.md#data-model): [`DeploymentStore`] over `<T>_deployments`
//! (one row per version), `<T>_deployment_events` (the audit trail) and
//! `<T>_deployment_revision` (the change marker, one row). Every change is one READ COMMITTED
//! transaction that first locks the revision row (`INSERT … ON DUPLICATE KEY UPDATE`, then a
//! locking read), so changes are serialised and commit in revision order (a deadlock between
//! first writers is retried); it then plans with [`onestep_core::deployments`] and writes the
//! rows, the event and the new revision. The unique key over the generated column `active_key`
//! keeps one active version per task.

use async_trait::async_trait;
use mysql_async::prelude::{FromValue, Queryable};
use mysql_async::{Row, Transaction, Value as DbValue, from_value_opt};
use onestep_core::ExecutionError;
use onestep_core::components::ComponentDigest;
use onestep_core::deployments::{
    ActiveSet, DEPLOYMENT_COLUMNS, DEPLOYMENTS_TABLE_ABSENT, Deployed, Deployment, DeploymentError,
    DeploymentEvent, DeploymentFilter, DeploymentRow, DeploymentStore, EVENT_COLUMNS, EventRow,
    GcReport, NewDeployment, Page, Plan, TaskBound, check_name, check_new, check_note, check_page,
    check_version, gc_cutoff, plan_activate, plan_deactivate, plan_deploy,
};

use crate::backend::{MySqlBackend, begin};
use crate::errors::{OpError, OpResult};
use crate::rows::{bind_time, instant};
use crate::schema::{
    component_chunks_table, component_holders_table, components_table, deployment_events_table,
    deployment_revision_table, deployments_table,
};

/// The tables.
struct Tables {
    deployments: String,
    events: String,
    revision: String,
    components: String,
    chunks: String,
    holders: String,
}

fn take<T: FromValue>(r: &mut Row, i: usize, col: &str) -> OpResult<T> {
    from_value_opt::<T>(r.take::<DbValue, _>(i).unwrap_or(DbValue::NULL)).map_err(|e| {
        OpError::Domain(ExecutionError::Undecodable(format!(
            "stored deployment column {col}: {e}"
        )))
    })
}

fn time(r: &mut Row, i: usize, col: &str) -> OpResult<chrono::DateTime<chrono::Utc>> {
    instant(r.take::<DbValue, _>(i).unwrap_or(DbValue::NULL), col)
        .map_err(|e| OpError::Domain(ExecutionError::from(e)))
}

fn deployment(mut r: Row) -> OpResult<Deployment> {
    let r = &mut r;
    let raw = DeploymentRow {
        namespace: take(r, 0, "namespace")?,
        task: take(r, 1, "task")?,
        version: take(r, 2, "version")?,
        digest: take(r, 3, "digest")?,
        settings: take(r, 4, "settings")?,
        state: take(r, 5, "state")?,
        deployed_by: take(r, 6, "deployed_by")?,
        deployed_at: time(r, 7, "deployed_at")?,
        previous_version: take(r, 8, "previous_version")?,
        previous_digest: take(r, 9, "previous_digest")?,
        note: take(r, 10, "note")?,
        revision: take(r, 11, "revision")?,
        updated_at: time(r, 12, "updated_at")?,
    };
    Ok(raw.decode()?)
}

fn event(mut r: Row) -> OpResult<DeploymentEvent> {
    let r = &mut r;
    let raw = EventRow {
        revision: take(r, 0, "revision")?,
        namespace: take(r, 1, "namespace")?,
        task: take(r, 2, "task")?,
        action: take(r, 3, "action")?,
        version: take(r, 4, "version")?,
        digest: take(r, 5, "digest")?,
        from_version: take(r, 6, "from_version")?,
        from_digest: take(r, 7, "from_digest")?,
        actor: take(r, 8, "actor")?,
        at: time(r, 9, "at")?,
        note: take(r, 10, "note")?,
    };
    Ok(raw.decode()?)
}

fn opt_digest(d: Option<&ComponentDigest>) -> DbValue {
    d.map_or(DbValue::NULL, |d| DbValue::from(d.as_str()))
}

async fn one(
    tx: &mut Transaction<'_>,
    t: &Tables,
    namespace: &str,
    task: &str,
    version: Option<i64>,
) -> OpResult<Option<Deployment>> {
    let row: Option<Row> = match version {
        Some(v) => {
            tx.exec_first(
                format!(
                    "SELECT {DEPLOYMENT_COLUMNS} FROM `{}` \
                     WHERE namespace = ? AND task = ? AND version = ?",
                    t.deployments
                ),
                (namespace, task, v),
            )
            .await?
        }
        None => {
            tx.exec_first(
                format!(
                    "SELECT {DEPLOYMENT_COLUMNS} FROM `{}` \
                     WHERE namespace = ? AND task = ? AND active_key = 1",
                    t.deployments
                ),
                (namespace, task),
            )
            .await?
        }
    };
    row.map(deployment).transpose()
}

/// The namespace's tasks with an active version, when `max_tasks` bounds them (`None`
/// otherwise: not read). Read under the revision lock.
async fn active_tasks(
    tx: &mut Transaction<'_>,
    t: &Tables,
    namespace: &str,
    max_tasks: Option<u32>,
) -> OpResult<Option<u64>> {
    if max_tasks.is_none() {
        return Ok(None);
    }
    let n: Option<i64> = tx
        .exec_first(
            format!(
                "SELECT COUNT(*) FROM `{}` WHERE namespace = ? AND active_key = 1",
                t.deployments
            ),
            (namespace,),
        )
        .await?;
    Ok(Some(u64::try_from(n.unwrap_or(0)).unwrap_or(0)))
}

/// Locks the revision row (creating it at 0 when absent) and returns the revision.
async fn lock_revision(tx: &mut Transaction<'_>, t: &Tables) -> OpResult<i64> {
    tx.query_drop(format!(
        "INSERT INTO `{}` (id, revision) VALUES (1, 0) \
         ON DUPLICATE KEY UPDATE revision = revision",
        t.revision
    ))
    .await?;
    let r: Option<i64> = tx
        .query_first(format!(
            "SELECT revision FROM `{}` WHERE id = 1 FOR UPDATE",
            t.revision
        ))
        .await?;
    Ok(r.unwrap_or(0))
}

/// Writes a plan's rows, event and revision; returns its answer.
async fn apply(
    tx: &mut Transaction<'_>,
    t: &Tables,
    namespace: &str,
    task: &str,
    plan: Plan,
) -> OpResult<Deployment> {
    let (change, after) = match plan {
        Plan::Unchanged(d) => return Ok(d),
        Plan::Change(change, after) => (change, after),
    };
    let at = bind_time(change.event.at);
    for ch in &change.changes {
        tx.exec_drop(
            format!(
                "UPDATE `{}` SET state = ?, updated_at = ? \
                 WHERE namespace = ? AND task = ? AND version = ?",
                t.deployments
            ),
            (ch.state.as_str(), at.clone(), namespace, task, ch.version),
        )
        .await?;
    }
    if let Some(d) = &change.insert {
        let values: Vec<DbValue> = vec![
            d.namespace.as_str().into(),
            d.task.as_str().into(),
            d.version.into(),
            d.digest.as_str().into(),
            d.settings.as_str().into(),
            d.state.as_str().into(),
            d.deployed_by.as_str().into(),
            bind_time(d.deployed_at),
            d.previous_version.into(),
            opt_digest(d.previous_digest.as_ref()),
            d.note.as_deref().into(),
            d.revision.into(),
            bind_time(d.updated_at),
        ];
        tx.exec_drop(
            format!(
                "INSERT INTO `{}` ({DEPLOYMENT_COLUMNS}) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                t.deployments
            ),
            values,
        )
        .await?;
    }
    let e = &change.event;
    let values: Vec<DbValue> = vec![
        e.revision.into(),
        e.namespace.as_str().into(),
        e.task.as_str().into(),
        e.action.as_str().into(),
        e.version.into(),
        e.digest.as_str().into(),
        e.from_version.into(),
        opt_digest(e.from_digest.as_ref()),
        e.actor.as_str().into(),
        at,
        e.note.as_deref().into(),
    ];
    tx.exec_drop(
        format!(
            "INSERT INTO `{}` ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            t.events
        ),
        values,
    )
    .await?;
    tx.exec_drop(
        format!("UPDATE `{}` SET revision = ? WHERE id = 1", t.revision),
        (change.revision,),
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

impl MySqlBackend {
    fn deployment_tables(&self) -> Result<Tables, DeploymentError> {
        let f = &self.schema_report().features;
        if f.deployments_tables && f.components_tables {
            let n = self.tables();
            Ok(Tables {
                deployments: deployments_table(n),
                events: deployment_events_table(n),
                revision: deployment_revision_table(n),
                components: components_table(n),
                chunks: component_chunks_table(n),
                holders: component_holders_table(n),
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

    async fn plan_in(
        &self,
        tx: &mut Transaction<'_>,
        t: &Tables,
        change: &Change<'_>,
    ) -> Answer<(Deployment, bool)> {
        let now = self.stamp();
        let revision = lock_revision(tx, t).await?;
        let (namespace, task, plan) = match *change {
            Change::Deploy(new) => {
                let stored: Option<i64> = tx
                    .exec_first(
                        format!("SELECT 1 FROM `{}` WHERE digest = ?", t.components),
                        (new.digest.as_str(),),
                    )
                    .await?;
                let active = one(tx, t, &new.namespace, &new.task, None).await?;
                let tasks = match active {
                    None => active_tasks(tx, t, &new.namespace, new.max_tasks).await?,
                    Some(_) => None,
                };
                let max: Option<Option<i64>> = tx
                    .exec_first(
                        format!(
                            "SELECT MAX(version) FROM `{}` WHERE namespace = ? AND task = ?",
                            t.deployments
                        ),
                        (new.namespace.as_str(), new.task.as_str()),
                    )
                    .await?;
                (
                    new.namespace.as_str(),
                    new.task.as_str(),
                    plan_deploy(
                        new,
                        revision,
                        active.as_ref(),
                        max.flatten(),
                        stored.is_some(),
                        tasks,
                        now,
                    ),
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
                let target = one(tx, t, namespace, task, Some(version)).await?;
                let active = one(tx, t, namespace, task, None).await?;
                let bound = TaskBound {
                    max_tasks,
                    active_tasks: match active {
                        None => active_tasks(tx, t, namespace, max_tasks).await?,
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
                let active = one(tx, t, namespace, task, None).await?;
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
        Ok(Ok((apply(tx, t, namespace, task, plan).await?, created)))
    }

    async fn change_once(&self, t: &Tables, change: &Change<'_>) -> Answer<(Deployment, bool)> {
        let mut conn = self.conn().await?;
        let mut tx = begin(&mut conn).await?;
        let outcome = self.plan_in(&mut tx, t, change).await;
        self.finish(tx, outcome).await
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

    async fn gc_in(
        &self,
        tx: &mut Transaction<'_>,
        t: &Tables,
        grace: std::time::Duration,
    ) -> OpResult<GcReport> {
        let cutoff = gc_cutoff(self.stamp(), grace);
        lock_revision(tx, t).await?;
        // Holders stored before the cutoff whose namespace deploys nothing of theirs go first
        // (that namespace must store the bytes again to deploy them).
        tx.exec_drop(
            format!(
                "DELETE h FROM `{}` AS h WHERE h.stored_at < ? AND NOT EXISTS \
                 (SELECT 1 FROM `{}` AS d WHERE d.namespace = h.namespace AND d.digest = h.digest)",
                t.holders, t.deployments
            ),
            (bind_time(cutoff),),
        )
        .await?;
        let victims: Vec<(String, i64)> = tx
            .exec(
                format!(
                    "SELECT c.digest, c.size FROM `{}` AS c WHERE c.created_at < ? \
                     AND NOT EXISTS (SELECT 1 FROM `{}` AS d WHERE d.digest = c.digest) \
                     AND NOT EXISTS (SELECT 1 FROM `{}` AS h WHERE h.digest = c.digest)",
                    t.components, t.deployments, t.holders
                ),
                (bind_time(cutoff),),
            )
            .await?;
        let mut report = GcReport::default();
        for (digest, size) in victims {
            tx.exec_drop(
                format!("DELETE FROM `{}` WHERE digest = ?", t.components),
                (digest.as_str(),),
            )
            .await?;
            tx.exec_drop(
                format!("DELETE FROM `{}` WHERE digest = ?", t.chunks),
                (digest.as_str(),),
            )
            .await?;
            report.components += 1;
            report.bytes += u64::try_from(size).unwrap_or(0);
        }
        Ok(report)
    }

    async fn gc_once(&self, t: &Tables, grace: std::time::Duration) -> OpResult<GcReport> {
        let mut conn = self.conn().await?;
        let mut tx = begin(&mut conn).await?;
        let outcome = self.gc_in(&mut tx, t, grace).await;
        self.finish(tx, outcome).await
    }

    async fn look<T>(
        &self,
        operation: &'static str,
        sql: &str,
        params: &[DbValue],
        decode: fn(Row) -> OpResult<T>,
    ) -> Result<Vec<T>, DeploymentError> {
        Ok(self
            .run(operation, || async {
                let mut conn = self.conn().await?;
                let rows: Vec<Row> = conn.exec(sql, params.to_vec()).await?;
                rows.into_iter().map(decode).collect::<OpResult<Vec<T>>>()
            })
            .await?)
    }
}

fn revision_of(mut r: Row) -> OpResult<i64> {
    take(&mut r, 0, "revision")
}

/// `namespace = ? AND …` with its values, for the optional filters of a history or audit read.
fn filters(
    namespace: Option<&str>,
    task: Option<&str>,
    before: Option<i64>,
) -> (String, Vec<DbValue>) {
    let mut cond = vec!["1 = 1"];
    let mut args: Vec<DbValue> = Vec::new();
    if let Some(ns) = namespace {
        cond.push("namespace = ?");
        args.push(ns.into());
    }
    if let Some(task) = task {
        cond.push("task = ?");
        args.push(task.into());
    }
    if let Some(b) = before {
        cond.push("revision < ?");
        args.push(b.into());
    }
    (cond.join(" AND "), args)
}

#[async_trait]
impl DeploymentStore for MySqlBackend {
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
            "SELECT {DEPLOYMENT_COLUMNS} FROM `{}` WHERE namespace = ? AND task = ? \
             AND version = ?",
            t.deployments
        );
        Ok(self
            .look(
                "deployment_get",
                &sql,
                &[namespace.into(), task.into(), version.into()],
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
            "SELECT {DEPLOYMENT_COLUMNS} FROM `{}` WHERE namespace = ? AND task = ? \
             AND active_key = 1",
            t.deployments
        );
        Ok(self
            .look(
                "deployment_active",
                &sql,
                &[namespace.into(), task.into()],
                deployment,
            )
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
        let (cond, mut args) = filters(filter.namespace.as_deref(), filter.task.as_deref(), before);
        args.push((i64::from(limit) + 1).into());
        let sql = format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM `{}` WHERE {cond} ORDER BY revision DESC LIMIT ?",
            t.deployments
        );
        let rows = self
            .look("deployment_list", &sql, &args, deployment)
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
        let t = self.deployment_tables()?;
        let sql = format!("SELECT revision FROM `{}` WHERE id = 1", t.revision);
        Ok(self
            .look("deployment_revision", &sql, &[], revision_of)
            .await?
            .into_iter()
            .next()
            .unwrap_or(0))
    }

    async fn active_all(
        &self,
        namespaces: Option<&[String]>,
    ) -> Result<ActiveSet, DeploymentError> {
        let revision = self.revision().await?;
        let t = self.deployment_tables()?;
        let (cond, args): (String, Vec<DbValue>) = match namespaces {
            None => ("active_key = 1".to_owned(), Vec::new()),
            Some([]) => {
                return Ok(ActiveSet {
                    revision,
                    deployments: Vec::new(),
                });
            }
            Some(list) => (
                format!(
                    "active_key = 1 AND namespace IN ({})",
                    vec!["?"; list.len()].join(", ")
                ),
                list.iter().map(|n| n.as_str().into()).collect(),
            ),
        };
        let sql = format!(
            "SELECT {DEPLOYMENT_COLUMNS} FROM `{}` WHERE {cond} ORDER BY namespace, task",
            t.deployments
        );
        let deployments = self
            .look("deployment_active_all", &sql, &args, deployment)
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
        let (cond, mut args) = filters(Some(namespace), task, before);
        args.push((i64::from(limit) + 1).into());
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM `{}` WHERE {cond} ORDER BY revision DESC LIMIT ?",
            t.events
        );
        let rows = self.look("deployment_audit", &sql, &args, event).await?;
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
