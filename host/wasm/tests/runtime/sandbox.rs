//! The guest sees only what its sandbox grants; escape attempts fail inside
//! the guest and come back as data.

use crate::common::*;
use onestep_wasm::{CancelHandle, InvokeError, Outcome, Preopen, PreopenMode, SandboxSettings};
use std::collections::BTreeMap;

/// Layout: `<tmp>/data` (read-write, `/data`), `<tmp>/ro` (read-only, `/ro`)
/// and `<tmp>/secret`, next to them and not preopened.
struct Layout {
    tmp: TempDir,
    sandbox: SandboxSettings,
}

fn layout() -> Layout {
    let tmp = TempDir::new("sandbox");
    let data = tmp.path().join("data");
    let ro = tmp.path().join("ro");
    std::fs::create_dir_all(&data).expect("mkdir");
    std::fs::create_dir_all(&ro).expect("mkdir");
    std::fs::write(tmp.path().join("secret"), "top secret").expect("write secret");
    std::fs::write(ro.join("doc.txt"), "read me").expect("write doc");
    let sandbox = SandboxSettings {
        preopens: vec![
            Preopen {
                host: data,
                guest: "/data".into(),
                mode: PreopenMode::Rw,
            },
            Preopen {
                host: ro,
                guest: "/ro".into(),
                mode: PreopenMode::Ro,
            },
        ],
        ..SandboxSettings::default()
    };
    Layout { tmp, sandbox }
}

async fn run(sandbox: &SandboxSettings, payload: serde_json::Value) -> serde_json::Value {
    let m = load("misbehave");
    let outcome = m
        .invoke(
            sandbox,
            ctx(1),
            &payload.to_string(),
            CancelHandle::new(),
            None,
        )
        .await;
    match outcome {
        Outcome::Succeeded(out) => json(&out),
        other => panic!("{payload}: expected data, got {other:?}"),
    }
}

#[tokio::test]
async fn every_escape_fails_inside_the_guest_and_is_reported_as_data() {
    let _g = shared();
    let l = layout();
    let cases = [
        serde_json::json!({"mode": "read_passwd"}),
        serde_json::json!({"mode": "escape"}),
        serde_json::json!({"mode": "escape", "path": "/data/../../../../etc/passwd"}),
        serde_json::json!({"mode": "escape", "path": "../secret"}),
        serde_json::json!({"mode": "write_ro"}),
        serde_json::json!({"mode": "write_ro", "path": "/ro/doc.txt"}),
        serde_json::json!({"mode": "env", "name": "PATH"}),
        serde_json::json!({"mode": "tcp"}),
        serde_json::json!({"mode": "tcp", "addr": "[::1]:3306"}),
    ];
    for payload in cases {
        let out = run(&l.sandbox, payload.clone()).await;
        eprintln!("{payload} -> {out}");
        assert_eq!(out["denied"], true, "{payload}: {out}");
        assert!(
            out["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{payload}: {out}"
        );
    }
    // Nothing was written through the read-only preopen.
    assert!(!l.tmp.path().join("ro/written.txt").exists());
    assert_eq!(
        std::fs::read_to_string(l.tmp.path().join("ro/doc.txt")).expect("doc"),
        "read me"
    );
}

#[tokio::test]
async fn granted_capabilities_work() {
    let _g = shared();
    let l = layout();
    let out = run(
        &l.sandbox,
        serde_json::json!({"mode": "read", "path": "/ro/doc.txt"}),
    )
    .await;
    assert_eq!(out["result"], "read me");
    let out = run(
        &l.sandbox,
        serde_json::json!({"mode": "write", "path": "/data/out.txt", "content": "hi"}),
    )
    .await;
    assert_eq!(out["denied"], false, "{out}");
    assert_eq!(
        std::fs::read_to_string(l.tmp.path().join("data/out.txt")).expect("out"),
        "hi"
    );

    // Env: explicit values and allow-listed host variables only.
    let host_path = std::env::var("PATH").expect("host PATH");
    let sandbox = SandboxSettings {
        env: vec!["PATH".into(), "ONESTEP_SURELY_UNSET_VAR".into()],
        env_values: BTreeMap::from([("GREETING".to_string(), "hello".to_string())]),
        ..SandboxSettings::default()
    };
    let out = run(
        &sandbox,
        serde_json::json!({"mode": "env", "name": "GREETING"}),
    )
    .await;
    assert_eq!(out["result"], "hello");
    let out = run(&sandbox, serde_json::json!({"mode": "env", "name": "PATH"})).await;
    assert_eq!(out["result"], host_path.as_str());
    let out = run(&sandbox, serde_json::json!({"mode": "env", "name": "HOME"})).await;
    assert_eq!(out["denied"], true);
}

#[tokio::test]
async fn two_tasks_preopens_are_isolated() {
    let _g = shared();
    let a = TempDir::new("tenant-a");
    let b = TempDir::new("tenant-b");
    let sandbox = |dir: &TempDir| SandboxSettings {
        preopens: vec![Preopen {
            host: dir.path().to_path_buf(),
            guest: "/data".into(),
            mode: PreopenMode::Rw,
        }],
        ..SandboxSettings::default()
    };
    let (sa, sb) = (sandbox(&a), sandbox(&b));
    let write_a =
        serde_json::json!({"mode": "write", "path": "/data/a.txt", "content": "tenant a"});
    let write_b =
        serde_json::json!({"mode": "write", "path": "/data/b.txt", "content": "tenant b"});
    // Run both at once.
    let (ra, rb) = tokio::join!(run(&sa, write_a), run(&sb, write_b));
    assert_eq!(
        (ra["denied"].clone(), rb["denied"].clone()),
        (false.into(), false.into())
    );
    // Each sees its own file only.
    let read = |p: &str| serde_json::json!({"mode": "read", "path": p});
    assert_eq!(run(&sa, read("/data/a.txt")).await["result"], "tenant a");
    assert_eq!(run(&sb, read("/data/b.txt")).await["result"], "tenant b");
    assert_eq!(run(&sa, read("/data/b.txt")).await["denied"], true);
    assert_eq!(run(&sb, read("/data/a.txt")).await["denied"], true);
    // Nor can one reach the other through relative paths.
    let b_name = b.path().file_name().and_then(|n| n.to_str()).expect("name");
    let sneaky = format!("/data/../{b_name}/b.txt");
    assert_eq!(run(&sa, read(&sneaky)).await["denied"], true);
    assert!(a.path().join("a.txt").exists() && !a.path().join("b.txt").exists());
    assert!(b.path().join("b.txt").exists() && !b.path().join("a.txt").exists());
}

#[tokio::test]
async fn missing_preopen_is_a_host_error() {
    let _g = shared();
    let m = load("misbehave");
    let sandbox = SandboxSettings {
        preopens: vec![Preopen {
            host: "/nonexistent/onestep".into(),
            guest: "/data".into(),
            mode: PreopenMode::Ro,
        }],
        ..SandboxSettings::default()
    };
    let outcome = m
        .invoke(
            &sandbox,
            ctx(1),
            r#"{"mode":"fatal"}"#,
            CancelHandle::new(),
            None,
        )
        .await;
    assert!(
        matches!(outcome, Outcome::HostError(InvokeError::Sandbox(_))),
        "{outcome:?}"
    );
}
