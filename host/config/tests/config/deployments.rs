//! The operator's `deployments:` section: secrets and policy ceilings
//! (docs/configuration.md#deployments, docs/deployment-policy.md), and their use with a
//! tenant's manifest.

use std::path::Path;
use std::time::Duration;

use onestep_config::{EnvLookup, LoadOptions};
use onestep_core::deploy_policy::{PolicyCeiling, ViolationKind};

use crate::common::{BASE, err, load_text};

const POLICY: &str = "
deployments:
  secrets:
    openai:
      value: \"Bearer ${OPENAI_API_KEY:-sk-test}\"
      origins: [https://api.openai.com]
    github: {value: token-gh, origins: [https://api.github.com]}
  policy:
    default:
      timeout_s: 60
      concurrency: 2
      sandbox:
        memory_limit_bytes: 67108864
    namespaces:
      team-a:
        max_component_bytes: 16777216
        max_tasks: 50
        timeout_s: 300
        concurrency: 8
        max_attempts: 5
        secrets: [openai]
        sandbox:
          memory_limit_bytes: 268435456
          fuel: 1000000000
          max_instances: 20
          network:
            allow: [https://api.openai.com, \"https://*.example.com\"]
            max_requests: 500
";

fn doc(extra: &str) -> String {
    format!("{BASE}{extra}")
}

#[test]
fn the_section_builds_ceilings_and_secrets() {
    let cfg = load_text(&doc(POLICY), true).expect("config");
    let d = cfg.deployments.expect("deployments");
    assert_eq!(
        d.policy.secret_names.iter().collect::<Vec<_>>(),
        ["github", "openai"]
    );
    assert_eq!(d.secrets["openai"].value.expose(), "Bearer sk-test");
    assert_eq!(
        d.secrets["openai"].origins[0].to_string(),
        "https://api.openai.com:443"
    );
    let def = d.policy.default.as_ref().expect("default");
    assert_eq!(def.timeout, Some(Duration::from_secs(60)));
    assert_eq!(def.concurrency, 2);
    assert_eq!(def.memory_limit_bytes, 64 << 20);
    // Keys left out are the built-in defaults: no network, no secrets, no retries.
    assert!(def.allow.is_empty() && def.secrets.is_empty());
    assert_eq!(def.max_attempts, 1);
    assert_eq!(def.max_component_bytes, 64 << 20);
    assert_eq!(
        def.max_tasks,
        onestep_core::deploy_policy::DEFAULT_MAX_TASKS
    );
    let a = &d.policy.namespaces["team-a"];
    assert_eq!(a.max_component_bytes, 16 << 20);
    assert_eq!(a.max_tasks, 50);
    assert_eq!(a.max_attempts, 5);
    assert_eq!(a.fuel, Some(1_000_000_000));
    assert_eq!(a.max_instances, 20);
    assert_eq!(a.max_requests, 500);
    assert_eq!(a.allow.len(), 2);
    assert_eq!(
        a.secrets.keys().collect::<Vec<_>>(),
        ["openai"],
        "only the listed secrets"
    );
    assert_eq!(a.max_tables, PolicyCeiling::default().max_tables);
    // The per-namespace entry wins over the default, not merged with it.
    assert!(std::ptr::eq(d.policy.ceiling_for("team-a").expect("a"), a));
    assert!(std::ptr::eq(
        d.policy.ceiling_for("other").expect("default"),
        def
    ));
    // Secret values never show in Debug.
    assert!(!format!("{:?}", d.secrets).contains("sk-test"));
}

#[test]
fn without_the_section_or_a_default_deployments_are_refused() {
    let cfg = load_text(BASE, true).expect("config");
    assert!(cfg.deployments.is_none());
    let cfg = load_text(
        &doc("deployments:\n  policy:\n    namespaces:\n      team-a: {}\n"),
        true,
    )
    .expect("config");
    let p = cfg.deployments.expect("deployments").policy;
    assert!(p.default.is_none());
    assert!(p.ceiling_for("team-a").is_some());
    assert!(p.ceiling_for("team-b").is_none());
}

#[test]
fn errors_name_the_path() {
    let cases: &[(&str, &str)] = &[
        ("deployments: [1]", "deployments must be a mapping"),
        (
            "deployments: {colour: red}",
            "unsupported fields for deployments: colour",
        ),
        (
            "deployments: {policy: {default: {memory_limit_bytes: 1}}}",
            "unsupported fields for deployments.policy.default: memory_limit_bytes",
        ),
        (
            "deployments: {policy: {default: {sandbox: {preopens: []}}}}",
            "unsupported fields for deployments.policy.default.sandbox: preopens",
        ),
        (
            "deployments: {policy: {default: {sandbox: {network: {headers: {}}}}}}",
            "unsupported fields for deployments.policy.default.sandbox.network: headers",
        ),
        (
            "deployments: {policy: {default: {sandbox: {memory_limit_bytes: 5}}}}",
            "deployments.policy.default.sandbox: memory_limit_bytes must be an integer >= 1048576 (1 MiB)",
        ),
        (
            "deployments: {policy: {default: {sandbox: {max_instances: 5000}}}}",
            "deployments.policy.default.sandbox: max_instances must be an integer from 1 to 1000",
        ),
        (
            "deployments: {policy: {default: {sandbox: {network: {allow: [https://*.org]}}}}}",
            "deployments.policy.default.sandbox.network.allow[0]: \"https://*.org\" is not an origin",
        ),
        (
            "deployments: {policy: {default: {sandbox: {network: {allow: [https://a.org, HTTPS://A.org:443]}}}}}",
            "deployments.policy.default.sandbox.network.allow[1]: duplicate origin https://a.org:443",
        ),
        (
            "deployments: {policy: {default: {max_component_bytes: 67108865}}}",
            "deployments.policy.default: max_component_bytes must be an integer from 1 to 67108864 (got 67108865)",
        ),
        (
            "deployments: {policy: {default: {max_tasks: 10001}}}",
            "deployments.policy.default: max_tasks must be an integer from 1 to 10000 (got 10001)",
        ),
        (
            "deployments: {policy: {default: {concurrency: 0}}}",
            "deployments.policy.default: concurrency must be an integer from 1 to 4294967295 (got 0)",
        ),
        (
            "deployments: {policy: {default: {timeout_s: 0}}}",
            "deployments.policy.default: timeout_s must be a number > 0",
        ),
        (
            "deployments: {policy: {default: {secrets: [openai]}}}",
            "deployments.policy.default.secrets[0]: \"openai\" is not a secret declared in deployments.secrets (declared: none)",
        ),
        (
            "deployments: {policy: {namespaces: {'': {}}}}",
            "deployments.policy.namespaces: a namespace must be non-empty",
        ),
        (
            "deployments: {policy: {namespaces: {a: 3}}}",
            "deployments.policy.namespaces.a: must be a mapping of ceilings",
        ),
        (
            "deployments: {secrets: {'a b': {value: x, origins: [https://a.org]}}}",
            "deployments.secrets: \"a b\" is not a secret name",
        ),
        (
            "deployments: {secrets: {a: {value: x}}}",
            "deployments.secrets.a: origins is required",
        ),
        (
            "deployments: {secrets: {a: {value: '', origins: [https://a.org]}}}",
            "deployments.secrets.a: value is empty",
        ),
        (
            "deployments: {secrets: {a: {value: [1], origins: [https://a.org]}}}",
            "deployments.secrets.a: value must be a string",
        ),
        (
            "deployments: {secrets: {a: {value: x, origins: https://a.org}}}",
            "deployments.secrets.a.origins: must be a list of origins",
        ),
        (
            "deployments: {secrets: {a: {value: x, origins: [https://a.org], scope: all}}}",
            "unsupported fields for deployments.secrets.a: scope",
        ),
    ];
    for strict in [false, true] {
        for (yaml, wanted) in cases {
            let e = err(&doc(yaml), strict);
            assert!(
                e.starts_with(wanted),
                "{yaml}\n  got: {e}\n  wanted: {wanted}"
            );
        }
    }
    // A secret's value is never repeated in an error.
    let e = err(
        &doc("deployments: {secrets: {a: {value: \"sk-live\\nx\", origins: [https://a.org]}}}"),
        false,
    );
    assert!(
        e.contains("control character") && !e.contains("sk-live"),
        "{e}"
    );
}

#[test]
fn a_manifest_is_checked_against_the_operators_policy() {
    let env = EnvLookup::isolated([("OPENAI_API_KEY", "sk-real")]);
    let cfg = onestep_config::load_str(
        &doc(POLICY),
        Path::new("/nonexistent/app.yaml"),
        &LoadOptions {
            env,
            check_files: false,
            ..LoadOptions::default()
        },
    )
    .expect("config");
    let d = cfg.deployments.expect("deployments");
    assert_eq!(d.secrets["openai"].value.expose(), "Bearer sk-real");
    let manifest = |ns: &str, extra: &str| {
        onestep_config::parse_manifest(
            &format!(
                "apiVersion: onestep/v1alpha1\nkind: Deployment\nnamespace: {ns}\ntask: summarize\n{extra}"
            ),
            Path::new("/tmp"),
        )
        .expect("manifest")
        .settings
    };
    let good = manifest(
        "team-a",
        "timeout_s: 300\nconcurrency: 8\nretry: {type: max_attempts, max_attempts: 5}\n\
         sandbox:\n  memory_limit_bytes: 268435456\n  fuel: 1000000000\n  max_instances: 20\n  \
         network:\n    \
         allow: [https://api.openai.com, https://docs.example.com]\n    max_requests: 500\n    \
         headers:\n      https://api.openai.com: {Authorization: {secret: openai}}\n",
    );
    assert_eq!(d.policy.check("team-a", &good, 16 << 20), Ok(()));
    // A ceiling below a built-in default binds a manifest that leaves the key out.
    let mut defaults = good.clone();
    defaults.sandbox.max_instances = onestep_config::model::DEFAULT_MAX_INSTANCES;
    assert_eq!(
        d.policy
            .check("team-a", &defaults, 1)
            .expect_err("default above")[0]
            .to_string(),
        "sandbox.max_instances: asked 32, the ceiling for namespace \"team-a\" is 20"
    );
    // Just above every ceiling at once, plus a secret sent elsewhere and one never declared.
    let bad = manifest(
        "team-a",
        "timeout_s: 301\nconcurrency: 9\nretry: {type: max_attempts, max_attempts: 6}\n\
         sandbox:\n  memory_limit_bytes: 268435457\n  max_instances: 21\n  network:\n    \
         allow: [https://api.openai.com, https://docs.example.com, https://a.b.example.com]\n    \
         max_requests: 501\n    headers:\n      \
         https://docs.example.com: {Authorization: {secret: openai}}\n      \
         https://api.openai.com: {X-Api-Key: {secret: github}, X-Other-Key: {secret: nope}}\n",
    );
    let v = d
        .policy
        .check("team-a", &bad, (16 << 20) + 1)
        .expect_err("violations");
    let text: Vec<String> = v.iter().map(ToString::to_string).collect();
    assert_eq!(
        text,
        [
            "component: asked 16777217, the ceiling for namespace \"team-a\" is 16777216",
            "sandbox.memory_limit_bytes: asked 268435457, the ceiling for namespace \"team-a\" is 268435456",
            "sandbox.max_instances: asked 21, the ceiling for namespace \"team-a\" is 20",
            "sandbox.network.max_requests: asked 501, the ceiling for namespace \"team-a\" is 500",
            "concurrency: asked 9, the ceiling for namespace \"team-a\" is 8",
            "retry.max_attempts: asked 6, the ceiling for namespace \"team-a\" is 5",
            "sandbox.fuel: asked unlimited, the ceiling for namespace \"team-a\" is 1000000000",
            "timeout_s: asked 301s, the ceiling for namespace \"team-a\" is 300s",
            "sandbox.network.allow[2]: asked https://a.b.example.com:443, which is outside the origins the operator allows namespace \"team-a\" (https://api.openai.com:443, https://*.example.com:443)",
            "sandbox.network.headers[\"https://docs.example.com:443\"].Authorization: asked secret \"openai\" for https://docs.example.com:443, but the operator binds secret \"openai\" to https://api.openai.com:443 only",
            "sandbox.network.headers[\"https://api.openai.com:443\"].X-Api-Key: asked secret \"github\", which namespace \"team-a\" may not reference (it may reference: openai)",
            "sandbox.network.headers[\"https://api.openai.com:443\"].X-Other-Key: asked secret \"nope\", which namespace \"team-a\" may not reference (it may reference: openai)",
        ]
    );
    assert_eq!(v[10].kind, ViolationKind::SecretNotAllowed);
    assert_eq!(v[11].kind, ViolationKind::SecretNotAllowed);
    // No secret value appears in any violation.
    assert!(
        text.iter()
            .all(|t| !t.contains("sk-real") && !t.contains("token-gh"))
    );
    // The default applies elsewhere; a token of team-b cannot deploy into team-a.
    let small = manifest("team-b", "timeout_s: 60\nconcurrency: 2\n");
    assert_eq!(d.policy.check("team-b", &small, 1), Ok(()));
    let v = d.policy.check("team-b", &good, 1).expect_err("mismatch");
    assert_eq!(v[0].kind, ViolationKind::NamespaceMismatch);
    let unlimited = manifest("team-b", "concurrency: 2\n");
    assert_eq!(
        d.policy
            .check("team-b", &unlimited, 1)
            .expect_err("timeout")[0]
            .to_string(),
        "timeout_s: asked unlimited, the ceiling for namespace \"team-b\" is 60s"
    );
}
