//! `onestep render FILE [--format text|mermaid]` (docs/cli.md#onestep-render): the worker
//! topology a YAML app file declares — connectors → execution sources → tasks → components —
//! with each task's sandbox capabilities (memory, fuel, files, environment, network), as an
//! indented text tree or a Mermaid flowchart. Static: it reads the file only (no database, no
//! compilation; `onestep check` loads the components).

use std::fmt::Write as _;
use std::path::PathBuf;

use onestep_config::{AppConfig, MysqlConnectorConfig, SandboxSettings, TaskConfig};

use super::common::{EnvArgs, load};

/// Output format of `onestep render`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// An indented tree.
    Text,
    /// A Mermaid flowchart (`flowchart LR`), e.g. for a Markdown page.
    Mermaid,
}

/// Arguments of `onestep render`.
#[derive(Debug, clap::Args)]
pub(crate) struct RenderArgs {
    /// The YAML app file.
    pub(crate) file: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub(crate) format: Format,
    #[command(flatten)]
    pub(crate) env: EnvArgs,
}

/// `onestep render`: exit 0, or 2 when the file does not load.
pub(crate) fn run(args: RenderArgs) -> u8 {
    let cfg = match load(&args.file, false, &args.env) {
        Ok(c) => c,
        Err(code) => return code,
    };
    print!(
        "{}",
        match args.format {
            Format::Text => text(&cfg),
            Format::Mermaid => mermaid(&cfg),
        }
    );
    0
}

/// Where a connector points, without its credentials: `host:port/db` of its DSN.
fn endpoint(connector: &MysqlConnectorConfig) -> String {
    let dsn = connector.dsn.expose();
    let rest = dsn.split_once("://").map_or(dsn, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let kind = match connector.kind {
        onestep_config::DatabaseKind::Mysql => "mysql",
        onestep_config::DatabaseKind::Postgres => "postgres",
        onestep_config::DatabaseKind::Sqlite => "sqlite",
    };
    format!("{kind} {rest}")
}

fn mib(bytes: u64) -> String {
    if bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

/// The sandbox's capabilities and main limits, one item each.
fn capabilities(s: &SandboxSettings) -> Vec<String> {
    let mut out = vec![format!("memory {}", mib(s.memory_limit_bytes))];
    out.push(match s.fuel {
        Some(f) => format!("fuel {f}"),
        None => "fuel unlimited".to_owned(),
    });
    if s.preopens.is_empty() {
        out.push("files: none".to_owned());
    } else {
        let dirs: Vec<String> = s
            .preopens
            .iter()
            .map(|p| {
                format!(
                    "{} ({}, {})",
                    p.guest,
                    if p.writable() { "rw" } else { "ro" },
                    p.host.display()
                )
            })
            .collect();
        out.push(format!("files: {}", dirs.join(", ")));
    }
    let mut env: Vec<String> = s.env.clone();
    env.extend(s.env_values.keys().map(|k| format!("{k}=…")));
    out.push(if env.is_empty() {
        "env: none".to_owned()
    } else {
        format!("env: {}", env.join(", "))
    });
    out.push(if s.network.allow.is_empty() {
        "network: none".to_owned()
    } else {
        let origins: Vec<String> = s
            .network
            .allow
            .iter()
            .map(|o| o.origin.to_string())
            .collect();
        format!("network: {}", origins.join(", "))
    });
    out
}

fn timeout(task: &TaskConfig) -> String {
    task.timeout
        .map_or_else(|| "none".to_owned(), |t| format!("{}s", t.as_secs_f64()))
}

/// The tasks fed by source `name`, in file order.
fn tasks_of<'a>(cfg: &'a AppConfig, source: &'a str) -> impl Iterator<Item = &'a TaskConfig> {
    cfg.tasks.iter().filter(move |t| t.source == source)
}

/// The indented tree.
pub(crate) fn text(cfg: &AppConfig) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "app {} ({})", cfg.name, cfg.source_path.display());
    for connector in cfg.connectors.values() {
        let _ = writeln!(
            out,
            "└ connector {}: {}",
            connector.name,
            endpoint(connector)
        );
        for source in cfg
            .sources
            .values()
            .filter(|s| s.connector == connector.name)
        {
            let _ = writeln!(
                out,
                "  └ source {}: namespace {}, task {}, tables {}/{}, lease {}s, heartbeat {}s",
                source.name,
                source.namespace,
                source.task_name,
                source.table,
                source.attempts_table,
                source.lease_duration.as_secs_f64(),
                source.heartbeat_interval.as_secs_f64()
            );
            for task in tasks_of(cfg, &source.name) {
                let _ = writeln!(
                    out,
                    "    └ task {}: concurrency {}, timeout {}, retry {}",
                    task.name,
                    task.concurrency,
                    timeout(task),
                    task.retry.name()
                );
                let _ = writeln!(
                    out,
                    "      └ component {}",
                    task.handler.component.display()
                );
                let _ = writeln!(
                    out,
                    "        sandbox: {}",
                    capabilities(&task.sandbox).join("; ")
                );
            }
        }
    }
    out
}

/// A Mermaid node id: `prefix_` and the name with every other character as `_`, plus its
/// position to keep ids unique.
fn node_id(prefix: &str, index: usize, name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("{prefix}{index}_{clean}")
}

/// A Mermaid label: quoted text, lines joined with `<br/>`, quotes and markup escaped.
fn label(lines: &[String]) -> String {
    let escaped: Vec<String> = lines
        .iter()
        .map(|l| {
            l.replace('&', "#amp;")
                .replace('"', "#quot;")
                .replace('<', "#lt;")
                .replace('>', "#gt;")
        })
        .collect();
    format!("\"{}\"", escaped.join("<br/>"))
}

/// The Mermaid flowchart: connectors as cylinders, sources as boxes, tasks as rounded boxes,
/// components as subroutines labelled with their sandbox.
pub(crate) fn mermaid(cfg: &AppConfig) -> String {
    let mut out = String::from("flowchart LR\n");
    let _ = writeln!(out, "  %% app {}", cfg.name);
    for (ci, connector) in cfg.connectors.values().enumerate() {
        let cid = node_id("c", ci, &connector.name);
        let _ = writeln!(
            out,
            "  {cid}[({})]",
            label(&[format!("connector {}", connector.name), endpoint(connector)])
        );
        for (si, source) in cfg
            .sources
            .values()
            .enumerate()
            .filter(|(_, s)| s.connector == connector.name)
        {
            let sid = node_id("s", si, &source.name);
            let _ = writeln!(
                out,
                "  {sid}[{}]",
                label(&[
                    format!("source {}", source.name),
                    format!("namespace {}", source.namespace),
                    format!("lease {}s", source.lease_duration.as_secs_f64()),
                ])
            );
            let _ = writeln!(out, "  {cid} --> {sid}");
            for (ti, task) in cfg.tasks.iter().enumerate() {
                if task.source != source.name {
                    continue;
                }
                let tid = node_id("t", ti, &task.name);
                let wid = node_id("w", ti, &task.name);
                let _ = writeln!(
                    out,
                    "  {tid}({})",
                    label(&[
                        format!("task {}", task.name),
                        format!("concurrency {}", task.concurrency),
                        format!("timeout {}", timeout(task)),
                        format!("retry {}", task.retry.name()),
                    ])
                );
                let file = task
                    .handler
                    .component
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| task.handler.component.display().to_string());
                let mut lines = vec![file];
                lines.extend(capabilities(&task.sandbox));
                let _ = writeln!(out, "  {wid}[[{}]]", label(&lines));
                let _ = writeln!(out, "  {sid} --> {tid} --> {wid}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_ids_are_escaped() {
        assert_eq!(node_id("t", 3, "my-task.v2"), "t3_my_task_v2");
        assert_eq!(
            label(&["a \"b\" <c>".into(), "d&e".into()]),
            "\"a #quot;b#quot; #lt;c#gt;<br/>d#amp;e\""
        );
    }

    #[test]
    fn endpoints_hide_credentials() {
        let c = MysqlConnectorConfig {
            name: "db".into(),
            dsn: onestep_config::Secret::new(
                "mysql://user:s3cret@db.local:3306/app?ssl-mode=REQUIRED",
            ),
            engine_options: Default::default(),
            kind: onestep_config::DatabaseKind::Mysql,
        };
        assert_eq!(endpoint(&c), "mysql db.local:3306/app");
        let pg = MysqlConnectorConfig {
            dsn: onestep_config::Secret::new("postgres://u:pw@pg.local:5432/app?sslmode=require"),
            kind: onestep_config::DatabaseKind::Postgres,
            ..c
        };
        assert_eq!(endpoint(&pg), "postgres pg.local:5432/app");
    }
}
