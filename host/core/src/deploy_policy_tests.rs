use super::*;
use crate::sandbox::NetworkSettings;
use crate::settings::Preopen;

fn o(s: &str) -> OriginPattern {
    OriginPattern::parse(s).expect(s)
}

fn settings(ns: &str) -> DeploymentSettings {
    DeploymentSettings {
        namespace: ns.into(),
        task: "summarize".into(),
        description: None,
        sandbox: SandboxSettings::default(),
        headers: Vec::new(),
        timeout: Some(Duration::from_secs(30)),
        retry: RetryPolicy::NoRetry,
        concurrency: 1,
        params: serde_json::Map::new(),
    }
}

fn allowing(s: &mut DeploymentSettings, origins: &[&str]) {
    s.sandbox.network = NetworkSettings::allowing(origins.iter().copied()).expect("origins");
}

fn messages(r: Result<(), Vec<PolicyViolation>>) -> Vec<String> {
    r.expect_err("violations")
        .iter()
        .map(ToString::to_string)
        .collect()
}

#[test]
fn the_default_ceiling_admits_the_default_settings() {
    let mut s = settings("team-a");
    s.timeout = None;
    assert_eq!(check_within(&s, &PolicyCeiling::default(), 1024), Ok(()));
}

#[test]
fn every_numeric_ceiling_admits_its_value_and_refuses_one_more() {
    type Set = fn(&mut DeploymentSettings, u64);
    type Cap = fn(&mut PolicyCeiling, u64);
    let cases: Vec<(&str, Set, Cap)> = vec![
        (
            "sandbox.memory_limit_bytes",
            |s, v| s.sandbox.memory_limit_bytes = v,
            |c, v| c.memory_limit_bytes = v,
        ),
        (
            "sandbox.fuel",
            |s, v| s.sandbox.fuel = Some(v),
            |c, v| c.fuel = Some(v),
        ),
        (
            "sandbox.max_instances",
            |s, v| s.sandbox.max_instances = v as u32,
            |c, v| c.max_instances = v as u32,
        ),
        (
            "sandbox.max_tables",
            |s, v| s.sandbox.max_tables = v as u32,
            |c, v| c.max_tables = v as u32,
        ),
        (
            "sandbox.max_memories",
            |s, v| s.sandbox.max_memories = v as u32,
            |c, v| c.max_memories = v as u32,
        ),
        (
            "sandbox.max_table_elements",
            |s, v| s.sandbox.max_table_elements = v,
            |c, v| c.max_table_elements = v,
        ),
        (
            "sandbox.output_limit_bytes",
            |s, v| s.sandbox.output_limit_bytes = v,
            |c, v| c.output_limit_bytes = v,
        ),
        (
            "sandbox.log_limit_bytes",
            |s, v| s.sandbox.log_limit_bytes = v,
            |c, v| c.log_limit_bytes = v,
        ),
        (
            "sandbox.max_log_lines",
            |s, v| s.sandbox.max_log_lines = v,
            |c, v| c.max_log_lines = v,
        ),
        (
            "sandbox.network.max_response_bytes",
            |s, v| s.sandbox.network.max_response_bytes = v,
            |c, v| c.max_response_bytes = v,
        ),
        (
            "sandbox.network.max_request_bytes",
            |s, v| s.sandbox.network.max_request_bytes = v,
            |c, v| c.max_request_bytes = v,
        ),
        (
            "sandbox.network.max_requests",
            |s, v| s.sandbox.network.max_requests = v,
            |c, v| c.max_requests = v,
        ),
        (
            "sandbox.network.max_concurrent_requests",
            |s, v| s.sandbox.network.max_concurrent_requests = v as u32,
            |c, v| c.max_concurrent_requests = v as u32,
        ),
        (
            "sandbox.network.max_connections",
            |s, v| s.sandbox.network.max_connections = v as u32,
            |c, v| c.max_connections = v as u32,
        ),
        (
            "concurrency",
            |s, v| s.concurrency = v as u32,
            |c, v| c.concurrency = v as u32,
        ),
        (
            "retry.max_attempts",
            |s, v| {
                s.retry = RetryPolicy::MaxAttempts {
                    max_attempts: v as u32,
                    delay_s: None,
                }
            },
            |c, v| c.max_attempts = v as u32,
        ),
    ];
    for (limit, set, cap) in cases {
        let mut c = PolicyCeiling {
            timeout: None,
            ..PolicyCeiling::default()
        };
        cap(&mut c, 100);
        let mut s = settings("team-a");
        set(&mut s, 100);
        assert_eq!(check_within(&s, &c, 1), Ok(()), "{limit} at the ceiling");
        set(&mut s, 101);
        assert_eq!(
            messages(check_within(&s, &c, 1)),
            [format!(
                "{limit}: asked 101, the ceiling for namespace \"team-a\" is 100"
            )],
            "{limit} just above"
        );
    }
}

#[test]
fn component_size_timeout_and_unlimited_values() {
    let c = PolicyCeiling {
        max_component_bytes: 1000,
        timeout: Some(Duration::from_secs(60)),
        fuel: Some(5_000),
        ..PolicyCeiling::default()
    };
    let mut s = settings("team-a");
    s.sandbox.fuel = Some(5_000);
    s.timeout = Some(Duration::from_secs(60));
    assert_eq!(check_within(&s, &c, 1000), Ok(()));
    assert_eq!(
        messages(check_within(&s, &c, 1001)),
        ["component: asked 1001, the ceiling for namespace \"team-a\" is 1000"]
    );
    s.timeout = Some(Duration::from_secs_f64(60.5));
    s.sandbox.fuel = None;
    assert_eq!(
        messages(check_within(&s, &c, 10)),
        [
            "sandbox.fuel: asked unlimited, the ceiling for namespace \"team-a\" is 5000",
            "timeout_s: asked 60.5s, the ceiling for namespace \"team-a\" is 60s",
        ]
    );
    s.timeout = None;
    assert_eq!(
        messages(check_within(&s, &c, 10))[1],
        "timeout_s: asked unlimited, the ceiling for namespace \"team-a\" is 60s"
    );
    // The store's cap is the default ceiling.
    assert!(check_within(&settings("x"), &PolicyCeiling::default(), 64 << 20).is_ok());
    assert!(check_within(&settings("x"), &PolicyCeiling::default(), (64 << 20) + 1).is_err());
}

#[test]
fn every_violation_is_reported_at_once() {
    let mut s = settings("team-a");
    s.sandbox.memory_limit_bytes = u64::MAX;
    s.concurrency = 9;
    allowing(&mut s, &["https://evil.example.net"]);
    let v = check_within(&s, &PolicyCeiling::default(), u64::MAX).expect_err("violations");
    let limits: Vec<&str> = v.iter().map(|v| v.limit.as_str()).collect();
    assert_eq!(
        limits,
        [
            "component",
            "sandbox.memory_limit_bytes",
            "concurrency",
            "sandbox.network.allow[0]"
        ]
    );
    assert_eq!(
        v[3].to_string(),
        "sandbox.network.allow[0]: asked https://evil.example.net:443, which is outside the \
         origins the operator allows namespace \"team-a\" (none)"
    );
}

#[test]
fn max_attempts_is_the_largest_branch() {
    let p = RetryPolicy::ByFailureKind {
        default: Some(Box::new(RetryPolicy::MaxAttempts {
            max_attempts: 2,
            delay_s: None,
        })),
        error: None,
        timeout: Some(Box::new(RetryPolicy::exponential_default())),
        cancelled: Some(Box::new(RetryPolicy::NoRetry)),
    };
    assert_eq!(max_attempts(&p), 3);
    assert_eq!(max_attempts(&RetryPolicy::NoRetry), 1);
}

#[test]
fn origin_subsumption() {
    let within = |t: &str, ops: &[&str]| {
        let ops: Vec<OriginPattern> = ops.iter().map(|s| o(s)).collect();
        origin_within(&o(t), &ops)
    };
    // Exact names, spelled differently: case, trailing dot, default port, trailing slash.
    assert!(within(
        "https://API.Example.com.",
        &["https://api.example.com"]
    ));
    assert!(within(
        "https://api.example.com:443/",
        &["https://api.example.com"]
    ));
    // Scheme and port must match exactly.
    assert!(!within(
        "http://api.example.com",
        &["https://api.example.com"]
    ));
    assert!(!within(
        "https://api.example.com:80",
        &["http://api.example.com"]
    ));
    assert!(!within(
        "https://api.example.com:8443",
        &["https://api.example.com"]
    ));
    assert!(!within(
        "https://*.example.com:8443",
        &["https://*.example.com"]
    ));
    // A name within a one-label wildcard; deeper names, the apex and look-alikes are not.
    assert!(within("https://a.example.com", &["https://*.example.com"]));
    assert!(!within(
        "https://a.b.example.com",
        &["https://*.example.com"]
    ));
    assert!(!within("https://example.com", &["https://*.example.com"]));
    assert!(!within("https://aexample.com", &["https://*.example.com"]));
    assert!(!within(
        "https://a.example.com.evil.net",
        &["https://*.example.com"]
    ));
    // A wildcard only within the same wildcard, never within names or a wider suffix.
    assert!(within("https://*.example.com", &["https://*.example.com"]));
    assert!(!within(
        "https://*.example.com",
        &["https://a.example.com", "https://b.example.com"]
    ));
    assert!(!within(
        "https://*.a.example.com",
        &["https://*.example.com"]
    ));
    assert!(!within(
        "https://*.example.com",
        &["https://*.a.example.com"]
    ));
    // A name is never within a wildcard by its reverse.
    assert!(!within("https://example.com", &["https://*.com.example"]));
    // IP literals: only the same address; names and wildcards never cover an IP.
    assert!(within("http://10.0.0.1:8080", &["http://10.0.0.1:8080"]));
    assert!(within("http://[0:0::1]", &["http://[::1]"]));
    assert!(!within("http://10.0.0.2:8080", &["http://10.0.0.1:8080"]));
    assert!(!within(
        "http://[::ffff:10.0.0.1]:8080",
        &["http://10.0.0.1:8080"]
    ));
    assert!(!within(
        "http://10.0.0.1:8080",
        &["http://[::ffff:10.0.0.1]:8080"]
    ));
    assert!(!within("http://127.0.0.1", &["http://localhost"]));
    assert!(!within("http://localhost", &["http://127.0.0.1"]));
    // An empty operator list covers nothing.
    assert!(!within("https://api.example.com", &[]));
    // Hostile spellings never parse, so never reach the check.
    for bad in [
        "https://user@api.example.com",
        "https://api.example.com@evil.net",
        "https://api%2eexample.com",
        "https://evil.net#@api.example.com",
        "https://evil.net/.api.example.com",
        "https://127.1",
        "https://0x7f000001",
        "https://api.example.com:443:443",
        "https://*.*.example.com",
        "https://*example.com",
        "https://*.com",
    ] {
        assert!(OriginPattern::parse(bad).is_err(), "{bad} parsed");
    }
}

fn ceiling_with_secrets() -> PolicyCeiling {
    PolicyCeiling {
        allow: vec![o("https://api.openai.com"), o("https://*.example.com")],
        secrets: BTreeMap::from([("openai".to_owned(), vec![o("https://api.openai.com")])]),
        ..PolicyCeiling::default()
    }
}

fn header(origin: &str, name: &str, value: HeaderValue) -> InjectedHeader {
    InjectedHeader {
        origin: o(origin),
        name: name.into(),
        value,
    }
}

#[test]
fn secrets_are_referenced_by_name_within_the_namespace_and_their_origins() {
    let c = ceiling_with_secrets();
    let mut s = settings("team-a");
    allowing(&mut s, &["https://api.openai.com", "https://a.example.com"]);
    s.headers = vec![
        header(
            "https://api.openai.com",
            "Authorization",
            HeaderValue::Secret("openai".into()),
        ),
        header(
            "https://a.example.com",
            "X-Team",
            HeaderValue::Literal("a".into()),
        ),
    ];
    assert_eq!(check_within(&s, &c, 1), Ok(()));
    // The secret sent to another (allowed) origin: exfiltration refused.
    s.headers.push(header(
        "https://a.example.com",
        "Authorization",
        HeaderValue::Secret("openai".into()),
    ));
    // A secret outside the namespace's list.
    s.headers.push(header(
        "https://api.openai.com",
        "X-Other",
        HeaderValue::Secret("anthropic".into()),
    ));
    // A header for an origin the deployment does not allow.
    s.headers.push(header(
        "https://b.example.com",
        "X-B",
        HeaderValue::Literal("b".into()),
    ));
    assert_eq!(
        messages(check_within(&s, &c, 1)),
        [
            "sandbox.network.headers[\"https://a.example.com:443\"].Authorization: asked secret \
             \"openai\" for https://a.example.com:443, but the operator binds secret \"openai\" \
             to https://api.openai.com:443 only",
            "sandbox.network.headers[\"https://api.openai.com:443\"].X-Other: asked secret \
             \"anthropic\", which namespace \"team-a\" may not reference (it may reference: \
             openai)",
            "sandbox.network.headers[\"https://b.example.com:443\"].X-B: asked a header for \
             https://b.example.com:443, which is not one of the deployment's sandbox.network.allow",
        ]
    );
    // Through the policy, a secret the operator does not hold is told apart.
    let policy = DeploymentPolicy {
        default: Some(c),
        namespaces: BTreeMap::new(),
        secret_names: BTreeSet::from(["openai".to_owned(), "anthropic".to_owned()]),
    };
    let kinds = |s: &DeploymentSettings| -> Vec<ViolationKind> {
        policy
            .check("team-a", s, 1)
            .expect_err("violations")
            .iter()
            .map(|v| v.kind)
            .collect()
    };
    assert_eq!(
        kinds(&s),
        [
            ViolationKind::SecretOrigin,
            ViolationKind::SecretNotAllowed,
            ViolationKind::OriginOutside
        ]
    );
    s.headers.truncate(1);
    s.headers.push(header(
        "https://api.openai.com",
        "X-Nope",
        HeaderValue::Secret("nope".into()),
    ));
    // Not held at all, or held for another namespace only: the same kind and answer, so a
    // tenant cannot enumerate other namespaces' secret names.
    assert_eq!(kinds(&s), [ViolationKind::SecretNotAllowed]);
    assert_eq!(
        policy.check("team-a", &s, 1).expect_err("unknown")[0].to_string(),
        "sandbox.network.headers[\"https://api.openai.com:443\"].X-Nope: asked secret \"nope\", \
         which namespace \"team-a\" may not reference (it may reference: openai)"
    );
    assert_eq!(
        s.secret_names().into_iter().collect::<Vec<_>>(),
        ["nope", "openai"]
    );
}

#[test]
fn operator_only_settings_are_refused() {
    let mut s = settings("team-a");
    s.sandbox.preopens.push(Preopen {
        host: "/etc".into(),
        guest: "/etc".into(),
        mode: crate::settings::PreopenMode::Ro,
    });
    s.sandbox.env.push("AWS_SECRET_ACCESS_KEY".into());
    s.sandbox.http_fields_limit_bytes = 1 << 40;
    allowing(&mut s, &["https://api.example.com"]);
    s.sandbox.network.allow[0].rate_limit = Some(crate::rate::RateLimit {
        per_second: 1.0,
        burst: 1,
    });
    s.sandbox.network.allow[0]
        .headers
        .push(("Authorization".into(), crate::settings::Secret::new("x")));
    let c = PolicyCeiling {
        allow: vec![o("https://api.example.com")],
        ..PolicyCeiling::default()
    };
    let v = check_within(&s, &c, 1).expect_err("violations");
    let kinds: Vec<ViolationKind> = v.iter().map(|v| v.kind).collect();
    assert_eq!(kinds, [ViolationKind::NotSettable; 5], "{v:?}");
    assert_eq!(
        v[0].to_string(),
        "sandbox.preopens: asked 1 host directories, a host directory is set only by the \
         operator, never by a deployment"
    );
}

#[test]
fn namespace_rules() {
    let policy = DeploymentPolicy {
        default: None,
        namespaces: BTreeMap::from([(
            "team-a".to_owned(),
            PolicyCeiling {
                memory_limit_bytes: 256,
                ..PolicyCeiling::default()
            },
        )]),
        secret_names: BTreeSet::new(),
    };
    let mut s = settings("team-a");
    s.timeout = None;
    s.sandbox.memory_limit_bytes = 256;
    assert_eq!(policy.check("team-a", &s, 1), Ok(()));
    assert_eq!(
        messages(policy.check("team-b", &s, 1)),
        [
            "namespace: asked \"team-a\", the token may deploy only into its own namespace \"team-b\""
        ]
    );
    let b = settings("team-b");
    let v = policy.check("team-b", &b, 1).expect_err("no policy");
    assert_eq!(v[0].kind, ViolationKind::NoPolicy);
    assert!(v[0].to_string().contains("deployments into it are refused"));
    // With a default, team-b gets it; team-a keeps its own entry (not merged with the default).
    let policy = DeploymentPolicy {
        default: Some(PolicyCeiling {
            memory_limit_bytes: 1 << 30,
            ..PolicyCeiling::default()
        }),
        ..policy
    };
    let mut big = settings("team-b");
    big.timeout = None;
    big.sandbox.memory_limit_bytes = 1 << 30;
    assert_eq!(policy.check("team-b", &big, 1), Ok(()));
    big.namespace = "team-a".into();
    assert_eq!(
        messages(policy.check("team-a", &big, 1)),
        [
            "sandbox.memory_limit_bytes: asked 1073741824, the ceiling for namespace \"team-a\" is 256"
        ]
    );
    assert!(check_namespace("a", "a").is_ok());
    assert!(check_namespace("a", "A").is_err());
    assert!(check_namespace("a", "a ").is_err());
}

#[test]
fn settings_round_trip_through_canonical_json() {
    let mut s = settings("team-a");
    allowing(&mut s, &["https://api.openai.com", "http://[::1]:8080"]);
    s.headers = vec![
        header(
            "https://api.openai.com",
            "Authorization",
            HeaderValue::Secret("openai".into()),
        ),
        header(
            "http://[::1]:8080",
            "X-Mode",
            HeaderValue::Literal("fast".into()),
        ),
    ];
    s.retry = RetryPolicy::exponential_default();
    s.sandbox.fuel = Some(42);
    s.sandbox.env_values.insert("MODE".into(), "fast".into());
    s.params.insert("model".into(), "gpt".into());
    let json = s.to_canonical_json().expect("json");
    assert!(json.contains(r#""value":{"secret":"openai"}"#), "{json}");
    assert!(json.contains(r#""timeout_s":30.0"#), "{json}");
    let back = DeploymentSettings::from_json(&json).expect("read back");
    assert_eq!(back, s);
    assert_eq!(back.to_canonical_json().expect("json"), json);
    assert!(DeploymentSettings::from_json(r#"{"namespace": "a"}"#).is_err());
    let with_extra = json.replacen('{', r#"{"extra":1,"#, 1);
    assert!(DeploymentSettings::from_json(&with_extra).is_err());
}
