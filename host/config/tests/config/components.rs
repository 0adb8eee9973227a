//! Component handlers, sandboxes and the `api:` section.

use std::path::Path;

use onestep_config::{ApiAuth, EnvLookup, LoadOptions, PreopenMode, load};

use crate::common::{TempDir, err};

const HEAD: &str = "app: {name: x}\nresources:\n  db: {type: mysql, dsn: 'mysql://x'}\n  jobs: {type: mysql_execution_source, connector: db, namespace: ns, task_names: [echo]}\n";

fn checked() -> LoadOptions {
    LoadOptions {
        env: EnvLookup::isolated([("VISIBLE", "yes")]),
        check_files: true,
        ..LoadOptions::default()
    }
}

#[test]
fn component_paths_resolve_against_the_yaml_directory() {
    let dir = TempDir::new();
    dir.write("guests/echo.wasm", "\0asm");
    let yaml = format!(
        "{HEAD}tasks:\n  - source: jobs\n    handler: {{component: ./sub/../guests/echo.wasm, params: {{greeting: hi}}}}\n"
    );
    let target = dir.write("app.yaml", &yaml);
    let cfg = load(&target, &checked()).expect("loads");
    let t = &cfg.tasks[0];
    assert_eq!(t.name, "echo", "defaults to the component's file stem");
    assert_eq!(t.handler.component, dir.path().join("guests/echo.wasm"));
    assert_eq!(t.handler.params["greeting"], "hi");

    // Missing component: the error names the field and the absolute path.
    let target = dir.write(
        "missing.yaml",
        &yaml.replace("guests/echo.wasm", "guests/nope.wasm"),
    );
    let e = load(&target, &checked()).expect_err("missing file");
    assert_eq!(
        e.to_string(),
        format!(
            "tasks[0].handler.component: file not found: {} (line 7, column 26)",
            dir.path().join("guests/nope.wasm").display()
        )
    );
    // …unless file checks are off (then the next check, the task-name binding, reports).
    let opts = LoadOptions {
        check_files: false,
        ..checked()
    };
    let e = load(&target, &opts).expect_err("binding");
    assert_eq!(
        e.to_string(),
        "tasks[0]: mysql.execution:ns is configured for task 'echo', not 'nope' (line 6, column 13)"
    );
}

#[test]
fn run_lets_a_component_be_missing_but_not_a_preopen() {
    // `onestep run` (require_components: false) quarantines a task whose component is missing
    // (docs/security.md#one-tenants-bad-deploy); every other file check stays.
    let dir = TempDir::new();
    let yaml = format!(
        "{HEAD}tasks:\n  - {{name: echo, source: jobs, handler: {{component: ./gone.wasm}}}}\n"
    );
    let target = dir.write("app.yaml", &yaml);
    let run = LoadOptions {
        require_components: false,
        ..checked()
    };
    let cfg = load(&target, &run).expect("a missing component loads for run");
    assert_eq!(cfg.tasks[0].handler.component, dir.path().join("gone.wasm"));
    assert!(load(&target, &checked()).is_err(), "check still refuses it");
    let with_preopen = dir.write(
        "preopen.yaml",
        &yaml.replace(
            "./gone.wasm}",
            "./gone.wasm}, sandbox: {preopens: [{host: ./nodir, guest: /data}]}",
        ),
    );
    let e = load(&with_preopen, &run).expect_err("a missing preopen is still refused");
    assert!(e.to_string().contains("directory not found"), "{e}");
}

#[test]
fn reference_style_handlers_are_rejected() {
    let task =
        |h: &str| format!("{HEAD}tasks:\n  - name: echo\n    source: jobs\n    handler: {h}\n");
    for strict in [false, true] {
        assert_eq!(
            err(&task("app.handlers:run_agent"), strict),
            "tasks[0].handler: handlers are WebAssembly components: use 'handler: {component: PATH}' ('app.handlers:run_agent' is an import reference, which this build does not support) (line 8, column 14)"
        );
        assert_eq!(
            err(&task("{ref: 'app.handlers:run_agent'}"), strict),
            "tasks[0].handler: handlers are WebAssembly components: use 'handler: {component: PATH}' instead of 'ref' (line 8, column 14)"
        );
        assert_eq!(
            err(&task("{params: {}}"), strict),
            "tasks[0].handler: 'component' must be a non-empty string (line 8, column 14)"
        );
    }
}

#[test]
fn sandbox_max_open_handles() {
    let dir = TempDir::new();
    dir.write("g/m.wasm", "\0asm");
    let plain = format!(
        "{HEAD}tasks:\n  - name: echo\n    source: jobs\n    handler: {{component: g/m.wasm}}\n"
    );
    let cfg = load(&dir.write("plain.yaml", &plain), &checked()).expect("loads");
    assert_eq!(cfg.tasks[0].sandbox.max_open_handles, 256);
    let with = |v: &str| format!("{plain}    sandbox: {{max_open_handles: {v}}}\n");
    for (v, want) in [("1", 1), ("64", 64), ("65536", 65_536), ("null", 256)] {
        let cfg = load(&dir.write("ok.yaml", &with(v)), &checked()).expect(v);
        assert_eq!(cfg.tasks[0].sandbox.max_open_handles, want);
    }
    for v in ["0", "-1", "65537", "1.5", "many"] {
        let err = load(&dir.write("bad.yaml", &with(v)), &checked())
            .expect_err(v)
            .to_string();
        assert_eq!(
            err,
            "tasks[0].sandbox: max_open_handles must be an integer from 1 to 65536 (line 9, column 33)",
            "{v}"
        );
    }
}

#[test]
fn sandbox_settings() {
    let dir = TempDir::new();
    dir.write("g/m.wasm", "\0asm");
    dir.write("data/f.txt", "x");
    let yaml = format!(
        "{HEAD}tasks:\n  - name: echo\n    source: jobs\n    handler: {{component: g/m.wasm}}\n    sandbox:\n      memory_limit_bytes: 2097152\n      fuel: 1000\n      output_limit_bytes: 512\n      preopens:\n        - {{host: data, guest: /data/, mode: rw}}\n        - {{host: data, guest: /ro}}\n      env: [VISIBLE, ABSENT]\n      env_values: {{GREETING: hello, N: 3}}\n"
    );
    let target = dir.write("app.yaml", &yaml);
    let cfg = load(&target, &checked()).expect("loads");
    let s = &cfg.tasks[0].sandbox;
    assert_eq!(s.memory_limit_bytes, 2_097_152);
    assert_eq!(s.fuel, Some(1000));
    assert_eq!(s.output_limit_bytes, 512);
    assert_eq!(s.preopens[0].host, dir.path().join("data"));
    assert_eq!(s.preopens[0].guest, "/data");
    assert_eq!(s.preopens[0].mode, PreopenMode::Rw);
    assert_eq!(s.preopens[1].mode, PreopenMode::Ro);
    let guest_env = s.guest_env(|name| cfg.env.get(name));
    assert_eq!(guest_env.get("VISIBLE").map(String::as_str), Some("yes"));
    assert!(!guest_env.contains_key("ABSENT"));
    assert_eq!(guest_env.get("GREETING").map(String::as_str), Some("hello"));
    assert_eq!(guest_env.get("N").map(String::as_str), Some("3"));

    // Defaults.
    let plain = format!(
        "{HEAD}tasks:\n  - name: echo\n    source: jobs\n    handler: {{component: g/m.wasm}}\n"
    );
    let cfg = load(&dir.write("plain.yaml", &plain), &checked()).expect("loads");
    let s = &cfg.tasks[0].sandbox;
    assert_eq!(
        (s.memory_limit_bytes, s.fuel, s.output_limit_bytes),
        (67_108_864, None, 65_536)
    );
    assert!(s.preopens.is_empty() && s.env.is_empty() && s.env_values.is_empty());

    // Errors.
    let bad = |sandbox: &str| {
        let y = format!("{plain}    sandbox: {sandbox}\n");
        load(&dir.write("bad.yaml", &y), &checked())
            .expect_err(sandbox)
            .to_string()
    };
    assert_eq!(
        bad("{memory_limit_bytes: 1000}"),
        "tasks[0].sandbox: memory_limit_bytes must be an integer >= 1048576 (1 MiB) (line 9, column 35)"
    );
    assert_eq!(
        bad("{fuel: 0}"),
        "tasks[0].sandbox: fuel must be null (unlimited) or an integer >= 1 (line 9, column 21)"
    );
    assert_eq!(
        bad("{output_limit_bytes: 0}"),
        "tasks[0].sandbox: output_limit_bytes must be an integer >= 1 (line 9, column 35)"
    );
    assert_eq!(
        bad("{env: [1BAD]}"),
        "tasks[0].sandbox: env[0] must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*) (line 9, column 21)"
    );
    assert_eq!(
        bad("{env_values: {A: [1]}}"),
        "tasks[0].sandbox: env_values.A must be a string (line 9, column 31)"
    );
    assert_eq!(
        bad("{preopens: [{host: data, guest: rel}]}"),
        "tasks[0].sandbox.preopens[0]: guest path 'rel' must be absolute and must not contain '..' (line 9, column 46)"
    );
    assert_eq!(
        bad("{preopens: [{host: data, guest: /a, mode: rx}]}"),
        "tasks[0].sandbox.preopens[0]: mode must be 'ro' or 'rw' (line 9, column 56)"
    );
    assert_eq!(
        bad("{preopens: [{host: data, guest: /a}, {host: data, guest: /a/}]}"),
        "tasks[0].sandbox.preopens[1]: duplicate guest path '/a' (line 9, column 51)"
    );
    assert_eq!(
        bad("{preopens: [{host: nodir, guest: /a}]}"),
        format!(
            "tasks[0].sandbox.preopens[0].host: directory not found: {} (line 9, column 33)",
            dir.path().join("nodir").display()
        )
    );
    assert_eq!(
        bad("{preopens: [{host: data/f.txt, guest: /a}]}"),
        format!(
            "tasks[0].sandbox.preopens[0].host: not a directory: {} (line 9, column 33)",
            dir.path().join("data/f.txt").display()
        )
    );
}

/// Per-attempt instance limits (docs/configuration.md#sandbox-instance-limits): defaults, values,
/// and the range errors in both modes.
#[test]
fn sandbox_instance_limits() {
    let dir = TempDir::new();
    dir.write("g/m.wasm", "\0asm");
    let plain = format!(
        "{HEAD}tasks:\n  - name: echo\n    source: jobs\n    handler: {{component: g/m.wasm}}\n"
    );
    let cfg = load(&dir.write("plain.yaml", &plain), &checked()).expect("loads");
    let s = &cfg.tasks[0].sandbox;
    assert_eq!(
        (
            s.max_instances,
            s.max_tables,
            s.max_memories,
            s.max_table_elements
        ),
        (32, 8, 4, 100_000)
    );
    let y = format!(
        "{plain}    sandbox: {{max_instances: 60, max_tables: 52, max_memories: 2, max_table_elements: 5000}}\n"
    );
    let cfg = load(&dir.write("set.yaml", &y), &checked()).expect("loads");
    let s = &cfg.tasks[0].sandbox;
    assert_eq!(
        (
            s.max_instances,
            s.max_tables,
            s.max_memories,
            s.max_table_elements
        ),
        (60, 52, 2, 5000)
    );
    assert!(
        cfg.summary()
            .contains("instances=60 memories=2 tables=52x5000"),
        "{}",
        cfg.summary()
    );
    let strict = LoadOptions {
        strict: true,
        ..checked()
    };
    for opts in [checked(), strict] {
        let bad = |sandbox: &str| {
            let y = format!("{plain}    sandbox: {sandbox}\n");
            load(&dir.write("bad.yaml", &y), &opts)
                .expect_err(sandbox)
                .to_string()
        };
        assert_eq!(
            bad("{max_instances: 0}"),
            "tasks[0].sandbox: max_instances must be an integer from 1 to 1000 (line 9, column 30)"
        );
        assert_eq!(
            bad("{max_tables: 1001}"),
            "tasks[0].sandbox: max_tables must be an integer from 1 to 1000 (line 9, column 27)"
        );
        assert_eq!(
            bad("{max_memories: many}"),
            "tasks[0].sandbox: max_memories must be an integer from 1 to 1000 (line 9, column 29)"
        );
        assert_eq!(
            bad("{max_table_elements: 10000001}"),
            "tasks[0].sandbox: max_table_elements must be an integer from 1 to 10000000 (line 9, column 35)"
        );
    }
}

/// `api.notify` and `api.poll_ms` (docs/http-api.md#waiting): `listen` needs a PostgreSQL
/// connector; a bad word, a listen on MySQL/MariaDB or SQLite and an out-of-range period are
/// refused with their location.
#[test]
fn api_notify() {
    use onestep_core::api_settings::ChangeNotify;
    let load = |db: &str, body: &str| {
        onestep_config::load_str(
            &format!(
                "app: {{name: x}}\nresources:\n  db: {{type: {db}, dsn: x}}\napi: {{connector: db, namespace: n{body}}}\n"
            ),
            Path::new("/srv/app.yaml"),
            &crate::common::opts(true),
        )
    };
    let settings = |db: &str, body: &str| {
        load(db, body)
            .unwrap_or_else(|e| panic!("{db} {body}: {e}"))
            .api
            .expect("api")
            .settings
    };
    // Absent: the backend decides (listen on PostgreSQL with the trigger, else poll).
    let s = settings("postgres", "");
    assert_eq!((s.notify, s.poll_ms), (None, None));
    let s = settings("postgres", ", notify: listen, poll_ms: 5000");
    assert_eq!(
        (s.notify, s.poll_ms),
        (Some(ChangeNotify::Listen), Some(5000))
    );
    for db in ["mysql", "sqlite", "postgres"] {
        let s = settings(db, ", notify: poll, poll_ms: 250");
        assert_eq!((s.notify, s.poll_ms), (Some(ChangeNotify::Poll), Some(250)));
    }
    for (db, kind) in [("mysql", "MySQLConnector"), ("sqlite", "SQLiteConnector")] {
        let err = load(db, ", notify: listen").expect_err(db).to_string();
        assert_eq!(
            err,
            format!(
                "api: notify: listen needs a PostgreSQL connector (LISTEN/NOTIFY); 'db' is a \
                 {kind}, whose changes the API polls: remove notify or set it to poll (line 4, \
                 column 44)"
            )
        );
    }
    let err = load("postgres", ", notify: push")
        .expect_err("push")
        .to_string();
    assert_eq!(
        err,
        "api: notify must be 'listen' or 'poll', got 'push' (line 4, column 44)"
    );
    for bad in ["9", "60001", "0.5", "'fast'"] {
        let err = load("postgres", &format!(", poll_ms: {bad}"))
            .expect_err(bad)
            .to_string();
        assert!(
            err.contains("poll_ms must be an integer from 10 to 60000"),
            "{bad}: {err}"
        );
    }
}

#[test]
fn api_section() {
    let api = |body: &str| {
        format!("app: {{name: x}}\nresources:\n  db: {{type: mysql, dsn: x}}\napi: {body}\n")
    };
    let load_api = |body: &str| {
        onestep_config::load_str(
            &api(body),
            Path::new("/srv/app.yaml"),
            &crate::common::opts(true),
        )
    };
    let cfg = load_api("{connector: db, namespace: ' team '}").expect("defaults");
    let a = cfg.api.as_ref().expect("api");
    assert_eq!(a.listen.to_string(), "127.0.0.1:8080");
    assert_eq!(a.auth, ApiAuth::Namespace("team".into()));
    assert_eq!(
        (a.table.as_str(), a.attempts_table.as_str()),
        ("onestep_executions", "onestep_execution_attempts")
    );
    assert!(!a.auto_create);
    assert_eq!(a.settings, onestep_core::ApiSettings::default());
    assert_eq!(a.settings.max_body_bytes, 2 * 1024 * 1024);
    assert_eq!(a.load_tokens(&cfg.env).expect("no tokens"), None);

    let cfg = load_api("{listen: '0.0.0.0:9000', connector: db, tokens_file: secrets/tokens, allowed_tasks: [a, b], max_body_bytes: 10, limits: {max_payload_bytes: 5}, auto_create: true}").expect("full");
    let a = cfg.api.as_ref().expect("api");
    assert_eq!(a.listen.port(), 9000);
    assert_eq!(a.auth, ApiAuth::TokensFile("/srv/secrets/tokens".into()));
    assert_eq!(a.settings.allowed_tasks, vec!["a", "b"]);
    assert_eq!(a.settings.limits.max_payload_bytes, 5);
    assert!(a.auto_create);
    assert!(
        !a.settings.metrics_public,
        "metrics.public defaults to false"
    );
    assert_eq!(a.settings.max_wait_s, 60, "max_wait_s defaults to 60");
    let cfg = load_api("{connector: db, namespace: n, max_wait_s: 0}").expect("no waiting");
    assert_eq!(cfg.api.as_ref().expect("api").settings.max_wait_s, 0);
    for bad in ["61", "-1", "1.5", "'soon'"] {
        let err = load_api(&format!(
            "{{connector: db, namespace: n, max_wait_s: {bad}}}"
        ))
        .expect_err(bad)
        .to_string();
        assert!(
            err.contains("max_wait_s must be an integer from 0 to 60"),
            "{bad}: {err}"
        );
    }
    // Event streams (docs/http-api.md#stream): 256 at once and 600 s each by default.
    assert_eq!(
        (a.settings.max_streams, a.settings.max_stream_s),
        (256, 600)
    );
    let cfg = load_api("{connector: db, namespace: n, max_streams: 0, max_stream_s: 86400}")
        .expect("streams off, a day each");
    let s = &cfg.api.as_ref().expect("api").settings;
    assert_eq!((s.max_streams, s.max_stream_s), (0, 86_400));
    // Open connections (docs/security.md#api-connections): 512 by default.
    assert_eq!(a.settings.max_connections, 512);
    let cfg = load_api("{connector: db, namespace: n, max_connections: 20000}").expect("20,000");
    assert_eq!(
        cfg.api.as_ref().expect("api").settings.max_connections,
        20_000
    );
    for (key, bad, range) in [
        ("max_connections", "0", "1 to 65536"),
        ("max_connections", "65537", "1 to 65536"),
        ("max_connections", "'lots'", "1 to 65536"),
        ("max_streams", "-1", "0 to 65536"),
        ("max_streams", "65537", "0 to 65536"),
        ("max_streams", "'many'", "0 to 65536"),
        ("max_stream_s", "0", "1 to 86400"),
        ("max_stream_s", "86401", "1 to 86400"),
        ("max_stream_s", "1.5", "1 to 86400"),
    ] {
        let err = load_api(&format!("{{connector: db, namespace: n, {key}: {bad}}}"))
            .expect_err(bad)
            .to_string();
        assert!(
            err.contains(&format!("{key} must be an integer from {range}")),
            "{key}={bad}: {err}"
        );
    }
    let cfg = load_api("{connector: db, namespace: n, metrics: {public: true}}").expect("public");
    assert!(cfg.api.as_ref().expect("api").settings.metrics_public);
    let err = load_api("{connector: db, namespace: n, metrics: {public: 'yes'}}")
        .expect_err("not a boolean")
        .to_string();
    assert!(
        err.contains("api.metrics: public must be a boolean"),
        "{err}"
    );
    let err = load_api("{connector: db, namespace: n, metrics: {open: true}}")
        .expect_err("strict")
        .to_string();
    assert!(err.contains("api.metrics") && err.contains("open"), "{err}");

    let e = |body: &str| load_api(body).expect_err(body).to_string();
    assert_eq!(
        e("{connector: db}"),
        "api: one of namespace, tokens_file or tokens_env is required (line 4, column 6)"
    );
    assert_eq!(
        e("{connector: db, tokens_file: f, tokens_env: T}"),
        "api: tokens_file and tokens_env are mutually exclusive (line 4, column 35)"
    );
    assert_eq!(
        e("{connector: db, namespace: n, tokens_env: T}"),
        "api: namespace cannot be combined with tokens_file or tokens_env (each token names its namespace) (line 4, column 33)"
    );
    assert_eq!(
        e("{connector: db, tokens_env: 'not a name'}"),
        "api: tokens_env must be an environment variable name (line 4, column 34)"
    );
    assert_eq!(
        e("{connector: db, namespace: n, listen: nowhere}"),
        "api: listen must be a socket address like 127.0.0.1:8080, got 'nowhere' (line 4, column 44)"
    );
    assert_eq!(
        e("{namespace: n}"),
        "api: 'connector' must be a non-empty string (line 4, column 6)"
    );
    assert_eq!(
        e("{connector: ghost, namespace: n}"),
        "api: unknown resource 'ghost' (line 4, column 18)"
    );
    assert_eq!(
        e("{connector: db, namespace: n, auto_create: 1}"),
        "api: auto_create must be a boolean (line 4, column 49)"
    );
    assert_eq!(
        e("{connector: db, namespace: n, max_body_bytes: 0}"),
        "api: max_body_bytes must be a positive integer (line 4, column 52)"
    );
    assert_eq!(
        e("{connector: db, namespace: n, table: 'a-b'}"),
        "api: executions_table must be a non-empty SQL identifier (line 4, column 43)"
    );
    // Inline tokens are rejected in both modes.
    let inline = api("{connector: db, tokens: {secret: ns}}");
    assert_eq!(
        crate::common::err(&inline, false),
        "api: inline tokens are not allowed in YAML; use tokens_file or tokens_env (line 4, column 30)"
    );
}

#[test]
fn api_tokens() {
    let dir = TempDir::new();
    dir.write("tokens", "# token namespace\n\nt1 team-a\nt2   team-b\n");
    let yaml = "app: {name: x}\nresources:\n  db: {type: mysql, dsn: x}\napi: {connector: db, tokens_file: tokens}\n";
    let cfg = load(&dir.write("app.yaml", yaml), &checked()).expect("loads");
    let tokens = cfg
        .api
        .as_ref()
        .expect("api")
        .load_tokens(&cfg.env)
        .expect("tokens")
        .expect("some");
    assert_eq!(tokens.len(), 2);
    assert_eq!(tokens[1].token.expose(), "t2");
    assert_eq!(tokens[1].namespace, "team-b");
    assert_eq!(
        format!("{:?}", tokens[0]),
        "ApiToken { token: <redacted>, namespace: \"team-a\", role: None }"
    );

    dir.write("tokens", "t1 team-a\nbroken\n");
    let cfg = load(&dir.path().join("app.yaml"), &checked()).expect("loads");
    let api = cfg.api.as_ref().expect("api");
    assert_eq!(
        api.load_tokens(&cfg.env).expect_err("bad line").to_string(),
        "api.tokens_file: line 2: expected '<token> <namespace> [role]'"
    );
    // Roles (docs/http-api.md#roles): a third word, checked.
    dir.write("tokens", "t1 team-a read\nt2 team-a operate\nt3 team-b\n");
    let tokens = api.load_tokens(&cfg.env).expect("roles").expect("some");
    let roles: Vec<Option<&str>> = tokens.iter().map(|t| t.role.as_deref()).collect();
    assert_eq!(roles, [Some("read"), Some("operate"), None]);
    dir.write("tokens", "t1 team-a admin\n");
    assert_eq!(
        api.load_tokens(&cfg.env).expect_err("bad role").to_string(),
        "api.tokens_file: line 1: unknown role 'admin' (expected read, submit, operate or deploy)"
    );
    dir.write("tokens", "t1 team-a read extra\n");
    assert!(api.load_tokens(&cfg.env).is_err());

    let yaml = "app: {name: x}\nresources:\n  db: {type: mysql, dsn: x}\napi: {connector: db, tokens_env: API_TOKENS}\n";
    let target = dir.write("env.yaml", yaml);
    let cfg = load(&target, &checked()).expect("loads without the variable");
    let api = cfg.api.as_ref().expect("api");
    assert_eq!(
        api.load_tokens(&cfg.env).expect_err("unset").to_string(),
        "api.tokens_env: environment variable 'API_TOKENS' is not set"
    );
    let env = EnvLookup::isolated([("API_TOKENS", "a=ns1, b=ns2")]);
    let tokens = api.load_tokens(&env).expect("tokens").expect("some");
    assert_eq!(
        tokens
            .iter()
            .map(|t| t.namespace.as_str())
            .collect::<Vec<_>>(),
        ["ns1", "ns2"]
    );
    let env = EnvLookup::isolated([("API_TOKENS", "a=ns1:submit, b=ns:2")]);
    let tokens = api.load_tokens(&env).expect("tokens").expect("some");
    assert_eq!(tokens[0].namespace, "ns1");
    assert_eq!(tokens[0].role.as_deref(), Some("submit"));
    // A suffix that is not a role belongs to the namespace.
    assert_eq!(tokens[1].namespace, "ns:2");
    assert_eq!(tokens[1].role, None);
    let env = EnvLookup::isolated([("API_TOKENS", "a=ns1,a=ns2")]);
    assert_eq!(
        api.load_tokens(&env).expect_err("dup").to_string(),
        "api.tokens_env: entry 2: duplicate token"
    );
    let env = EnvLookup::isolated([("API_TOKENS", "a")]);
    assert_eq!(
        api.load_tokens(&env).expect_err("shape").to_string(),
        "api.tokens_env: entry 1: expected 'token=namespace[:role]'"
    );
}

#[test]
fn sandbox_log_limits() {
    let dir = TempDir::new();
    dir.write("g/m.wasm", "\0asm");
    let plain = format!(
        "{HEAD}tasks:\n  - name: echo\n    source: jobs\n    handler: {{component: g/m.wasm}}\n"
    );
    let cfg = load(&dir.write("plain.yaml", &plain), &checked()).expect("loads");
    let s = &cfg.tasks[0].sandbox;
    assert_eq!(
        (
            s.log_limit_bytes,
            s.max_log_lines,
            s.max_log_message_bytes,
            s.log_rate_bytes_per_minute
        ),
        (1 << 20, 5000, 16384, 8 << 20)
    );
    let with = |kv: &str| format!("{plain}    sandbox: {{{kv}}}\n");
    let cfg = load(
        &dir.write(
            "ok.yaml",
            &with("log_limit_bytes: 4096, max_log_lines: 7, max_log_message_bytes: 256, log_rate_bytes_per_minute: 1024"),
        ),
        &checked(),
    )
    .expect("loads");
    let s = &cfg.tasks[0].sandbox;
    assert_eq!(
        (
            s.log_limit_bytes,
            s.max_log_lines,
            s.max_log_message_bytes,
            s.log_rate_bytes_per_minute
        ),
        (4096, 7, 256, 1024)
    );
    for strict in [false, true] {
        let opts = LoadOptions {
            strict,
            ..checked()
        };
        for (kv, message) in [
            (
                "log_limit_bytes: 1023",
                "log_limit_bytes must be an integer >= 1024 (line 9, column 32)",
            ),
            (
                "log_limit_bytes: lots",
                "log_limit_bytes must be an integer >= 1024 (line 9, column 32)",
            ),
            (
                "max_log_lines: 0",
                "max_log_lines must be an integer >= 1 (line 9, column 30)",
            ),
            (
                "max_log_message_bytes: 255",
                "max_log_message_bytes must be an integer from 256 to 1048576 (line 9, column 38)",
            ),
            (
                "max_log_message_bytes: 1048577",
                "max_log_message_bytes must be an integer from 256 to 1048576 (line 9, column 38)",
            ),
            (
                "log_rate_bytes_per_minute: -5",
                "log_rate_bytes_per_minute must be an integer >= 1024 (line 9, column 42)",
            ),
        ] {
            let e = load(&dir.write("bad.yaml", &with(kv)), &opts)
                .expect_err(kv)
                .to_string();
            assert_eq!(e, format!("tasks[0].sandbox: {message}"), "{kv}");
        }
    }
}

#[test]
fn app_sandbox_sets_worker_wide_default_limits() {
    let dir = TempDir::new();
    dir.write("g/m.wasm", "\0asm");
    dir.write("data/f.txt", "x");
    let head = HEAD.replace(
        "app: {name: x}",
        "app:\n  name: x\n  sandbox: {memory_limit_bytes: 2097152, max_open_handles: 8, log_rate_bytes_per_minute: 4096, fuel: 500}",
    ) + "  jobs2: {type: mysql_execution_source, connector: db, namespace: ns, task_names: [other]}\n";
    let yaml = format!(
        "{head}tasks:\n  - name: echo\n    source: jobs\n    handler: {{component: g/m.wasm}}\n  - name: other\n    source: jobs2\n    handler: {{component: g/m.wasm}}\n    sandbox: {{max_open_handles: 16, fuel: null, preopens: [{{host: data, guest: /data}}]}}\n"
    );
    for strict in [false, true] {
        let opts = LoadOptions {
            strict,
            ..checked()
        };
        let cfg = load(&dir.write("app.yaml", &yaml), &opts).expect("loads");
        let (a, b) = (&cfg.tasks[0].sandbox, &cfg.tasks[1].sandbox);
        // Defaults apply to a task without `sandbox:` ...
        assert_eq!(a.memory_limit_bytes, 2_097_152);
        assert_eq!(a.max_open_handles, 8);
        assert_eq!(a.log_rate_bytes_per_minute, 4096);
        assert_eq!(a.fuel, Some(500));
        assert!(a.preopens.is_empty());
        // ... and to every key a task's `sandbox:` leaves out; what it sets wins.
        assert_eq!(b.memory_limit_bytes, 2_097_152);
        assert_eq!(b.max_open_handles, 16);
        assert_eq!(b.fuel, None, "an explicit null is unlimited");
        assert_eq!(b.preopens.len(), 1);
        assert_eq!(cfg.sandbox_defaults.max_open_handles, 8);
        assert_eq!(cfg.sandbox_defaults.max_tables, 8, "built-in default");
    }

    // Capabilities are never worker-wide, in both modes.
    for (kv, key) in [
        ("preopens: [{host: data, guest: /data}]", "preopens"),
        ("env: [VISIBLE]", "env"),
        ("env_values: {A: b}", "env_values"),
    ] {
        let head = HEAD.replace(
            "app: {name: x}",
            &format!("app:\n  name: x\n  sandbox: {{{kv}}}"),
        );
        let yaml = format!(
            "{head}tasks:\n  - name: echo\n    source: jobs\n    handler: {{component: g/m.wasm}}\n"
        );
        for strict in [false, true] {
            let opts = LoadOptions {
                strict,
                ..checked()
            };
            let e = load(&dir.write("cap.yaml", &yaml), &opts)
                .expect_err(kv)
                .to_string();
            assert!(
                e.starts_with(&format!(
                    "app.sandbox: {key} grants a capability and is set per task (tasks[].sandbox.{key}); app.sandbox holds only default limits (line 3"
                )),
                "{e}"
            );
        }
    }

    // Limits are validated there like in a task; unknown keys are strict errors.
    let head = HEAD.replace(
        "app: {name: x}",
        "app:\n  name: x\n  sandbox: {max_log_lines: 0}",
    );
    let yaml = format!(
        "{head}tasks:\n  - name: echo\n    source: jobs\n    handler: {{component: g/m.wasm}}\n"
    );
    let e = load(&dir.write("bad.yaml", &yaml), &checked())
        .expect_err("bad")
        .to_string();
    assert_eq!(
        e,
        "app.sandbox: max_log_lines must be an integer >= 1 (line 3, column 28)"
    );
    let head = HEAD.replace("app: {name: x}", "app:\n  name: x\n  sandbox: {memory: 5}");
    let yaml = format!(
        "{head}tasks:\n  - name: echo\n    source: jobs\n    handler: {{component: g/m.wasm}}\n"
    );
    let strict = LoadOptions {
        strict: true,
        ..checked()
    };
    let e = load(&dir.write("unknown.yaml", &yaml), &strict)
        .expect_err("unknown")
        .to_string();
    assert!(
        e.contains("unsupported fields for app.sandbox: memory"),
        "{e}"
    );
}

#[test]
fn app_metrics_addr() {
    use onestep_config::build::parse_metrics_addr;
    assert_eq!(
        parse_metrics_addr("127.0.0.1:9100").map(|a| a.to_string()),
        Ok("127.0.0.1:9100".to_owned())
    );
    assert_eq!(
        parse_metrics_addr(":9100").map(|a| a.to_string()),
        Ok("0.0.0.0:9100".to_owned())
    );
    assert_eq!(
        parse_metrics_addr("localhost:9").map(|a| a.to_string()),
        Ok("127.0.0.1:9".to_owned())
    );
    assert_eq!(
        parse_metrics_addr("[::1]:9100").map(|a| a.to_string()),
        Ok("[::1]:9100".to_owned())
    );
    for bad in ["9100", "host.example:9100", "127.0.0.1:", "127.0.0.1:99999"] {
        assert_eq!(
            parse_metrics_addr(bad).map_err(|e| e.to_string()),
            Err(format!(
                "must be HOST:PORT or :PORT (HOST an IP address or localhost), got '{bad}'"
            ))
        );
    }
    let dir = TempDir::new();
    dir.write("g/m.wasm", "\0asm");
    let yaml = |addr: &str| {
        format!(
            "{}tasks:\n  - name: echo\n    source: jobs\n    handler: {{component: g/m.wasm}}\n",
            HEAD.replace(
                "app: {name: x}",
                &format!("app: {{name: x, metrics_addr: '{addr}'}}")
            )
        )
    };
    let cfg = load(&dir.write("ok.yaml", &yaml(":9464")), &checked()).expect("loads");
    assert_eq!(cfg.metrics_addr.map(|a| a.port()), Some(9464));
    let e = load(&dir.write("bad.yaml", &yaml("nine")), &checked())
        .expect_err("bad")
        .to_string();
    assert_eq!(
        e,
        "app: metrics_addr must be HOST:PORT or :PORT (HOST an IP address or localhost), got 'nine' (line 1, column 30)"
    );
}

#[test]
fn sandbox_network() {
    let dir = TempDir::new();
    dir.write("g/m.wasm", "\0asm");
    let plain = format!(
        "{HEAD}tasks:\n  - name: echo\n    source: jobs\n    handler: {{component: g/m.wasm}}\n"
    );
    let cfg = load(&dir.write("plain.yaml", &plain), &checked()).expect("loads");
    assert!(
        cfg.tasks[0].sandbox.network.allow.is_empty(),
        "no network by default"
    );
    let opts = LoadOptions {
        env: EnvLookup::isolated([("API_KEY", "sk-live-123")]),
        check_files: true,
        strict: true,
        ..LoadOptions::default()
    };
    let full = format!(
        "{plain}    sandbox:\n      network:\n        allow:\n          - https://api.example.com\n          - https://*.example.org:8443\n          - http://127.0.0.1:18080\n        headers:\n          https://api.example.com:443: {{Authorization: \"Bearer ${{API_KEY}}\", X-N: 3}}\n        max_response_bytes: 1000\n        max_request_bytes: 2000\n        connect_timeout_s: 1.5\n        request_timeout_s: 30\n        max_concurrent_requests: 4\n        max_connections: 6\n        max_requests: 7\n"
    );
    let cfg = load(&dir.write("full.yaml", &full), &opts).expect("loads");
    let n = &cfg.tasks[0].sandbox.network;
    let allow: Vec<String> = n.allow.iter().map(|a| a.origin.to_string()).collect();
    assert_eq!(
        allow,
        [
            "https://api.example.com:443",
            "https://*.example.org:8443",
            "http://127.0.0.1:18080"
        ]
    );
    // The headers sit with their own origin; the other origins inject none.
    assert_eq!(n.allow[0].headers.len(), 2);
    assert!(n.allow[1].headers.is_empty() && n.allow[2].headers.is_empty());
    assert_eq!(n.allow[0].headers[0].0, "Authorization");
    assert_eq!(n.allow[0].headers[0].1.expose(), "Bearer sk-live-123");
    assert_eq!(n.allow[0].headers[1].1.expose(), "3");
    assert_eq!(
        (
            n.max_response_bytes,
            n.max_request_bytes,
            n.max_concurrent_requests
        ),
        (1000, 2000, 4)
    );
    assert_eq!(n.max_requests, 7);
    assert_eq!(
        cfg.tasks[0].sandbox.network.max_requests, 7,
        "sandbox.network.max_requests"
    );
    assert_eq!(n.connect_timeout, std::time::Duration::from_millis(1500));
    assert_eq!(n.request_timeout, std::time::Duration::from_secs(30));
    // The summaries and Debug never show the header value.
    let text = cfg.summary();
    assert!(
        text.contains("network=[https://api.example.com:443,https://*.example.org:8443,http://127.0.0.1:18080] headers=[https://api.example.com:443:Authorization=<redacted>,https://api.example.com:443:X-N=<redacted>] max_response=1000B max_request=2000B connect_timeout=1.5s request_timeout=30s max_concurrent_requests=4 max_connections=6"),
        "{text}"
    );
    let json = serde_json::to_string(&cfg.json_summary()).expect("json");
    let debug = format!("{:?}", cfg.tasks[0].sandbox);
    for shown in [&text, &json, &debug] {
        assert!(!shown.contains("sk-live-123"), "{shown}");
    }

    let with = |block: &str| format!("{plain}    sandbox:\n      network:\n{block}");
    let bad = |block: &str| {
        load(&dir.write("bad.yaml", &with(block)), &opts)
            .expect_err(block)
            .to_string()
    };
    let shape = "is not an origin like https://api.example.com, https://*.example.org:8443 or http://127.0.0.1:18080";
    assert_eq!(
        bad("        allow: [not a url]\n"),
        format!(
            "tasks[0].sandbox.network.allow[0]: \"not a url\" {shape}: it has no scheme (http:// or https://) (line 11, column 17)"
        )
    );
    assert_eq!(
        bad("        allow: [\"https://api.example.com/v1\"]\n"),
        format!(
            "tasks[0].sandbox.network.allow[0]: \"https://api.example.com/v1\" {shape}: it has a path, query or fragment (an entry is scheme://host[:port] only) (line 11, column 17)"
        )
    );
    assert_eq!(
        bad("        allow: [\"https://api.example.com?key=1\"]\n"),
        format!(
            "tasks[0].sandbox.network.allow[0]: \"https://api.example.com?key=1\" {shape}: it has a path, query or fragment (an entry is scheme://host[:port] only) (line 11, column 17)"
        )
    );
    assert_eq!(
        bad("        allow: [\"https://api.*.example.com\"]\n"),
        format!(
            "tasks[0].sandbox.network.allow[0]: \"https://api.*.example.com\" {shape}: a wildcard must be the whole first label (*.example.org) (line 11, column 17)"
        )
    );
    assert_eq!(
        bad("        allow: [\"https://*api.example.com\"]\n"),
        format!(
            "tasks[0].sandbox.network.allow[0]: \"https://*api.example.com\" {shape}: a wildcard must be the whole first label (*.example.org) (line 11, column 17)"
        )
    );
    assert_eq!(
        bad("        allow: [https://a.example.com, \"https://A.example.com:443/\"]\n"),
        "tasks[0].sandbox.network.allow[1]: duplicate origin https://a.example.com:443 (line 11, column 40)"
    );
    assert_eq!(
        bad(
            "        allow: [https://a.example.com]\n        headers:\n          https://b.example.com: {Authorization: x}\n"
        ),
        "tasks[0].sandbox.network.headers: \"https://b.example.com\" is not one of sandbox.network.allow (line 13, column 34)"
    );
    assert_eq!(
        bad(
            "        allow: [https://a.example.com]\n        headers:\n          https://a.example.com: {\"Bad Name\": x}\n"
        ),
        "tasks[0].sandbox.network.headers[\"https://a.example.com\"]: \"Bad Name\" is not an HTTP header name (letters, digits and !#$%&'*+-.^_`|~) (line 13, column 47)"
    );
    assert_eq!(
        bad(
            "        allow: [https://a.example.com]\n        headers:\n          https://a.example.com: {Authorization: x, authorization: y}\n"
        ),
        "tasks[0].sandbox.network.headers[\"https://a.example.com\"]: header authorization is given twice (names are case-insensitive) (line 13, column 68)"
    );
    for (key, v, msg) in [
        (
            "max_response_bytes",
            "0",
            "max_response_bytes must be an integer >= 1",
        ),
        (
            "max_request_bytes",
            "-5",
            "max_request_bytes must be an integer >= 1",
        ),
        (
            "connect_timeout_s",
            "0",
            "connect_timeout_s must be a number > 0",
        ),
        (
            "request_timeout_s",
            "-1",
            "request_timeout_s must be a number > 0",
        ),
        (
            "max_concurrent_requests",
            "0",
            "max_concurrent_requests must be an integer from 1 to 4294967295",
        ),
        (
            "max_connections",
            "4097",
            "max_connections must be an integer from 1 to 4096",
        ),
        (
            "max_connections",
            "0",
            "max_connections must be an integer from 1 to 4096",
        ),
    ] {
        let block = format!("        allow: [https://a.example.com]\n        {key}: {v}\n");
        let col = 11 + key.len() as u64;
        assert_eq!(
            bad(&block),
            format!("tasks[0].sandbox.network: {msg} (line 12, column {col})"),
            "{key}"
        );
    }
    // A capability: per task only, never in app.sandbox.
    let app_wide = plain.replace(
        "app: {name: x}",
        "app: {name: x, sandbox: {network: {allow: [https://a.example.com]}}}",
    );
    assert_eq!(
        load(&dir.write("app.yaml", &app_wide), &opts)
            .expect_err("app.sandbox.network")
            .to_string(),
        "app.sandbox: network grants a capability and is set per task (tasks[].sandbox.network); app.sandbox holds only default limits (line 1, column 35)"
    );
    for v in ["0", "-1", "2.5", "many"] {
        let e = bad(&format!(
            "        allow: [https://a.example.com]\n        max_requests: {v}\n"
        ));
        assert!(
            e.contains("max_requests must be an integer >= 1"),
            "{v}: {e}"
        );
    }
    // Strict keys.
    assert_eq!(
        bad("        allow: [https://a.example.com]\n        allowed: []\n"),
        "unsupported fields for tasks[0].sandbox.network: allowed (line 12, column 18)"
    );
}

/// `${VAR}` in a `headers` origin expands as under `allow`; an injected header whose variable is
/// unset or empty fails strict loading (naming the variable) and warns otherwise.
#[test]
fn sandbox_network_header_variables() {
    let dir = TempDir::new();
    dir.write("g/m.wasm", "\0asm");
    let doc = |headers: &str| {
        format!(
            "{HEAD}tasks:\n  - name: echo\n    source: jobs\n    handler: {{component: g/m.wasm}}\n    sandbox:\n      network:\n        allow: ['http://127.0.0.1:${{LLM_PORT}}']\n        headers:\n{headers}"
        )
    };
    let with_env = |vars: &[(&str, &str)], strict: bool| LoadOptions {
        env: EnvLookup::isolated(vars.iter().map(|(k, v)| (k.to_string(), v.to_string()))),
        check_files: false,
        strict,
        ..LoadOptions::default()
    };
    let yaml =
        doc("          'http://127.0.0.1:${LLM_PORT}': {Authorization: 'Bearer ${LLM_KEY}'}\n");
    let path = dir.write("net.yaml", &yaml);
    let cfg = load(
        &path,
        &with_env(&[("LLM_PORT", "18181"), ("LLM_KEY", "k-1")], true),
    )
    .expect("the header origin expands like allow");
    let n = &cfg.tasks[0].sandbox.network;
    assert_eq!(n.allow[0].origin.to_string(), "http://127.0.0.1:18181");
    assert_eq!(n.allow[0].headers[0].1.expose(), "Bearer k-1");

    // Unset or empty: strict refuses, naming the variable and the header.
    for vars in [
        &[("LLM_PORT", "18181")][..],
        &[("LLM_PORT", "18181"), ("LLM_KEY", "")][..],
    ] {
        let e = load(&path, &with_env(vars, true))
            .expect_err("empty header")
            .to_string();
        assert!(e.contains("LLM_KEY") && e.contains("Authorization"), "{e}");
        assert!(e.contains("unset or empty"), "{e}");
        // Without --strict it loads, with a warning.
        let cfg = load(&path, &with_env(vars, false)).expect("loads");
        assert!(
            cfg.warnings.iter().any(|w| w.contains("LLM_KEY")),
            "{:?}",
            cfg.warnings
        );
    }
}

#[test]
fn sandbox_cancel_grace_ms() {
    let dir = TempDir::new();
    dir.write("g/m.wasm", "\0asm");
    let plain = format!(
        "{HEAD}tasks:\n  - name: echo\n    source: jobs\n    handler: {{component: g/m.wasm}}\n"
    );
    let cfg = load(&dir.write("plain.yaml", &plain), &checked()).expect("loads");
    assert_eq!(cfg.tasks[0].sandbox.cancel_grace.as_millis(), 50);
    let with = |v: &str| format!("{plain}    sandbox: {{cancel_grace_ms: {v}}}\n");
    for (v, ms) in [("0", 0), ("250", 250), ("60000", 60_000)] {
        for strict in [false, true] {
            let opts = LoadOptions {
                strict,
                ..checked()
            };
            let cfg = load(&dir.write("ok.yaml", &with(v)), &opts).expect(v);
            assert_eq!(cfg.tasks[0].sandbox.cancel_grace.as_millis(), ms);
        }
    }
    for v in ["-1", "60001", "0.5", "soon"] {
        let e = load(&dir.write("bad.yaml", &with(v)), &checked())
            .expect_err(v)
            .to_string();
        assert_eq!(
            e,
            "tasks[0].sandbox: cancel_grace_ms must be an integer from 0 to 60000 (line 9, column 32)",
            "{v}"
        );
    }
}

#[test]
fn sandbox_http_fields_limit_bytes() {
    let dir = TempDir::new();
    dir.write("g/m.wasm", "\0asm");
    let plain = format!(
        "{HEAD}tasks:\n  - name: echo\n    source: jobs\n    handler: {{component: g/m.wasm}}\n"
    );
    let cfg = load(&dir.write("plain.yaml", &plain), &checked()).expect("loads");
    assert_eq!(cfg.tasks[0].sandbox.http_fields_limit_bytes, 1024 * 1024);
    let with = |v: &str| format!("{plain}    sandbox: {{http_fields_limit_bytes: {v}}}\n");
    for strict in [false, true] {
        let opts = LoadOptions {
            strict,
            ..checked()
        };
        let cfg = load(&dir.write("ok.yaml", &with("4096")), &opts).expect("4096");
        assert_eq!(cfg.tasks[0].sandbox.http_fields_limit_bytes, 4096);
        let json = serde_json::to_value(cfg.json_summary()).expect("json");
        assert_eq!(json["tasks"][0]["sandbox"]["http_fields_limit_bytes"], 4096);
    }
    // A worker-wide default, overridden per task.
    let app = plain.replacen(
        "app: {name: x}",
        "app: {name: x, sandbox: {http_fields_limit_bytes: 2048}}",
        1,
    );
    let cfg = load(&dir.write("app.yaml", &app), &checked()).expect("app.sandbox");
    assert_eq!(cfg.tasks[0].sandbox.http_fields_limit_bytes, 2048);
    for v in ["0", "1023", "-1", "1.5", "big"] {
        let e = load(&dir.write("bad.yaml", &with(v)), &checked())
            .expect_err(v)
            .to_string();
        assert!(
            e.starts_with(
                "tasks[0].sandbox: http_fields_limit_bytes must be an integer >= 1024 (line 9"
            ),
            "{v}: {e}"
        );
    }
}

#[test]
fn check_summary_names_postgres_resources_as_postgres() {
    let dir = TempDir::new();
    dir.write("g/m.wasm", "\0asm");
    let yaml = "app: {name: x}\nresources:\n  db: {type: postgres, dsn: 'postgres://x'}\n  jobs: {type: postgres_execution_source, connector: db, namespace: ns, task_names: [echo]}\ntasks:\n  - name: echo\n    source: jobs\n    handler: {component: g/m.wasm}\n";
    let cfg = load(&dir.write("pg.yaml", yaml), &checked()).expect("loads");
    let text = cfg.summary();
    assert!(
        text.contains("Resources: 2 (db<PostgresConnector>, jobs<PostgresExecutionSource>)"),
        "{text}"
    );
    assert!(
        text.contains("- echo source=jobs<PostgresExecutionSource> "),
        "{text}"
    );
    assert!(!text.contains("MySQL"), "{text}");
    let json = serde_json::to_value(cfg.json_summary()).expect("json");
    assert_eq!(json["resources"][0]["type"], "PostgresConnector");
    assert_eq!(json["resources"][1]["type"], "PostgresExecutionSource");
    assert_eq!(
        json["tasks"][0]["source"]["type"],
        "PostgresExecutionSource"
    );
}

#[test]
fn api_quotas() {
    use onestep_core::quota::SubmitQuota;
    let load_api = |quotas: &str| {
        onestep_config::load_str(
            &format!(
                "app: {{name: x}}\nresources:\n  db: {{type: mysql, dsn: x}}\napi: {{connector: db, namespace: n, quotas: {quotas}}}\n"
            ),
            Path::new("/srv/app.yaml"),
            &crate::common::opts(true),
        )
    };
    // Absent: no quota.
    let cfg = onestep_config::load_str(
        "app: {name: x}\nresources:\n  db: {type: mysql, dsn: x}\napi: {connector: db, namespace: n}\n",
        Path::new("/srv/app.yaml"),
        &crate::common::opts(true),
    )
    .expect("no quotas");
    assert_eq!(cfg.api.expect("api").settings.quotas, None);
    let cfg = load_api(
        "{max_queued: 10000, max_queued_per_key: 1000, namespaces: {acme: {max_queued: 50000}, ' beta ': {max_queued_per_key: 7}}}",
    )
    .expect("quotas");
    let s = cfg.api.expect("api").settings;
    let q = s.quotas.as_ref().expect("quotas");
    assert_eq!(q.retry_after_s, 5, "the default Retry-After");
    assert_eq!(
        s.quota_for("acme"),
        Some(SubmitQuota {
            max_queued: Some(50000),
            max_queued_per_key: Some(1000)
        })
    );
    assert_eq!(
        s.quota_for("beta"),
        Some(SubmitQuota {
            max_queued: Some(10000),
            max_queued_per_key: Some(7)
        })
    );
    assert_eq!(
        s.quota_for("other"),
        Some(SubmitQuota {
            max_queued: Some(10000),
            max_queued_per_key: Some(1000)
        })
    );
    let cfg = load_api("{retry_after_s: 3600, namespaces: {acme: {max_queued: 1}}}").expect("one");
    let s = cfg.api.expect("api").settings;
    assert_eq!(s.quotas.as_ref().map(|q| q.retry_after_s), Some(3600));
    assert_eq!(s.quota_for("other"), None, "no default limit");
    let e = |body: &str| load_api(body).expect_err(body).to_string();
    assert_eq!(
        e("{max_queued: 0}"),
        "api.quotas: max_queued must be an integer from 1 to 4294967295 (line 4, column 57)"
    );
    assert!(
        e("{max_queued_per_key: 1.5}")
            .starts_with("api.quotas: max_queued_per_key must be an integer from 1 to 4294967295"),
    );
    assert!(e("{max_queued: 4294967296}").contains("max_queued must be an integer from 1"));
    assert!(
        e("{retry_after_s: 0}")
            .starts_with("api.quotas: retry_after_s must be an integer from 1 to 3600")
    );
    assert!(e("{retry_after_s: 3601}").contains("retry_after_s must be an integer from 1 to 3600"));
    assert!(e("[1]").starts_with("api: quotas must be a mapping"));
    assert!(e("{max_queue: 5}").contains("unsupported fields for api.quotas: max_queue"));
    assert!(e("{namespaces: [acme]}").starts_with("api.quotas: namespaces must be a mapping"));
    assert!(
        e("{namespaces: {acme: 5}}")
            .starts_with("api.quotas.namespaces.acme: must be a mapping with max_queued")
    );
    assert!(
        e("{namespaces: {acme: {}}}").starts_with(
            "api.quotas.namespaces.acme: must set max_queued and/or max_queued_per_key"
        )
    );
    assert!(
        e("{namespaces: {acme: {max_running: 1}}}")
            .contains("unsupported fields for api.quotas.namespaces.acme: max_running")
    );
    assert!(
        e("{namespaces: {acme: {max_queued: -1}}}")
            .starts_with("api.quotas.namespaces.acme: max_queued must be an integer from 1")
    );
    assert!(e("{namespaces: {'  ': {max_queued: 1}}}").contains("a namespace must be non-empty"));
    assert!(
        e("{namespaces: {acme: {max_queued: 1}, ' acme': {max_queued: 2}}}")
            .contains("namespace 'acme' is listed twice")
    );
}

#[test]
fn api_callbacks() {
    const A: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const B: &str = "whsec_AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    let load_api = |callbacks: &str| {
        onestep_config::load_str(
            &format!(
                "app: {{name: x}}\nresources:\n  db: {{type: mysql, dsn: x}}\napi: {{connector: db, namespace: n, callbacks: {callbacks}}}\n"
            ),
            Path::new("/srv/app.yaml"),
            &crate::common::opts(true),
        )
    };
    let cfg = onestep_config::load_str(
        "app: {name: x}\nresources:\n  db: {type: mysql, dsn: x}\napi: {connector: db, namespace: n}\n",
        Path::new("/srv/app.yaml"),
        &crate::common::opts(true),
    )
    .expect("no callbacks");
    assert_eq!(cfg.api.expect("api").settings.callbacks, None);
    let cfg = load_api(&format!(
        "{{allow: [https://hooks.example.com, 'http://127.0.0.1:9000'], secrets: '{A} {B}', \
         namespaces: {{acme: {{secrets: [{B}]}}}}, retry: {{max_attempts: 3, first_backoff_s: 0.5}}, timeout_s: 2, progress_interval_s: 30}}"
    ))
    .expect("callbacks");
    let c = cfg.api.expect("api").settings.callbacks.expect("callbacks");
    assert_eq!(c.allow.len(), 2);
    assert_eq!(c.allow[0].to_string(), "https://hooks.example.com:443");
    assert_eq!(c.secrets_for("n").len(), 2, "rotation: both sign");
    assert_eq!(c.secrets_for("acme").len(), 1);
    assert_eq!(c.max_attempts, 3);
    assert_eq!(c.first_backoff, std::time::Duration::from_millis(500));
    assert_eq!(c.timeout, std::time::Duration::from_secs(2));
    assert_eq!(c.progress_interval, std::time::Duration::from_secs(30));
    let d = load_api(&format!("{{allow: [https://h.example.com], secrets: {A}}}"))
        .expect("defaults")
        .api
        .expect("api")
        .settings
        .callbacks
        .expect("callbacks");
    assert_eq!(
        (
            d.max_attempts,
            d.first_backoff,
            d.timeout,
            d.progress_interval
        ),
        (
            8,
            std::time::Duration::from_secs(5),
            std::time::Duration::from_secs(10),
            std::time::Duration::from_secs(5)
        )
    );
    let e = |body: &str| load_api(body).expect_err(body).to_string();
    for bad in ["0", "3601", "1.5", "fast"] {
        let msg = e(&format!(
            "{{allow: [https://h.example.com], secrets: {A}, progress_interval_s: {bad}}}"
        ));
        assert!(
            msg.contains(
                "api.callbacks: progress_interval_s must be a whole number of seconds from 1 to 3600"
            ),
            "{bad}: {msg}"
        );
    }
    assert!(e("[1]").starts_with("api: callbacks must be a mapping"));
    assert!(e(&format!("{{secrets: {A}}}")).starts_with("api.callbacks: allow is required"));
    assert!(e(&format!("{{allow: [], secrets: {A}}}")).contains("allow must be a non-empty list"));
    let bad = e(&format!(
        "{{allow: ['https://h.example.com/path'], secrets: {A}}}"
    ));
    assert!(bad.starts_with("api.callbacks.allow[0]: "), "{bad}");
    let dup = e(&format!(
        "{{allow: [https://h.example.com, 'https://H.example.com:443'], secrets: {A}}}"
    ));
    assert!(
        dup.contains("duplicate origin https://h.example.com:443"),
        "{dup}"
    );
    assert!(
        e("{allow: [https://h.example.com]}").starts_with("api.callbacks: secrets is required")
    );
    let wrong = e("{allow: [https://h.example.com], secrets: 'whsec_c2hvcnQ= hunter2'}");
    assert!(wrong.starts_with("api.callbacks.secrets: "), "{wrong}");
    assert!(
        !wrong.contains("hunter2") && !wrong.contains("c2hvcnQ"),
        "never the secret: {wrong}"
    );
    assert!(
        e(&format!(
            "{{allow: [https://h.example.com], secrets: {A}, retry: {{max_attempts: 0}}}}"
        ))
        .contains("api.callbacks.retry: max_attempts must be an integer from 1 to 100")
    );
    assert!(
        e(&format!(
            "{{allow: [https://h.example.com], secrets: {A}, retry: {{first_backoff_s: 0}}}}"
        ))
        .contains("first_backoff_s must be a number > 0 and <= 3600")
    );
    assert!(
        e(&format!(
            "{{allow: [https://h.example.com], secrets: {A}, timeout_s: 301}}"
        ))
        .contains("timeout_s must be a number > 0 and <= 300")
    );
    assert!(
        e(&format!(
            "{{allow: [https://h.example.com], secrets: {A}, retries: 1}}"
        ))
        .contains("unsupported fields for api.callbacks: retries")
    );
    assert!(
        e(&format!(
            "{{allow: [https://h.example.com], secrets: {A}, namespaces: {{acme: {{}}}}}}"
        ))
        .starts_with("api.callbacks.namespaces.acme: secrets is required")
    );
}

/// `sandbox.network.rate_limits` (docs/configuration.md#sandbox-network): one
/// `{per_second, burst}` per allowed origin, keyed like `headers` (with `${VAR}` expanded);
/// an origin not in `allow`, one given twice, an unknown key or a bound out of range is refused
/// with its path.
#[test]
fn sandbox_network_rate_limits() {
    let dir = TempDir::new();
    dir.write("g/m.wasm", "\0asm");
    let opts = LoadOptions {
        env: EnvLookup::isolated([("PORT", "18080")]),
        check_files: true,
        strict: true,
        ..LoadOptions::default()
    };
    let with = |block: &str| {
        format!(
            "{HEAD}tasks:\n  - name: echo\n    source: jobs\n    handler: {{component: g/m.wasm}}\n    sandbox:\n      network:\n        allow: [https://api.openai.com, 'http://127.0.0.1:${{PORT}}', https://*.example.org]\n{block}"
        )
    };
    let good = with(
        "        rate_limits:\n          https://api.openai.com: {per_second: 1, burst: 5}\n          'http://127.0.0.1:${PORT}': {per_second: 0.5, burst: 1}\n",
    );
    let cfg = load(&dir.write("good.yaml", &good), &opts).expect("loads");
    let n = &cfg.tasks[0].sandbox.network;
    let limits: Vec<Option<(f64, u32)>> = n
        .allow
        .iter()
        .map(|a| a.rate_limit.map(|r| (r.per_second, r.burst)))
        .collect();
    assert_eq!(limits, [Some((1.0, 5)), Some((0.5, 1)), None]);
    assert_eq!(n.allow[0].bucket(), "origin:https://api.openai.com:443");
    let text = cfg.summary();
    assert!(
        text.contains(
            "rate_limits=[https://api.openai.com:443:1/s,burst=5 http://127.0.0.1:18080:0.5/s,burst=1]"
        ),
        "{text}"
    );
    let json = serde_json::to_string(&cfg.json_summary()).expect("json");
    assert!(json.contains("\"rate_limits\""), "{json}");

    let bad = |block: &str| {
        load(&dir.write("bad.yaml", &with(block)), &opts)
            .expect_err(block)
            .to_string()
    };
    for (block, path, why) in [
        (
            "        rate_limits:\n          https://other.example.com: {per_second: 1, burst: 1}\n",
            "tasks[0].sandbox.network.rate_limits:",
            "\"https://other.example.com\" is not one of sandbox.network.allow",
        ),
        (
            "        rate_limits:\n          https://api.openai.com: {per_second: 1, burst: 1}\n          https://api.openai.com:443: {per_second: 2, burst: 1}\n",
            "tasks[0].sandbox.network.rate_limits:",
            "the rate limit of https://api.openai.com:443 is given twice",
        ),
        (
            "        rate_limits:\n          https://api.openai.com: {per_second: 0, burst: 1}\n",
            "tasks[0].sandbox.network.rate_limits[\"https://api.openai.com\"].per_second:",
            "per_second must be a number > 0",
        ),
        (
            "        rate_limits:\n          https://api.openai.com: {per_second: 1}\n",
            "tasks[0].sandbox.network.rate_limits[\"https://api.openai.com\"]:",
            "rate_limit needs burst",
        ),
        (
            "        rate_limits:\n          https://api.openai.com: {per_second: 1, burst: 1, refill: 2}\n",
            "tasks[0].sandbox.network.rate_limits[\"https://api.openai.com\"]",
            "refill",
        ),
        (
            "        rate_limits: [https://api.openai.com]\n",
            "tasks[0].sandbox.network.rate_limits:",
            "rate_limits must be a mapping of origin to {per_second: NUMBER, burst: INTEGER}",
        ),
    ] {
        let e = bad(block);
        assert!(e.contains(path) && e.contains(why), "{block}: {e}");
    }
}
