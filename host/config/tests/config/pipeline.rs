//! The load pipeline (docs/configuration.md#load-pipeline): parse, dotenv selection and precedence, strict env, errors,
//! summaries.

use std::path::Path;

use onestep_config::env::{parse_dotenv_line, read_dotenv};
use onestep_config::{ConfigError, EnvLookup, LoadOptions, format_load_error, load};

use crate::common::{BASE, TempDir, err, load_text, opts};

fn isolated(vars: &[(&str, &str)]) -> LoadOptions {
    LoadOptions {
        env: EnvLookup::isolated(vars.iter().map(|(k, v)| (k.to_string(), v.to_string()))),
        check_files: false,
        ..LoadOptions::default()
    }
}

#[test]
fn parse_errors_carry_line_and_column() {
    let e = load_text("app:\n  name: x\n  bad: [1, 2\nresources: {}\n", false).expect_err("syntax");
    assert!(matches!(e, ConfigError::Parse { line: 4, .. }), "{e:?}");
    assert!(e.to_string().starts_with("invalid YAML: "), "{e}");
    assert!(e.to_string().ends_with("(line 4, column 10)"), "{e}");
    assert_eq!(e.location(), Some((4, 10)));
    assert_eq!(
        err("app:\n  name: x\n  name: y\n", false),
        "invalid YAML: duplicate mapping key: name (line 3, column 3)"
    );
}

#[test]
fn top_level_shape() {
    assert_eq!(
        err("- a\n- b\n", false),
        "YAML app config must be a mapping at the top level"
    );
    assert_eq!(
        err("just text\n", false),
        "YAML app config must be a mapping at the top level"
    );
    // An empty file is `{}`: it parses, then the build wants a name.
    assert_eq!(err("", false), "name must be a non-empty string");
    assert_eq!(
        err("# only a comment\n", true),
        "name must be a non-empty string"
    );
}

#[test]
fn anchors_and_merge_keys() {
    let yaml = "\
app: {name: x}
resources:
  db: {type: mysql, dsn: x}
  a: &src
    type: mysql_execution_source
    connector: db
    namespace: ns
    task_names: [a]
    batch_size: 7
  b:
    <<: *src
    task_names: [b]
";
    let cfg = load_text(yaml, true).expect("merge keys");
    assert_eq!(cfg.sources["b"].batch_size, 7);
    assert_eq!(cfg.sources["b"].task_name, "b");
    assert_eq!(cfg.sources["a"].task_name, "a");
}

#[test]
fn yaml_1_2_booleans() {
    // `yes`/`no` are strings (YAML 1.2), so a non-boolean auto_create is reported.
    let yaml = "app: {name: x}\nresources:\n  db: {type: mysql, dsn: x}\n  j: {type: mysql_execution_source, connector: db, namespace: n, task_names: [t], auto_create: no}\n";
    assert_eq!(
        err(yaml, false),
        "resources.j: auto_create must be a boolean (line 4, column 96)"
    );
}

#[test]
fn env_file_selection_and_precedence() {
    let dir = TempDir::new();
    let yaml = "app:\n  name: '${APP:-none}'\n";
    let target = dir.write("app.yaml", yaml);
    // No dotenv at all.
    assert_eq!(load(&target, &isolated(&[])).expect("loads").name, "none");
    // `.env` next to the YAML is used when it exists.
    dir.write(".env", "APP=from-dotenv\n");
    let cfg = load(&target, &isolated(&[])).expect("loads");
    assert_eq!(cfg.name, "from-dotenv");
    assert_eq!(
        cfg.env_file.as_deref(),
        Some(dir.path().join(".env").as_path())
    );
    // The environment wins over the dotenv file (never overridden).
    assert_eq!(
        load(&target, &isolated(&[("APP", "from-env")]))
            .expect("loads")
            .name,
        "from-env"
    );
    // app.env_file (relative to the YAML dir) beats `.env`.
    dir.write("conf/app.env", "APP=from-app-env-file\n");
    let target2 = dir.write(
        "app2.yaml",
        "app:\n  name: '${APP:-none}'\n  env_file: conf/app.env\n",
    );
    assert_eq!(
        load(&target2, &isolated(&[])).expect("loads").name,
        "from-app-env-file"
    );
    // --env-file beats app.env_file.
    dir.write("cli.env", "APP=from-cli\n");
    let mut opts = isolated(&[]);
    opts.env_file = Some("cli.env".into());
    assert_eq!(load(&target2, &opts).expect("loads").name, "from-cli");
    // A named file that does not exist is an error (CLI or app.env_file).
    opts.env_file = Some("missing.env".into());
    let e = load(&target2, &opts).expect_err("missing");
    assert_eq!(
        e.to_string(),
        format!(
            "env_file not found: {}",
            dir.path().join("missing.env").display()
        )
    );
    let target3 = dir.write("app3.yaml", "app:\n  name: x\n  env_file: nope.env\n");
    let e = load(&target3, &isolated(&[])).expect_err("missing");
    assert_eq!(
        e.to_string(),
        format!(
            "env_file not found: {}",
            dir.path().join("nope.env").display()
        )
    );
    // The dotenv values are available to the worker through cfg.env (process env untouched).
    let cfg = load(&target, &isolated(&[])).expect("loads");
    assert_eq!(cfg.env.get("APP").as_deref(), Some("from-dotenv"));
    assert!(std::env::var_os("APP").is_none());
}

#[test]
fn dotenv_syntax() {
    assert_eq!(parse_dotenv_line("A=1"), Some(("A".into(), "1".into())));
    assert_eq!(
        parse_dotenv_line("  A = spaced value  "),
        Some(("A".into(), "spaced value".into()))
    );
    assert_eq!(
        parse_dotenv_line("A=x # comment"),
        Some(("A".into(), "x".into()))
    );
    assert_eq!(
        parse_dotenv_line("A=\"a # b $X \\n\""),
        Some(("A".into(), "a # b $X \\n".into()))
    );
    assert_eq!(
        parse_dotenv_line("A='lit$eral' # c"),
        Some(("A".into(), "lit$eral".into()))
    );
    assert_eq!(
        parse_dotenv_line("A=\"\""),
        Some(("A".into(), String::new()))
    );
    assert_eq!(parse_dotenv_line("export A=1"), None);
    assert_eq!(parse_dotenv_line("A="), None);
    assert_eq!(parse_dotenv_line("A=\"unterminated"), None);
    assert_eq!(parse_dotenv_line("A=\"x\" trailing"), None);
    assert_eq!(parse_dotenv_line("1A=x"), None);
    let dir = TempDir::new();
    let p = dir.write("x.env", "# comment\n\nA=1\nexport B=2\nC=\nA=3\n");
    let d = read_dotenv(&p).expect("reads");
    assert_eq!(d.vars.get("A").map(String::as_str), Some("3"));
    assert_eq!(d.vars.len(), 1);
    assert_eq!(d.warnings.len(), 2);
    assert!(
        d.warnings[0].ends_with(":4: skipped invalid dotenv line"),
        "{:?}",
        d.warnings
    );
}

#[test]
fn strict_env_reports_every_missing_reference() {
    let yaml = "\
app:
  name: x
resources:
  db: {type: mysql, dsn: '${DB_DSN}'}
  jobs: {type: mysql_execution_source, connector: db, namespace: '${NS:-n}', task_names: ['${TASK}'], worker_id: '${EMPTY}'}
tasks:
  - source: jobs
    handler: {component: '${DB_DSN}/x.wasm'}
";
    let mut opts = isolated(&[("EMPTY", "")]);
    opts.strict_env = true;
    let e =
        onestep_config::load_str(yaml, Path::new("/x/app.yaml"), &opts).expect_err("strict env");
    assert_eq!(
        e.to_string(),
        "strict_env: missing required environment variable(s):\n\
         \x20 - DB_DSN (referenced at: config.resources.db.dsn)\n\
         \x20 - TASK (referenced at: config.resources.jobs.task_names[0])\n\
         \x20 - DB_DSN (referenced at: config.tasks[0].handler.component)\n\
         hint: set them in the environment or in an env file (--env-file / app.env_file), or give a default with ${VAR:-default}"
    );
    // app.strict_env: true turns it on too; without it the references expand to "".
    let with_app = yaml.replace("  name: x\n", "  name: x\n  strict_env: true\n");
    assert!(matches!(
        onestep_config::load_str(&with_app, Path::new("/x/app.yaml"), &isolated(&[("EMPTY", "")])),
        Err(ConfigError::StrictEnv(v)) if v.len() == 3
    ));
    assert_eq!(
        onestep_config::load_str(yaml, Path::new("/x/app.yaml"), &isolated(&[]))
            .expect_err("dsn empty")
            .to_string(),
        "resources.db: 'dsn' must be a non-empty string (line 4, column 7)"
    );
}

#[test]
fn cli_error_format_and_secret_redaction() {
    let e = load_text("- a\n", false).expect_err("list");
    assert_eq!(
        format_load_error("worker.yaml", &e),
        "onestep: failed to load worker.yaml: YAML app config must be a mapping at the top level"
    );
    let cfg = load_text(
        &BASE.replace("mysql://root@127.0.0.1/x", "mysql://u:s3cret@h/db"),
        false,
    )
    .expect("loads");
    let debug = format!("{cfg:?}");
    assert!(!debug.contains("s3cret"), "{debug}");
    assert!(debug.contains("<redacted>"));
    let json = serde_json::to_string(&cfg).expect("json");
    assert!(!json.contains("s3cret"));
    assert_eq!(cfg.connectors["db"].dsn.to_string(), "<redacted>");
    let missing =
        load(Path::new("/nonexistent/dir/app.yaml"), &isolated(&[])).expect_err("missing");
    assert!(
        missing
            .to_string()
            .starts_with("cannot read /nonexistent/dir/app.yaml: "),
        "{missing}"
    );
}

#[test]
fn text_and_json_summary() {
    let yaml = format!(
        "{}    concurrency: 4\n    timeout_s: 1800\n    retry: {{type: exponential_backoff, jitter: full}}\n    description: says hi\n    config: {{a: 1}}\n",
        BASE
    );
    let cfg = onestep_config::load_str(&yaml, Path::new("/srv/app/worker.yaml"), &isolated(&[]))
        .expect("loads");
    assert_eq!(
        cfg.summary(),
        "Target: /srv/app/worker.yaml\n\
         App: demo\n\
         Shutdown timeout: 30.00s\n\
         Resources: 2 (db<MySQLConnector>, jobs<MySQLExecutionSource>)\n\
         Tasks: 1\n\
         - echo source=jobs<MySQLExecutionSource> concurrency=4 timeout=1800.00s retry=ExponentialBackoff description=says hi\n\
         \x20 handler=/srv/app/echo.wasm memory=67108864B fuel=unlimited preopens=[] env=[] instances=32 memories=4 tables=8x100000 open_handles=256 log=1048576B/5000lines message=16384B rate=8388608B/min cancel_grace=50ms\n\
         \x20 params=[] config=[a] metadata=[]\n\
         \x20 lease=90.00s heartbeat=30.00s cancel_poll=1.00s\n"
    );
    let json = serde_json::to_value(cfg.json_summary()).expect("json");
    assert_eq!(json["target"], "/srv/app/worker.yaml");
    assert_eq!(json["resources"][1]["name"], "mysql.execution:ns");
    assert_eq!(json["resources"][1]["type"], "MySQLExecutionSource");
    assert_eq!(json["tasks"][0]["retry"]["type"], "exponential_backoff");
    assert_eq!(json["tasks"][0]["retry"]["jitter"], "full");
    assert_eq!(json["tasks"][0]["timeout_s"], 1800.0);
    assert_eq!(json["tasks"][0]["sandbox"]["memory_limit_bytes"], 67108864);
    assert_eq!(
        json["tasks"][0]["sandbox"]["log_rate_bytes_per_minute"],
        8388608
    );
    assert_eq!(json["tasks"][0]["source"]["heartbeat_interval_s"], 30.0);
    assert_eq!(json["tasks"][0]["source"]["cancel_poll_interval_s"], 1.0);
}

/// A relative `sqlite://` path is relative to the file's directory (percent-encoded), like every
/// other relative path; absolute paths and other backends' DSNs are kept as written.
#[test]
fn relative_sqlite_paths_are_beside_the_file() {
    let doc = |dsn: &str| {
        BASE.replace("type: mysql\n", "type: sqlite\n")
            .replace(
                "type: mysql_execution_source",
                "type: sqlite_execution_source",
            )
            .replace("dsn: mysql://root@127.0.0.1/x", &format!("dsn: \"{dsn}\""))
    };
    let load = |dsn: &str, at: &str| {
        let cfg = onestep_config::load_str(&doc(dsn), Path::new(at), &opts(true))
            .unwrap_or_else(|e| panic!("{dsn}: {e}"));
        cfg.connectors["db"].dsn.expose().to_owned()
    };
    assert_eq!(
        load("sqlite://.onestep/q.db", "/srv/app/app.yaml"),
        "sqlite:///srv/app/.onestep/q.db"
    );
    assert_eq!(
        load("sqlite://./q.db", "/srv/my app%/app.yaml"),
        "sqlite:///srv/my%20app%25/q.db"
    );
    assert_eq!(
        load("sqlite:///var/q.db", "/srv/app/app.yaml"),
        "sqlite:///var/q.db"
    );
}
