//! `${…}` interpolation (docs/configuration.md#environment-interpolation).

use onestep_config::EnvLookup;
use onestep_config::interpolate::{expand_text, expand_value, references, split_reference};
use onestep_config::node::{Node, Value};

fn env() -> EnvLookup {
    EnvLookup::isolated([
        ("A", "alpha"),
        ("EMPTY", ""),
        ("A:b", "colon-name"),
        ("NUM", "123"),
        ("FLOAT", "2.5"),
        ("BOOL", "true"),
        ("ARR", "[1, \"x\"]"),
        ("OBJ", "{\"k\": 1}"),
        ("NULL", "null"),
        ("NAN", "NaN"),
        ("INF", "Infinity"),
        ("QUOTED", "\"q\""),
        ("BAD", "{not json"),
    ])
}

fn typed(s: &str) -> Value {
    expand_value(s, &Node::new(Value::Null), &env()).value
}

#[test]
fn syntax_and_defaults() {
    let e = env();
    assert_eq!(expand_text("${A}", &e), "alpha");
    assert_eq!(expand_text("${UNSET}", &e), "");
    assert_eq!(expand_text("${UNSET:-dflt}", &e), "dflt");
    assert_eq!(expand_text("${UNSET:dflt}", &e), "dflt");
    assert_eq!(expand_text("${UNSET:-}", &e), "");
    // Set but empty: the (empty) value wins over the default (REF-QUIRK kept).
    assert_eq!(expand_text("${EMPTY:-dflt}", &e), "");
    assert_eq!(expand_text("${EMPTY:dflt}", &e), "");
    // Split at the first `:-` if present, else at the first `:`.
    assert_eq!(split_reference("A:b:-c"), ("A:b", Some("c")));
    assert_eq!(split_reference("A:b:c"), ("A", Some("b:c")));
    assert_eq!(split_reference("A:-b:c"), ("A", Some("b:c")));
    assert_eq!(expand_text("${A:b:-c}", &e), "colon-name");
    assert_eq!(expand_text("${X:y:-c}", &e), "c");
    // Defaults may contain URLs with colons.
    assert_eq!(
        expand_text("${DSN:-mysql://root@127.0.0.1:3306/db}", &e),
        "mysql://root@127.0.0.1:3306/db"
    );
    // No escaping: `$${X}` still expands `${X}`.
    assert_eq!(expand_text("$${A}", &e), "$alpha");
    // `${}` is not a reference; an unclosed `${` is left alone.
    assert_eq!(expand_text("${}", &e), "${}");
    assert_eq!(expand_text("x ${A", &e), "x ${A");
    assert_eq!(expand_text("${A}-${UNSET:-d}-${A}", &e), "alpha-d-alpha");
    assert_eq!(references("a ${X} b ${Y:-z}").len(), 2);
}

#[test]
fn pure_reference_typing() {
    assert_eq!(typed("${NUM}"), Value::Int(123));
    assert_eq!(typed("  ${NUM}  "), Value::Int(123));
    assert_eq!(typed("${FLOAT}"), Value::Float(2.5));
    assert_eq!(typed("${BOOL}"), Value::Bool(true));
    assert!(matches!(typed("${ARR}"), Value::Seq(items) if items.len() == 2));
    assert!(matches!(typed("${OBJ}"), Value::Map(entries) if entries[0].0 == "k"));
    assert_eq!(typed("${UNSET:-42}"), Value::Int(42));
    // null, invalid JSON, NaN/Infinity, JSON strings and the empty string stay strings.
    assert_eq!(typed("${NULL}"), Value::Str("null".into()));
    assert_eq!(typed("${BAD}"), Value::Str("{not json".into()));
    assert_eq!(typed("${NAN}"), Value::Str("NaN".into()));
    assert_eq!(typed("${INF}"), Value::Str("Infinity".into()));
    assert_eq!(typed("${QUOTED}"), Value::Str("\"q\"".into()));
    assert_eq!(typed("${EMPTY}"), Value::Str(String::new()));
    assert_eq!(typed("${UNSET}"), Value::Str(String::new()));
    // Mixed strings always stay strings.
    assert_eq!(typed("n-${NUM}"), Value::Str("n-123".into()));
    assert_eq!(typed("${NUM}${NUM}"), Value::Str("123123".into()));
    assert_eq!(typed("plain"), Value::Str("plain".into()));
}

#[test]
fn through_the_loader() {
    let yaml = "\
app:
  name: '${APP_NAME:-demo}'
  config:
    ${KEY}: '${A}'
    n: ${NUM}
    literal: 5
resources:
  db: {type: mysql, dsn: '${DSN:-mysql://root@127.0.0.1:3306/x}'}
  jobs:
    type: mysql_execution_source
    connector: db
    namespace: '${NS:-ns}'
    task_names: ['${TASK:-echo}']
    batch_size: '${BATCH}'
    worker_id: 'w-${NUM}'
";
    let opts = onestep_config::LoadOptions {
        env: EnvLookup::isolated([("A", "alpha"), ("NUM", "7"), ("BATCH", "4")]),
        check_files: false,
        ..Default::default()
    };
    let cfg =
        onestep_config::load_str(yaml, std::path::Path::new("/x/app.yaml"), &opts).expect("loads");
    assert_eq!(cfg.name, "demo");
    // Keys are not expanded; non-string scalars are untouched.
    assert_eq!(cfg.config["${KEY}"], "alpha");
    assert_eq!(cfg.config["n"], 7);
    assert_eq!(cfg.config["literal"], 5);
    assert_eq!(
        cfg.connectors["db"].dsn.expose(),
        "mysql://root@127.0.0.1:3306/x"
    );
    let s = &cfg.sources["jobs"];
    assert_eq!(s.batch_size, 4);
    assert_eq!(s.worker_id, "w-7");
}

#[test]
fn numeric_worker_id_from_env_is_reported_clearly() {
    // REF-QUIRK kept: `worker_id: "${HOSTNAME}"` with HOSTNAME=123 yields the integer 123.
    let yaml = "app: {name: x}\nresources:\n  db: {type: mysql, dsn: x}\n  jobs: {type: mysql_execution_source, connector: db, namespace: n, task_names: [t], worker_id: '${HOSTNAME}'}\n";
    let opts = onestep_config::LoadOptions {
        env: EnvLookup::isolated([("HOSTNAME", "123")]),
        check_files: false,
        ..Default::default()
    };
    let e = onestep_config::load_str(yaml, std::path::Path::new("/x/app.yaml"), &opts)
        .expect_err("fails");
    assert_eq!(
        e.to_string(),
        "resources.jobs: worker_id must be non-empty and <= 255 characters (got integer 123) (line 4, column 97)"
    );
}
