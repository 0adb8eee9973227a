//! Deployment cases (docs/deployments.md#data-model): versions are allocated per task from 1 and
//! a repeat of the active version writes nothing; concurrent deploys get distinct consecutive
//! versions with exactly one active; rollback (activate) and deactivate move the active version
//! and are audited; a deploy of a component that is not stored is refused and writes nothing;
//! the history pages newest first; the audit trail names who, when, from which digest to which;
//! the revision moves on every change and on nothing else; the garbage collection removes only
//! old components no deployment references. On tables without the deployment tables every call
//! is refused with the upgrade message, which [`supported`] checks before a case returns early.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use onestep_core::components::ComponentDigest;
use onestep_core::deployments::{
    DEPLOYMENTS_TABLE_ABSENT, DeploymentAction, DeploymentFilter, DeploymentState, DeploymentStore,
    NewDeployment, StoredSettings,
};
use serde_json::json;

use super::case;
use crate::suite::{Case, Fixture};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case(
            "deployments_versions_per_task_and_idempotent_repeat",
            |fx| Box::pin(versions(fx)),
        ),
        case(
            "deployments_concurrent_deploys_get_consecutive_versions",
            |fx| Box::pin(concurrent_deploys(fx)),
        ),
        case("deployments_rollback_and_deactivate", |fx| {
            Box::pin(rollback(fx))
        }),
        case(
            "deployments_concurrent_activations_leave_one_active",
            |fx| Box::pin(concurrent_activations(fx)),
        ),
        case("deployments_unknown_component_writes_nothing", |fx| {
            Box::pin(unknown_component(fx))
        }),
        case("deployments_list_pages_newest_first", |fx| {
            Box::pin(paging(fx))
        }),
        case("deployments_audit_trail_names_who_when_and_digests", |fx| {
            Box::pin(audit_trail(fx))
        }),
        case("deployments_revision_moves_on_every_change_only", |fx| {
            Box::pin(revision(fx))
        }),
        case(
            "deployments_gc_keeps_referenced_and_young_components",
            |fx| Box::pin(gc(fx)),
        ),
        case(
            "deployments_max_tasks_bounds_active_tasks_of_a_namespace",
            |fx| Box::pin(max_tasks(fx)),
        ),
        case("components_are_held_per_namespace", |fx| {
            Box::pin(holders(fx))
        }),
    ]
}

/// Whether the store keeps deployments; `false` (checked: the refusal naming the upgrade) on
/// tables without the deployment tables (or without the component tables they need).
async fn supported(fx: &Fixture) -> bool {
    match fx.deployments.revision().await {
        Ok(r) => {
            assert_eq!(r, 0, "nothing deployed yet");
            true
        }
        Err(e) => {
            let text = e.to_string();
            assert_eq!(e.code(), "invalid_argument", "{text}");
            assert!(
                text.contains(DEPLOYMENTS_TABLE_ABSENT)
                    && text.contains("onestep migrate --upgrade"),
                "{text}"
            );
            false
        }
    }
}

fn settings(v: serde_json::Value) -> StoredSettings {
    StoredSettings::from_value(&v).expect("settings")
}

fn new(ns: &str, task: &str, digest: &ComponentDigest, s: serde_json::Value) -> NewDeployment {
    NewDeployment {
        namespace: ns.to_owned(),
        task: task.to_owned(),
        digest: digest.clone(),
        settings: settings(s),
        actor: "alice".to_owned(),
        note: None,
        max_tasks: None,
    }
}

/// Stores a small component of `seed` and returns its digest.
async fn component(fx: &Fixture, seed: &str) -> ComponentDigest {
    fx.components
        .put(format!("component {seed}").as_bytes())
        .await
        .expect("put component")
}

async fn versions(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let c1 = component(&fx, "1").await;
    let c2 = component(&fx, "2").await;
    let d = fx.deployments.clone();
    let before = fx.clock.now_value();
    let v1 = d
        .deploy(&new("ns", "t", &c1, json!({"timeout": 30})))
        .await
        .expect("deploy v1");
    assert!(v1.created);
    let v1 = v1.deployment;
    assert_eq!((v1.version, v1.state), (1, DeploymentState::Active));
    assert_eq!(v1.digest, c1);
    assert_eq!(v1.settings.as_str(), r#"{"timeout":30}"#);
    assert_eq!(v1.deployed_by, "alice");
    assert_eq!(
        (v1.previous_version, v1.previous_digest.clone()),
        (None, None)
    );
    assert!(
        v1.deployed_at >= before - chrono::TimeDelta::seconds(1),
        "{v1:?}"
    );
    assert_eq!(d.get("ns", "t", 1).await.expect("get"), Some(v1.clone()));
    assert_eq!(d.active("ns", "t").await.expect("active"), Some(v1.clone()));

    // The same digest and settings again: the active version, nothing written.
    let rev = d.revision().await.expect("revision");
    let again = d
        .deploy(&new("ns", "t", &c1, json!({"timeout": 30})))
        .await
        .expect("repeat");
    assert!(!again.created);
    assert_eq!(again.deployment, v1);
    assert_eq!(d.revision().await.expect("revision"), rev);

    // Same digest, other settings: a new version; then another digest.
    fx.clock.advance(1.0);
    let v2 = d
        .deploy(&new("ns", "t", &c1, json!({"timeout": 60})))
        .await
        .expect("v2")
        .deployment;
    assert_eq!((v2.version, v2.previous_version), (2, Some(1)));
    let v3 = d
        .deploy(&new("ns", "t", &c2, json!({"timeout": 60})))
        .await
        .expect("v3")
        .deployment;
    assert_eq!(v3.version, 3);
    assert_eq!(v3.previous_digest, Some(c1.clone()));
    let states: Vec<_> = [1, 2, 3]
        .iter()
        .map(|v| (*v, d.get("ns", "t", *v)))
        .collect();
    for (v, f) in states {
        let row = f.await.expect("get").expect("stored");
        let want = if v == 3 {
            DeploymentState::Active
        } else {
            DeploymentState::Superseded
        };
        assert_eq!(row.state, want, "version {v}");
    }
    // Versions are per (namespace, task).
    let other_task = d
        .deploy(&new("ns", "u", &c1, json!({})))
        .await
        .expect("other task")
        .deployment;
    let other_ns = d
        .deploy(&new("ns2", "t", &c1, json!({})))
        .await
        .expect("other namespace")
        .deployment;
    assert_eq!((other_task.version, other_ns.version), (1, 1));
    assert_eq!(d.get("ns", "t", 4).await.expect("get"), None);
    assert_eq!(d.active("ns", "none").await.expect("active"), None);
    let e = d.get("ns", "t", 0).await.expect_err("version 0");
    assert!(e.to_string().contains("version must be 1 or more"), "{e}");
}

async fn concurrent_deploys(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let c = component(&fx, "c").await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let d: Arc<dyn DeploymentStore> = Arc::clone(&fx.deployments);
        let n = new("ns", "t", &c, json!({ "i": i }));
        tasks.push(tokio::spawn(async move { d.deploy(&n).await }));
    }
    let mut versions = BTreeSet::new();
    for t in tasks {
        let got = t.await.expect("join").expect("deploy");
        assert!(got.created);
        versions.insert(got.deployment.version);
    }
    assert_eq!(versions, (1..=8).collect::<BTreeSet<i64>>());
    let page = fx
        .deployments
        .list(&DeploymentFilter::default(), None, 50)
        .await
        .expect("list");
    assert_eq!(page.items.len(), 8);
    let active: Vec<_> = page
        .items
        .iter()
        .filter(|d| d.state == DeploymentState::Active)
        .collect();
    assert_eq!(active.len(), 1, "{page:?}");
    assert_eq!(active[0].version, 8, "the last deploy serves");
    assert_eq!(fx.deployments.revision().await.expect("revision"), 8);
    let audit = fx
        .deployments
        .audit("ns", Some("t"), None, 50)
        .await
        .expect("audit");
    let revs: Vec<i64> = audit.items.iter().map(|e| e.revision).collect();
    assert_eq!(revs, (1..=8).rev().collect::<Vec<i64>>());
    // Each deploy went from the version before it.
    for e in &audit.items {
        assert_eq!(
            e.from_version,
            (e.version > 1).then(|| e.version - 1),
            "{e:?}"
        );
    }
}

async fn rollback(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let c1 = component(&fx, "1").await;
    let c2 = component(&fx, "2").await;
    let d = fx.deployments.clone();
    d.deploy(&new("ns", "t", &c1, json!({}))).await.expect("v1");
    d.deploy(&new("ns", "t", &c2, json!({}))).await.expect("v2");
    fx.clock.advance(5.0);
    let back = d
        .activate("ns", "t", 1, "bob", Some("v2 fails"), None)
        .await
        .expect("rollback");
    assert_eq!((back.version, back.state), (1, DeploymentState::Active));
    assert_eq!(back.digest, c1);
    assert_eq!(back.deployed_by, "alice", "the deploy's author stays");
    assert_eq!(
        d.active("ns", "t")
            .await
            .expect("active")
            .map(|a| a.version),
        Some(1)
    );
    assert_eq!(
        d.get("ns", "t", 2).await.expect("get").map(|r| r.state),
        Some(DeploymentState::Superseded)
    );
    // Activating the active version changes nothing.
    let rev = d.revision().await.expect("revision");
    assert_eq!(
        d.activate("ns", "t", 1, "bob", None, None)
            .await
            .expect("again")
            .version,
        1
    );
    assert_eq!(d.revision().await.expect("revision"), rev);
    // Unknown version.
    let e = d
        .activate("ns", "t", 9, "bob", None, None)
        .await
        .expect_err("v9");
    assert_eq!(e.code(), "deployment_not_found", "{e}");
    assert!(e.to_string().contains("no deployment version 9"), "{e}");
    assert_eq!(d.revision().await.expect("revision"), rev);

    // Deactivate: nothing serves; a second deactivate is refused.
    let stopped = d
        .deactivate("ns", "t", "carol", None)
        .await
        .expect("deactivate");
    assert_eq!(
        (stopped.version, stopped.state),
        (1, DeploymentState::Inactive)
    );
    assert_eq!(d.active("ns", "t").await.expect("active"), None);
    let e = d
        .deactivate("ns", "t", "carol", None)
        .await
        .expect_err("nothing active");
    assert_eq!(e.code(), "no_active_deployment", "{e}");
    let e = d
        .deactivate("ns", "never", "carol", None)
        .await
        .expect_err("never deployed");
    assert_eq!(e.code(), "no_active_deployment", "{e}");
    // Activate after a deactivation: from no version.
    let again = d
        .activate("ns", "t", 2, "carol", None, None)
        .await
        .expect("v2");
    assert_eq!(again.state, DeploymentState::Active);
    let last = d.audit("ns", Some("t"), None, 1).await.expect("audit");
    assert_eq!(last.items[0].action, DeploymentAction::Activate);
    assert_eq!(last.items[0].from_version, None);
    // A deploy after a deactivation starts from no active version too, numbered after the
    // highest.
    d.deactivate("ns", "t", "carol", None)
        .await
        .expect("deactivate");
    let v3 = d.deploy(&new("ns", "t", &c1, json!({}))).await.expect("v3");
    assert!(v3.created, "no active version to repeat");
    assert_eq!(
        (v3.deployment.version, v3.deployment.previous_version),
        (3, None)
    );
}

async fn concurrent_activations(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let c = component(&fx, "c").await;
    let d = fx.deployments.clone();
    for i in 0..3 {
        d.deploy(&new("ns", "t", &c, json!({ "i": i })))
            .await
            .expect("deploy");
    }
    let mut tasks = Vec::new();
    for round in 0..12 {
        let d: Arc<dyn DeploymentStore> = Arc::clone(&d);
        tasks.push(tokio::spawn(async move {
            d.activate("ns", "t", 1 + (round % 3), "ops", None, None)
                .await
        }));
    }
    for t in tasks {
        t.await.expect("join").expect("activate");
    }
    let page = d
        .list(&DeploymentFilter::default(), None, 10)
        .await
        .expect("list");
    let active: Vec<_> = page
        .items
        .iter()
        .filter(|r| r.state == DeploymentState::Active)
        .collect();
    assert_eq!(active.len(), 1, "{page:?}");
    // The last audited activation is the one serving; the revision counts every change.
    let audit = d.audit("ns", None, None, 200).await.expect("audit");
    let changes = audit.items.len() as i64;
    assert_eq!(d.revision().await.expect("revision"), changes);
    assert_eq!(audit.items[0].version, active[0].version);
    for pair in audit.items.windows(2) {
        assert!(pair[0].revision > pair[1].revision);
        // Each event went from the version the one before it left serving.
        if pair[0].action == DeploymentAction::Activate {
            assert_eq!(pair[0].from_version, Some(pair[1].version), "{pair:?}");
        }
    }
}

async fn unknown_component(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let missing = ComponentDigest::of(b"never stored");
    let e = fx
        .deployments
        .deploy(&new("ns", "t", &missing, json!({})))
        .await
        .expect_err("unknown component");
    assert_eq!(e.code(), "unknown_component", "{e}");
    assert!(e.to_string().contains(missing.as_str()), "{e}");
    // Bad names are refused before anything is read.
    let c = component(&fx, "c").await;
    for (n, field) in [
        (new("", "t", &c, json!({})), "namespace"),
        (new("ns", " t", &c, json!({})), "task"),
        (
            NewDeployment {
                actor: String::new(),
                ..new("ns", "t", &c, json!({}))
            },
            "actor",
        ),
        (
            NewDeployment {
                note: Some("x".repeat(1001)),
                ..new("ns", "t", &c, json!({}))
            },
            "note",
        ),
    ] {
        let e = fx.deployments.deploy(&n).await.expect_err(field);
        assert_eq!(e.code(), "invalid_argument", "{e}");
        assert!(e.to_string().starts_with(field), "{e}");
    }
    assert_eq!(fx.deployments.revision().await.expect("revision"), 0);
    let page = fx
        .deployments
        .list(&DeploymentFilter::default(), None, 10)
        .await
        .expect("list");
    assert!(page.items.is_empty() && page.next_before.is_none());
    assert!(
        fx.deployments
            .audit("ns", None, None, 10)
            .await
            .expect("audit")
            .items
            .is_empty()
    );
    assert_eq!(
        fx.deployments.active("ns", "t").await.expect("active"),
        None
    );
}

async fn paging(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let c = component(&fx, "c").await;
    let d = fx.deployments.clone();
    // a/t ×3, a/u ×2, b/t ×2, interleaved: revisions 1..=7.
    let order = [
        ("a", "t"),
        ("a", "u"),
        ("b", "t"),
        ("a", "t"),
        ("b", "t"),
        ("a", "u"),
        ("a", "t"),
    ];
    for (i, (ns, task)) in order.iter().enumerate() {
        d.deploy(&new(ns, task, &c, json!({ "i": i })))
            .await
            .expect("deploy");
    }
    let mut seen = Vec::new();
    let mut before = None;
    loop {
        let page = d
            .list(&DeploymentFilter::default(), before, 3)
            .await
            .expect("page");
        assert!(page.items.len() <= 3);
        seen.extend(page.items.iter().map(|r| r.revision));
        match page.next_before {
            Some(b) => before = Some(b),
            None => break,
        }
    }
    assert_eq!(seen, (1..=7).rev().collect::<Vec<i64>>());
    let a = d
        .list(
            &DeploymentFilter {
                namespace: Some("a".into()),
                task: None,
            },
            None,
            10,
        )
        .await
        .expect("namespace a");
    let got: Vec<(String, i64)> = a
        .items
        .iter()
        .map(|r| (r.task.clone(), r.version))
        .collect();
    assert_eq!(
        got,
        [
            ("t".to_owned(), 3),
            ("u".to_owned(), 2),
            ("t".to_owned(), 2),
            ("u".to_owned(), 1),
            ("t".to_owned(), 1)
        ]
    );
    let at = d
        .list(
            &DeploymentFilter {
                namespace: Some("a".into()),
                task: Some("t".into()),
            },
            None,
            2,
        )
        .await
        .expect("a/t");
    assert_eq!(
        at.items.iter().map(|r| r.version).collect::<Vec<_>>(),
        [3, 2]
    );
    let rest = d
        .list(
            &DeploymentFilter {
                namespace: Some("a".into()),
                task: Some("t".into()),
            },
            at.next_before,
            2,
        )
        .await
        .expect("a/t page 2");
    assert_eq!(
        rest.items.iter().map(|r| r.version).collect::<Vec<_>>(),
        [1]
    );
    assert_eq!(rest.next_before, None);
    let t_any = d
        .list(
            &DeploymentFilter {
                namespace: None,
                task: Some("t".into()),
            },
            None,
            10,
        )
        .await
        .expect("task t");
    assert_eq!(t_any.items.len(), 5);
    for bad in [0, 201] {
        let e = d
            .list(&DeploymentFilter::default(), None, bad)
            .await
            .expect_err("limit");
        assert!(
            e.to_string().contains("limit must be between 1 and 200"),
            "{e}"
        );
    }
}

async fn audit_trail(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let c1 = component(&fx, "1").await;
    let c2 = component(&fx, "2").await;
    let d = fx.deployments.clone();
    let t0 = fx.clock.now_value();
    d.deploy(&NewDeployment {
        note: Some("first".into()),
        ..new("ns", "t", &c1, json!({}))
    })
    .await
    .expect("v1");
    fx.clock.advance(10.0);
    d.deploy(&NewDeployment {
        actor: "bob".into(),
        ..new("ns", "t", &c2, json!({}))
    })
    .await
    .expect("v2");
    fx.clock.advance(10.0);
    d.activate("ns", "t", 1, "carol", Some("rollback: v2 is slow"), None)
        .await
        .expect("rollback");
    fx.clock.advance(10.0);
    d.deactivate("ns", "t", "dave", None).await.expect("stop");
    // Another task's and another namespace's events stay out of this trail.
    d.deploy(&new("ns", "other", &c1, json!({})))
        .await
        .expect("other");
    d.deploy(&new("ns2", "t", &c1, json!({})))
        .await
        .expect("ns2");

    let trail = d.audit("ns", Some("t"), None, 50).await.expect("audit");
    assert_eq!(trail.next_before, None);
    let got: Vec<_> = trail
        .items
        .iter()
        .rev()
        .map(|e| {
            (
                e.action,
                e.version,
                e.digest.clone(),
                e.from_version,
                e.from_digest.clone(),
                e.actor.clone(),
                e.note.clone(),
                (e.at - t0).num_seconds(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                DeploymentAction::Deploy,
                1,
                c1.clone(),
                None,
                None,
                "alice".to_owned(),
                Some("first".to_owned()),
                0
            ),
            (
                DeploymentAction::Deploy,
                2,
                c2.clone(),
                Some(1),
                Some(c1.clone()),
                "bob".to_owned(),
                None,
                10
            ),
            (
                DeploymentAction::Activate,
                1,
                c1.clone(),
                Some(2),
                Some(c2.clone()),
                "carol".to_owned(),
                Some("rollback: v2 is slow".to_owned()),
                20
            ),
            (
                DeploymentAction::Deactivate,
                1,
                c1.clone(),
                Some(1),
                Some(c1.clone()),
                "dave".to_owned(),
                None,
                30
            ),
        ]
    );
    for e in &trail.items {
        assert_eq!((e.namespace.as_str(), e.task.as_str()), ("ns", "t"));
    }
    let ns = d
        .audit("ns", None, None, 50)
        .await
        .expect("namespace audit");
    assert_eq!(ns.items.len(), 5);
    let page = d.audit("ns", None, None, 2).await.expect("page");
    assert_eq!(page.items.len(), 2);
    let next = d
        .audit("ns", None, page.next_before, 50)
        .await
        .expect("next");
    assert_eq!(next.items.len(), 3);
    // The deployment row keeps its own audit fields.
    let v2 = d.get("ns", "t", 2).await.expect("get").expect("v2");
    assert_eq!(v2.deployed_by, "bob");
    assert_eq!((v2.deployed_at - t0).num_seconds(), 10);
    assert_eq!(v2.previous_digest, Some(c1.clone()));
    let v1 = d.get("ns", "t", 1).await.expect("get").expect("v1");
    assert_eq!(v1.note.as_deref(), Some("first"));
    assert_eq!(v1.state, DeploymentState::Inactive);
    assert_eq!((v1.updated_at - t0).num_seconds(), 30);
}

async fn revision(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let c1 = component(&fx, "1").await;
    let c2 = component(&fx, "2").await;
    let d = fx.deployments.clone();
    let rev = || {
        let d = d.clone();
        async move { d.revision().await.expect("revision") }
    };
    assert_eq!(rev().await, 0);
    d.deploy(&new("a", "t", &c1, json!({}))).await.expect("a/t");
    assert_eq!(rev().await, 1);
    d.deploy(&new("b", "t", &c2, json!({}))).await.expect("b/t");
    assert_eq!(rev().await, 2);
    // Reads, repeats, refusals and a collection move nothing.
    d.deploy(&new("a", "t", &c1, json!({})))
        .await
        .expect("repeat");
    d.activate("a", "t", 1, "x", None, None)
        .await
        .expect("active already");
    let _ = d
        .activate("a", "t", 7, "x", None, None)
        .await
        .expect_err("no v7");
    let _ = d
        .deploy(&new("a", "t", &ComponentDigest::of(b"nope"), json!({})))
        .await
        .expect_err("unknown");
    let _ = d
        .deactivate("a", "none", "x", None)
        .await
        .expect_err("none");
    d.list(&DeploymentFilter::default(), None, 10)
        .await
        .expect("list");
    d.audit("a", None, None, 10).await.expect("audit");
    d.collect_garbage(Duration::ZERO).await.expect("gc");
    assert_eq!(rev().await, 2);
    // Every change moves it by one.
    d.deploy(&new("a", "t", &c2, json!({})))
        .await
        .expect("a/t v2");
    assert_eq!(rev().await, 3);
    d.activate("a", "t", 1, "x", None, None)
        .await
        .expect("rollback");
    assert_eq!(rev().await, 4);
    d.deactivate("b", "t", "x", None).await.expect("stop b");
    assert_eq!(rev().await, 5);

    let all = d.active_all(None).await.expect("active_all");
    assert_eq!(all.revision, 5);
    let got: Vec<_> = all
        .deployments
        .iter()
        .map(|r| (r.namespace.as_str(), r.task.as_str(), r.version))
        .collect();
    assert_eq!(got, [("a", "t", 1)]);
    d.deploy(&new("c", "t", &c1, json!({}))).await.expect("c/t");
    let some = d
        .active_all(Some(&["c".to_owned(), "b".to_owned()]))
        .await
        .expect("active_all c, b");
    assert_eq!(some.revision, 6);
    assert_eq!(
        some.deployments
            .iter()
            .map(|r| r.namespace.as_str())
            .collect::<Vec<_>>(),
        ["c"]
    );
    let none = d.active_all(Some(&[])).await.expect("no namespaces");
    assert!(none.deployments.is_empty());
}

async fn gc(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let d = fx.deployments.clone();
    let superseded = component(&fx, "superseded").await;
    let active = component(&fx, "active").await;
    let stopped = component(&fx, "stopped").await;
    let orphan_bytes = vec![9u8; 3000];
    let orphan = fx.components.put(&orphan_bytes).await.expect("orphan");
    d.deploy(&new("ns", "t", &superseded, json!({})))
        .await
        .expect("v1");
    d.deploy(&new("ns", "t", &active, json!({})))
        .await
        .expect("v2");
    d.deploy(&new("ns", "u", &stopped, json!({})))
        .await
        .expect("u");
    d.deactivate("ns", "u", "ops", None).await.expect("stop u");
    let rev = d.revision().await.expect("revision");

    // Everything is younger than the grace: nothing goes.
    fx.clock.advance(600.0);
    let young = fx.components.put(b"young orphan").await.expect("young");
    let report = d
        .collect_garbage(Duration::from_secs(3600))
        .await
        .expect("gc");
    assert_eq!((report.components, report.bytes), (0, 0));
    assert!(fx.components.exists(&orphan).await.expect("exists"));

    // An hour later the old orphan goes; the young one (stored 10 minutes later) and every
    // referenced one stay.
    fx.clock.advance(3000.0 + 60.0);
    let report = d
        .collect_garbage(Duration::from_secs(3600))
        .await
        .expect("gc");
    assert_eq!((report.components, report.bytes), (1, 3000), "{report:?}");
    assert!(!fx.components.exists(&orphan).await.expect("exists"));
    assert_eq!(fx.probe.component_rows(&orphan).await, (0, 0));
    for kept in [&superseded, &active, &stopped, &young] {
        assert!(fx.components.exists(kept).await.expect("exists"), "{kept}");
        assert!(
            fx.components.get(kept).await.expect("get").is_some(),
            "{kept}"
        );
    }
    assert_eq!(
        d.revision().await.expect("revision"),
        rev,
        "gc is no change"
    );
    // The collected component cannot be deployed until it is stored again.
    let e = d
        .deploy(&new("ns", "w", &orphan, json!({})))
        .await
        .expect_err("collected");
    assert_eq!(e.code(), "unknown_component", "{e}");
    assert_eq!(
        fx.components.put(&orphan_bytes).await.expect("again"),
        orphan
    );
    d.deploy(&new("ns", "w", &orphan, json!({})))
        .await
        .expect("deploy after storing again");
    // With no grace, every unreferenced component goes, the young one too.
    let report = d.collect_garbage(Duration::ZERO).await.expect("gc");
    assert_eq!(report.components, 1, "{report:?}");
    assert!(!fx.components.exists(&young).await.expect("exists"));
    // Rollback to the oldest version still finds its component.
    let back = d
        .activate("ns", "t", 1, "ops", None, None)
        .await
        .expect("rollback");
    assert_eq!(
        fx.components
            .get(&back.digest)
            .await
            .expect("get")
            .as_deref(),
        Some(&b"component superseded"[..])
    );
}

/// `max_tasks` (docs/deployment-policy.md#the-checks): a deploy or an activation that would make
/// one more task of the namespace active than the ceiling is refused and writes nothing; a new
/// version of an active task adds none; other namespaces are not counted; concurrent deploys of
/// new tasks never exceed it (the count is read under the revision lock).
async fn max_tasks(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let c = component(&fx, "m").await;
    let d = fx.deployments.clone();
    let bounded = |ns: &str, task: &str, s: serde_json::Value| NewDeployment {
        max_tasks: Some(2),
        ..new(ns, task, &c, s)
    };
    d.deploy(&bounded("ns", "t1", json!({}))).await.expect("t1");
    d.deploy(&bounded("ns", "t2", json!({}))).await.expect("t2");
    let rev = d.revision().await.expect("revision");
    let e = d
        .deploy(&bounded("ns", "t3", json!({})))
        .await
        .expect_err("a third task");
    assert_eq!(e.code(), "policy_violation", "{e}");
    assert!(
        e.to_string().contains(
            "asked 3 tasks with an active version, the ceiling for namespace \"ns\" is 2"
        ),
        "{e}"
    );
    assert_eq!(
        d.revision().await.expect("revision"),
        rev,
        "nothing written"
    );
    assert!(d.active("ns", "t3").await.expect("read").is_none());
    // A new version of an active task adds no task; another namespace has its own count.
    d.deploy(&bounded("ns", "t1", json!({"v": 2})))
        .await
        .expect("t1 v2");
    d.deploy(&bounded("other", "t3", json!({})))
        .await
        .expect("other namespace");
    // A deactivated task frees its place; activating it again takes one.
    d.deactivate("ns", "t2", "alice", None)
        .await
        .expect("stop t2");
    d.deploy(&bounded("ns", "t3", json!({}))).await.expect("t3");
    let e = d
        .activate("ns", "t2", 1, "alice", None, Some(2))
        .await
        .expect_err("t2 again");
    assert_eq!(e.code(), "policy_violation", "{e}");
    assert!(d.active("ns", "t2").await.expect("read").is_none());
    d.activate("ns", "t2", 1, "alice", None, None)
        .await
        .expect("without a bound");

    // Eight concurrent deploys of new tasks under a ceiling of 3: exactly 3 serve.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let d: Arc<dyn DeploymentStore> = Arc::clone(&fx.deployments);
        let n = NewDeployment {
            max_tasks: Some(3),
            ..new("race", &format!("t{i}"), &c, json!({}))
        };
        tasks.push(tokio::spawn(async move { d.deploy(&n).await }));
    }
    let (mut ok, mut refused) = (0, 0);
    for t in tasks {
        match t.await.expect("join") {
            Ok(_) => ok += 1,
            Err(e) => {
                assert_eq!(e.code(), "policy_violation", "{e}");
                refused += 1;
            }
        }
    }
    assert_eq!((ok, refused), (3, 5));
    let active = d
        .active_all(Some(&["race".to_owned()]))
        .await
        .expect("active");
    assert_eq!(active.deployments.len(), 3);
}

/// Who holds a component (docs/semantics.md#component-store): `put_for` stores the bytes once
/// and records the namespace; `stat_for` answers only a namespace that stored them, exactly as
/// for bytes never stored otherwise; `created` is per namespace. The garbage collection forgets a
/// holder stored more than the grace ago whose namespace deploys nothing of it, keeps a component
/// that a young holder (one that stored it again lately) still holds, and removes the rest as
/// before.
async fn holders(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let c = fx.components.clone();
    let d = fx.deployments.clone();
    let shared = b"a component two namespaces store".to_vec();
    let a = c.put_for("a", &shared).await.expect("a stores");
    assert!(a.created);
    let again = c.put_for("a", &shared).await.expect("a again");
    assert_eq!(
        (again.digest.clone(), again.created),
        (a.digest.clone(), false)
    );
    // b stores the same bytes: new for b, and b is told nothing of a.
    let b = c.put_for("b", &shared).await.expect("b stores");
    assert_eq!((b.digest.clone(), b.created), (a.digest.clone(), true));
    assert_eq!(fx.probe.component_rows(&a.digest).await.0, 1, "stored once");
    let size = shared.len() as u64;
    for ns in ["a", "b"] {
        let stat = c.stat_for(ns, &a.digest).await.expect("stat_for");
        assert_eq!(stat.map(|s| s.size), Some(size), "{ns}");
    }
    // A namespace that never stored them: as if they were not stored at all.
    assert_eq!(c.stat_for("z", &a.digest).await.expect("stat_for"), None);
    assert_eq!(
        c.stat_for("z", &ComponentDigest::of(b"never"))
            .await
            .expect("stat_for"),
        None
    );
    // Bytes stored without a namespace (`put`) are held by none.
    let plain = c.put(b"stored by the operator").await.expect("put");
    assert!(c.stat(&plain).await.expect("stat").is_some());
    assert_eq!(c.stat_for("a", &plain).await.expect("stat_for"), None);
    let kept = c.put_for("e", b"stored again later").await.expect("e");

    // a deploys the shared bytes; b never does.
    d.deploy(&new("a", "t", &a.digest, json!({})))
        .await
        .expect("deploy");
    fx.clock.advance(3700.0);
    // e stores its (by now old) component again: its holder is young again.
    let e = c
        .put_for("e", b"stored again later")
        .await
        .expect("e again");
    assert!(!e.created);
    let report = d
        .collect_garbage(Duration::from_secs(3600))
        .await
        .expect("gc");
    // Only the operator's old, unheld, unreferenced bytes went.
    assert_eq!(report.components, 1, "{report:?}");
    assert!(c.stat(&plain).await.expect("stat").is_none());
    // a deploys the shared bytes: kept, and still held by a; b's old holder is forgotten.
    assert!(
        c.stat_for("a", &a.digest)
            .await
            .expect("stat_for")
            .is_some()
    );
    assert_eq!(c.stat_for("b", &a.digest).await.expect("stat_for"), None);
    // e's component is old but e stored it again within the grace: kept and held.
    assert!(
        c.stat_for("e", &kept.digest)
            .await
            .expect("stat_for")
            .is_some()
    );
    // b stores the bytes again and holds them again.
    let b2 = c.put_for("b", &shared).await.expect("b again");
    assert!(b2.created);
}
