//! Task deployments (docs/deployments.md#data-model): [`DeploymentStore`] over `<T>_deployments`
//! (one row per version), `<T>_deployment_events` (the audit trail) and
//! `<T>_deployment_revision` (the change marker, one row). Every change is one `BEGIN IMMEDIATE`
//! transaction on the writer connection (SQLite's one writer serialises them): it reads the
//! revision, plans with [`onestep_core::deployments`] and writes the rows, the event and the new
//! revision. The partial unique index `uq_<T>_deployments_active` keeps one active version per
//! task.

use async_trait::async_trait;
use onestep_core::components::ComponentDigest;
use onestep_core::deployments::{
    ActiveSet, DEPLOYMENT_COLUMNS, DEPLOYMENTS_TABLE_ABSENT, Deployed, Deployment, DeploymentError,
    DeploymentEvent, DeploymentFilter, DeploymentRow, DeploymentStore, EVENT_COLUMNS, EventRow,
    GcReport, NewDeployment, Page, Plan, TaskBound, check_name, check_new, check_note, check_page,
    check_version, gc_cutoff, plan_activate, plan_deactivate, plan_deploy,
};
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OptionalExtension, Row, params, params_from_iter};

use crate::backend::SqliteBackend;
use crate::errors::{OpError, OpResult};
use crate::rows::{parse_time, ts};
use crate::schema::{
    component_chunks_table, component_holders_table, components_table, deployment_events_table,
    deployment_revision_table, deployments_table, q,
};

/// The quoted tables.
#[derive(Clone)]
struct Tables {
    deployments: String,
    events: String,
    revision: String,
    components: String,
    chunks: String,
    holders: String,
}

impl SqliteBackend {
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
}

fn time_of(text: &str, col: &str) -> OpResult<chrono::DateTime<chrono::Utc>> {
    parse_time(text, col).map_err(|e| OpError::Domain(e.into()))
}

fn deployment(r: &Row<'_>) -> OpResult<Deployment> {
    let raw = DeploymentRow {
        namespace: r.get(0)?,
        task: r.get(1)?,
        version: r.get(2)?,
        digest: r.get(3)?,
        settings: r.get(4)?,
        state: r.get(5)?,
        deployed_by: r.get(6)?,
        deployed_at: time_of(&r.get::<_, String>(7)?, "deployed_at")?,
        previous_version: r.get(8)?,
        previous_digest: r.get(9)?,
        note: r.get(10)?,
        revision: r.get(11)?,
        updated_at: time_of(&r.get::<_, String>(12)?, "updated_at")?,
    };
    Ok(raw.decode()?)
}

fn event(r: &Row<'_>) -> OpResult<DeploymentEvent> {
    let raw = EventRow {
        revision: r.get(0)?,
        namespace: r.get(1)?,
        task: r.get(2)?,
        action: r.get(3)?,
        version: r.get(4)?,
        digest: r.get(5)?,
        from_version: r.get(6)?,
        from_digest: r.get(7)?,
        actor: r.get(8)?,
        at: time_of(&r.get::<_, String>(9)?, "at")?,
        note: r.get(10)?,
    };
    Ok(raw.decode()?)
}

fn deployments_where(
    c: &Connection,
    t: &Tables,
    condition: &str,
    args: Vec<SqlValue>,
    tail: &str,
) -> OpResult<Vec<Deployment>> {
    let mut st = c.prepare_cached(&format!(
        "SELECT {DEPLOYMENT_COLUMNS} FROM {} WHERE {condition} {tail}",
        t.deployments
    ))?;
    let mut rows = st.query(params_from_iter(args))?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(deployment(r)?);
    }
    Ok(out)
}

/// The namespace's tasks with an active version, when `max_tasks` bounds them (`None`
/// otherwise: not read). Read inside the change's transaction (SQLite's one writer).
fn active_tasks(
    c: &Connection,
    t: &Tables,
    namespace: &str,
    max_tasks: Option<u32>,
) -> OpResult<Option<u64>> {
    if max_tasks.is_none() {
        return Ok(None);
    }
    let n: i64 = c
        .prepare_cached(&format!(
            "SELECT count(*) FROM {} WHERE namespace = ?1 AND state = 'active'",
            t.deployments
        ))?
        .query_row(params![namespace], |r| r.get(0))?;
    Ok(Some(u64::try_from(n).unwrap_or(0)))
}

fn one(
    c: &Connection,
    t: &Tables,
    namespace: &str,
    task: &str,
    version: Option<i64>,
) -> OpResult<Option<Deployment>> {
    let (cond, args) = match version {
        Some(v) => (
            "namespace = ?1 AND task = ?2 AND version = ?3",
            vec![
                namespace.to_owned().into(),
                task.to_owned().into(),
                v.into(),
            ],
        ),
        None => (
            "namespace = ?1 AND task = ?2 AND state = 'active'",
            vec![namespace.to_owned().into(), task.to_owned().into()],
        ),
    };
    Ok(deployments_where(c, t, cond, args, "")?.into_iter().next())
}

fn revision_in(c: &Connection, t: &Tables) -> OpResult<i64> {
    Ok(
        c.prepare_cached(&format!("SELECT revision FROM {} WHERE id = 1", t.revision))?
            .query_row([], |r| r.get::<_, i64>(0))
            .optional()?
            .unwrap_or(0),
    )
}

/// Writes a plan's rows, event and revision; returns its answer.
fn apply(
    c: &Connection,
    t: &Tables,
    namespace: &str,
    task: &str,
    plan: Plan,
) -> OpResult<Deployment> {
    let (change, after) = match plan {
        Plan::Unchanged(d) => return Ok(d),
        Plan::Change(change, after) => (change, after),
    };
    let at = ts(change.event.at);
    for ch in &change.changes {
        c.prepare_cached(&format!(
            "UPDATE {} SET state = ?1, updated_at = ?2 \
             WHERE namespace = ?3 AND task = ?4 AND version = ?5",
            t.deployments
        ))?
        .execute(params![ch.state.as_str(), at, namespace, task, ch.version])?;
    }
    if let Some(d) = &change.insert {
        c.prepare_cached(&format!(
            "INSERT INTO {} ({DEPLOYMENT_COLUMNS}) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            t.deployments
        ))?
        .execute(params![
            d.namespace,
            d.task,
            d.version,
            d.digest.as_str(),
            d.settings.as_str(),
            d.state.as_str(),
            d.deployed_by,
            ts(d.deployed_at),
            d.previous_version,
            d.previous_digest.as_ref().map(ComponentDigest::as_str),
            d.note,
            d.revision,
            ts(d.updated_at),
        ])?;
    }
    let e = &change.event;
    c.prepare_cached(&format!(
        "INSERT INTO {} ({EVENT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        t.events
    ))?
    .execute(params![
        e.revision,
        e.namespace,
        e.task,
        e.action.as_str(),
        e.version,
        e.digest.as_str(),
        e.from_version,
        e.from_digest.as_ref().map(ComponentDigest::as_str),
        e.actor,
        at,
        e.note,
    ])?;
    c.prepare_cached(&format!(
        "INSERT INTO {} (id, revision) VALUES (1, ?1) \
         ON CONFLICT (id) DO UPDATE SET revision = excluded.revision",
        t.revision
    ))?
    .execute(params![change.revision])?;
    Ok(after)
}

fn now(b: &SqliteBackend) -> chrono::DateTime<chrono::Utc> {
    onestep_core::time::truncate_micros(b.now())
}

type Answer<T> = OpResult<Result<T, DeploymentError>>;

impl SqliteBackend {
    /// Runs a change (`f` on the writer, in one `BEGIN IMMEDIATE` transaction).
    async fn change<T: Send + 'static>(
        &self,
        operation: &'static str,
        f: impl Fn(&SqliteBackend, &Connection) -> Answer<T> + Send + Sync + Clone + 'static,
    ) -> Result<T, DeploymentError> {
        self.run(operation, || {
            let f = f.clone();
            self.write(move |b, c| f(b, c))
        })
        .await?
    }

    async fn look<T: Send + 'static>(
        &self,
        operation: &'static str,
        f: impl Fn(&Connection) -> OpResult<T> + Send + Sync + Clone + 'static,
    ) -> Result<T, DeploymentError> {
        Ok(self
            .run(operation, || {
                let f = f.clone();
                self.read(move |_, c| f(c))
            })
            .await?)
    }
}

#[async_trait]
impl DeploymentStore for SqliteBackend {
    async fn deploy(&self, new: &NewDeployment) -> Result<Deployed, DeploymentError> {
        check_new(new)?;
        let t = self.deployment_tables()?;
        let new = new.clone();
        self.change("deployment_deploy", move |b, c| {
            let revision = revision_in(c, &t)?;
            let stored = c
                .prepare_cached(&format!("SELECT 1 FROM {} WHERE digest = ?1", t.components))?
                .query_row(params![new.digest.as_str()], |_| Ok(()))
                .optional()?
                .is_some();
            let active = one(c, &t, &new.namespace, &new.task, None)?;
            let max_version: Option<i64> = c
                .prepare_cached(&format!(
                    "SELECT max(version) FROM {} WHERE namespace = ?1 AND task = ?2",
                    t.deployments
                ))?
                .query_row(params![new.namespace, new.task], |r| r.get(0))?;
            let tasks = match active {
                None => active_tasks(c, &t, &new.namespace, new.max_tasks)?,
                Some(_) => None,
            };
            let plan = match plan_deploy(
                &new,
                revision,
                active.as_ref(),
                max_version,
                stored,
                tasks,
                now(b),
            ) {
                Ok(p) => p,
                Err(e) => return Ok(Err(e)),
            };
            let created = matches!(plan, Plan::Change(..));
            let deployment = apply(c, &t, &new.namespace, &new.task, plan)?;
            Ok(Ok(Deployed {
                deployment,
                created,
            }))
        })
        .await
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
        let (ns, task) = (namespace.to_owned(), task.to_owned());
        self.look("deployment_get", move |c| {
            one(c, &t, &ns, &task, Some(version))
        })
        .await
    }

    async fn active(
        &self,
        namespace: &str,
        task: &str,
    ) -> Result<Option<Deployment>, DeploymentError> {
        check_name("namespace", namespace)?;
        check_name("task", task)?;
        let t = self.deployment_tables()?;
        let (ns, task) = (namespace.to_owned(), task.to_owned());
        self.look("deployment_active", move |c| one(c, &t, &ns, &task, None))
            .await
    }

    async fn list(
        &self,
        filter: &DeploymentFilter,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Page<Deployment>, DeploymentError> {
        check_page(before, limit)?;
        let t = self.deployment_tables()?;
        let mut cond = vec!["1 = 1".to_owned()];
        let mut args: Vec<SqlValue> = Vec::new();
        if let Some(ns) = &filter.namespace {
            args.push(ns.clone().into());
            cond.push(format!("namespace = ?{}", args.len()));
        }
        if let Some(task) = &filter.task {
            args.push(task.clone().into());
            cond.push(format!("task = ?{}", args.len()));
        }
        if let Some(b) = before {
            args.push(b.into());
            cond.push(format!("revision < ?{}", args.len()));
        }
        args.push((i64::from(limit) + 1).into());
        let tail = format!("ORDER BY revision DESC LIMIT ?{}", args.len());
        let cond = cond.join(" AND ");
        let rows = self
            .look("deployment_list", move |c| {
                deployments_where(c, &t, &cond, args.clone(), &tail)
            })
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
        let t = self.deployment_tables()?;
        let (ns, task, actor) = (namespace.to_owned(), task.to_owned(), actor.to_owned());
        let note = note.map(str::to_owned);
        self.change("deployment_activate", move |b, c| {
            let revision = revision_in(c, &t)?;
            let target = one(c, &t, &ns, &task, Some(version))?;
            let active = one(c, &t, &ns, &task, None)?;
            let bound = TaskBound {
                max_tasks,
                active_tasks: match active {
                    None => active_tasks(c, &t, &ns, max_tasks)?,
                    Some(_) => None,
                },
            };
            let plan = match plan_activate(
                &ns,
                &task,
                version,
                target,
                active.as_ref(),
                revision,
                &actor,
                note.as_deref(),
                bound,
                now(b),
            ) {
                Ok(p) => p,
                Err(e) => return Ok(Err(e)),
            };
            Ok(Ok(apply(c, &t, &ns, &task, plan)?))
        })
        .await
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
        let t = self.deployment_tables()?;
        let (ns, task, actor) = (namespace.to_owned(), task.to_owned(), actor.to_owned());
        let note = note.map(str::to_owned);
        self.change("deployment_deactivate", move |b, c| {
            let revision = revision_in(c, &t)?;
            let active = one(c, &t, &ns, &task, None)?;
            let plan = match plan_deactivate(
                &ns,
                &task,
                active,
                revision,
                &actor,
                note.as_deref(),
                now(b),
            ) {
                Ok(p) => p,
                Err(e) => return Ok(Err(e)),
            };
            Ok(Ok(apply(c, &t, &ns, &task, plan)?))
        })
        .await
    }

    async fn revision(&self) -> Result<i64, DeploymentError> {
        let t = self.deployment_tables()?;
        self.look("deployment_revision", move |c| revision_in(c, &t))
            .await
    }

    async fn active_all(
        &self,
        namespaces: Option<&[String]>,
    ) -> Result<ActiveSet, DeploymentError> {
        let t = self.deployment_tables()?;
        let namespaces: Option<Vec<String>> = namespaces.map(<[String]>::to_vec);
        self.look("deployment_active_all", move |c| {
            let revision = revision_in(c, &t)?;
            let (cond, args): (String, Vec<SqlValue>) = match &namespaces {
                None => ("state = 'active'".to_owned(), Vec::new()),
                Some(list) if list.is_empty() => {
                    return Ok(ActiveSet {
                        revision,
                        deployments: Vec::new(),
                    });
                }
                Some(list) => (
                    format!(
                        "state = 'active' AND namespace IN ({})",
                        (1..=list.len())
                            .map(|i| format!("?{i}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    list.iter().map(|n| n.clone().into()).collect(),
                ),
            };
            let deployments = deployments_where(c, &t, &cond, args, "ORDER BY namespace, task")?;
            Ok(ActiveSet {
                revision,
                deployments,
            })
        })
        .await
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
        let (ns, task) = (namespace.to_owned(), task.map(str::to_owned));
        let rows = self
            .look("deployment_audit", move |c| {
                let mut st = c.prepare_cached(&format!(
                    "SELECT {EVENT_COLUMNS} FROM {} WHERE namespace = ?1 \
                     AND (?2 IS NULL OR task = ?2) AND (?3 IS NULL OR revision < ?3) \
                     ORDER BY revision DESC LIMIT ?4",
                    t.events
                ))?;
                let mut rows = st.query(params![ns, task, before, i64::from(limit) + 1])?;
                let mut out = Vec::new();
                while let Some(r) = rows.next()? {
                    out.push(event(r)?);
                }
                Ok(out)
            })
            .await?;
        Ok(Page::of(rows, limit, |e| e.revision))
    }

    async fn collect_garbage(
        &self,
        grace: std::time::Duration,
    ) -> Result<GcReport, DeploymentError> {
        let t = self.deployment_tables()?;
        self.change("component_gc", move |b, c| {
            let cutoff = ts(gc_cutoff(now(b), grace));
            // Holders stored before the cutoff whose namespace deploys nothing of theirs go
            // first (that namespace must store the bytes again to deploy them).
            c.prepare_cached(&format!(
                "DELETE FROM {h} WHERE stored_at < ?1 AND NOT EXISTS \
                 (SELECT 1 FROM {d} AS d WHERE d.namespace = {h}.namespace \
                  AND d.digest = {h}.digest)",
                h = t.holders,
                d = t.deployments
            ))?
            .execute(params![cutoff])?;
            let victims: Vec<(String, i64)> = c
                .prepare_cached(&format!(
                    "SELECT c.digest, c.size FROM {} AS c WHERE c.created_at < ?1 \
                     AND NOT EXISTS (SELECT 1 FROM {} AS d WHERE d.digest = c.digest) \
                     AND NOT EXISTS (SELECT 1 FROM {} AS h WHERE h.digest = c.digest)",
                    t.components, t.deployments, t.holders
                ))?
                .query_map(params![cutoff], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?;
            let mut report = GcReport::default();
            for (digest, size) in victims {
                c.prepare_cached(&format!("DELETE FROM {} WHERE digest = ?1", t.chunks))?
                    .execute(params![digest])?;
                c.prepare_cached(&format!("DELETE FROM {} WHERE digest = ?1", t.components))?
                    .execute(params![digest])?;
                report.components += 1;
                report.bytes += u64::try_from(size).unwrap_or(0);
            }
            Ok(Ok(report))
        })
        .await
    }
}
