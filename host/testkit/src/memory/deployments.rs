//! The in-memory deployment store (docs/deployments.md#data-model) for fast tests: the same plans
//! as the SQL backends ([`onestep_core::deployments::plan_deploy`] and its siblings), applied to
//! a list of rows and events under one lock (the revision lock of the SQL backends).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use onestep_core::deployments::{
    ActiveSet, Deployed, Deployment, DeploymentError, DeploymentEvent, DeploymentFilter,
    DeploymentState, DeploymentStore, GcReport, NewDeployment, Page, Plan, TaskBound, check_name,
    check_new, check_note, check_page, check_version, gc_cutoff, plan_activate, plan_deactivate,
    plan_deploy,
};
use onestep_core::time::SharedClock;

use super::MemoryComponents;

#[derive(Default)]
struct State {
    revision: i64,
    rows: Vec<Deployment>,
    events: Vec<DeploymentEvent>,
}

impl State {
    fn active(&self, namespace: &str, task: &str) -> Option<&Deployment> {
        self.rows.iter().find(|d| {
            d.namespace == namespace && d.task == task && d.state == DeploymentState::Active
        })
    }

    /// The namespace's tasks with an active version, when `max_tasks` bounds them.
    fn active_tasks(&self, namespace: &str, max_tasks: Option<u32>) -> Option<u64> {
        max_tasks.map(|_| {
            self.rows
                .iter()
                .filter(|d| d.namespace == namespace && d.state == DeploymentState::Active)
                .count() as u64
        })
    }

    fn find(&self, namespace: &str, task: &str, version: i64) -> Option<&Deployment> {
        self.rows
            .iter()
            .find(|d| d.namespace == namespace && d.task == task && d.version == version)
    }

    /// Applies a plan; returns its answer.
    fn apply(&mut self, namespace: &str, task: &str, plan: Plan) -> Deployment {
        match plan {
            Plan::Unchanged(d) => d,
            Plan::Change(c, after) => {
                let at = c.event.at;
                for ch in &c.changes {
                    if let Some(row) = self.rows.iter_mut().find(|d| {
                        d.namespace == namespace && d.task == task && d.version == ch.version
                    }) {
                        row.state = ch.state;
                        row.updated_at = at;
                    }
                }
                if let Some(row) = c.insert {
                    self.rows.push(row);
                }
                self.events.push(c.event);
                self.revision = c.revision;
                after
            }
        }
    }
}

/// Deployments kept in process, beside a [`MemoryComponents`] (whose digests a deploy must name
/// and whose unreferenced components the garbage collection removes).
pub struct MemoryDeployments {
    clock: SharedClock,
    components: Arc<MemoryComponents>,
    state: Mutex<State>,
}

impl std::fmt::Debug for MemoryDeployments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryDeployments")
            .field("revision", &self.lock().revision)
            .finish()
    }
}

impl MemoryDeployments {
    /// An empty store on `clock` beside `components`.
    pub fn new(clock: SharedClock, components: Arc<MemoryComponents>) -> MemoryDeployments {
        MemoryDeployments {
            clock,
            components,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> chrono::DateTime<chrono::Utc> {
        onestep_core::time::truncate_micros(self.clock.now())
    }
}

fn newest_first<T: Clone>(
    rows: impl Iterator<Item = T>,
    revision: impl Fn(&T) -> i64 + Copy,
    before: Option<i64>,
    limit: u32,
) -> Page<T> {
    let mut v: Vec<T> = rows
        .filter(|r| before.is_none_or(|b| revision(r) < b))
        .collect();
    v.sort_by_key(|r| std::cmp::Reverse(revision(r)));
    v.truncate(limit as usize + 1);
    Page::of(v, limit, revision)
}

#[async_trait]
impl DeploymentStore for MemoryDeployments {
    async fn deploy(&self, new: &NewDeployment) -> Result<Deployed, DeploymentError> {
        check_new(new)?;
        let now = self.now();
        let mut s = self.lock();
        let stored = self.components.stat_now(&new.digest).is_some();
        let active = s.active(&new.namespace, &new.task).cloned();
        let max_version = s
            .rows
            .iter()
            .filter(|d| d.namespace == new.namespace && d.task == new.task)
            .map(|d| d.version)
            .max();
        let tasks = match active {
            None => s.active_tasks(&new.namespace, new.max_tasks),
            Some(_) => None,
        };
        let plan = plan_deploy(
            new,
            s.revision,
            active.as_ref(),
            max_version,
            stored,
            tasks,
            now,
        )?;
        let created = matches!(plan, Plan::Change(..));
        let deployment = s.apply(&new.namespace, &new.task, plan);
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
        Ok(self.lock().find(namespace, task, version).cloned())
    }

    async fn active(
        &self,
        namespace: &str,
        task: &str,
    ) -> Result<Option<Deployment>, DeploymentError> {
        check_name("namespace", namespace)?;
        check_name("task", task)?;
        Ok(self.lock().active(namespace, task).cloned())
    }

    async fn list(
        &self,
        filter: &DeploymentFilter,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Page<Deployment>, DeploymentError> {
        check_page(before, limit)?;
        let s = self.lock();
        let rows = s.rows.iter().filter(|d| {
            filter.namespace.as_ref().is_none_or(|n| &d.namespace == n)
                && filter.task.as_ref().is_none_or(|t| &d.task == t)
        });
        Ok(newest_first(rows.cloned(), |d| d.revision, before, limit))
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
        let now = self.now();
        let mut s = self.lock();
        let target = s.find(namespace, task, version).cloned();
        let active = s.active(namespace, task).cloned();
        let bound = TaskBound {
            max_tasks,
            active_tasks: match active {
                None => s.active_tasks(namespace, max_tasks),
                Some(_) => None,
            },
        };
        let plan = plan_activate(
            namespace,
            task,
            version,
            target,
            active.as_ref(),
            s.revision,
            actor,
            note,
            bound,
            now,
        )?;
        Ok(s.apply(namespace, task, plan))
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
        let now = self.now();
        let mut s = self.lock();
        let active = s.active(namespace, task).cloned();
        let plan = plan_deactivate(namespace, task, active, s.revision, actor, note, now)?;
        Ok(s.apply(namespace, task, plan))
    }

    async fn revision(&self) -> Result<i64, DeploymentError> {
        Ok(self.lock().revision)
    }

    async fn active_all(
        &self,
        namespaces: Option<&[String]>,
    ) -> Result<ActiveSet, DeploymentError> {
        let s = self.lock();
        let mut deployments: Vec<Deployment> = s
            .rows
            .iter()
            .filter(|d| {
                d.state == DeploymentState::Active
                    && namespaces.is_none_or(|ns| ns.contains(&d.namespace))
            })
            .cloned()
            .collect();
        deployments.sort_by(|a, b| (&a.namespace, &a.task).cmp(&(&b.namespace, &b.task)));
        Ok(ActiveSet {
            revision: s.revision,
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
        if let Some(t) = task {
            check_name("task", t)?;
        }
        check_page(before, limit)?;
        let s = self.lock();
        let rows = s
            .events
            .iter()
            .filter(|e| e.namespace == namespace && task.is_none_or(|t| e.task == t));
        Ok(newest_first(rows.cloned(), |e| e.revision, before, limit))
    }

    async fn collect_garbage(
        &self,
        grace: std::time::Duration,
    ) -> Result<GcReport, DeploymentError> {
        let cutoff = gc_cutoff(self.now(), grace);
        let s = self.lock();
        let referenced: HashSet<_> = s.rows.iter().map(|d| d.digest.clone()).collect();
        let referenced_by: HashSet<_> = s
            .rows
            .iter()
            .map(|d| (d.namespace.clone(), d.digest.clone()))
            .collect();
        Ok(self
            .components
            .remove_unreferenced(&referenced, &referenced_by, cutoff))
    }
}
