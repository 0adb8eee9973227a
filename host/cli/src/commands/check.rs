//! `onestep check [--strict] [--connect] [--json] FILE` (docs/cli.md#onestep-check): loads the
//! file as `onestep run` does, then loads every task's component as a worker does at start
//! (compile through the compile cache, link against the host's imports for the task's sandbox),
//! so a component the worker would refuse is reported here first, with the same message: an
//! error with `--strict`, a problem line without (docs/cli.md#component-checks). Each loaded
//! component is listed with its world version, its outbound-HTTP import and how it was loaded.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use onestep_config::AppConfig;

use super::common::{EnvArgs, load};
use crate::wiring::store::{Store, StoreOptions};
use crate::wiring::wasm_runner::load_task_handler;
use crate::wiring::{backend_key, build_runtime, sandbox_settings, store_options};

/// Arguments of `onestep check`.
#[derive(Debug, clap::Args)]
pub(crate) struct CheckArgs {
    /// The YAML app file.
    pub(crate) target: PathBuf,
    /// Apply strict validation (unknown keys and the rules of docs/configuration.md#strict-validation) first.
    #[arg(long)]
    pub(crate) strict: bool,
    /// Also open every execution source: report reachability, server version, session settings
    /// and table presence (with `auto_create: true` this creates missing tables).
    #[arg(long)]
    pub(crate) connect: bool,
    /// Seconds allowed per connectivity probe.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    pub(crate) connect_timeout: f64,
    /// Print the summary as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) env: EnvArgs,
}

/// Exit codes: 0 loaded (and every probe connected; without `--strict`, also when a component has
/// problems, printed on stderr); 1 a probe failed; 2 load/validation error (with `--strict`,
/// including a component that cannot be loaded).
pub(crate) async fn run(args: CheckArgs) -> u8 {
    let cfg = match load(&args.target, args.strict, &args.env) {
        Ok(c) => c,
        Err(code) => return code,
    };
    for w in &cfg.warnings {
        eprintln!("onestep: warning: {w}");
    }
    let components = component_reports(&cfg);
    let problems: Vec<&str> = components
        .iter()
        .filter_map(|c| c.problem.as_ref().map(|(_, m)| m.as_str()))
        .collect();
    let target = args.target.display();
    if args.strict && !problems.is_empty() {
        for p in &problems {
            eprintln!("onestep: failed to load {target}: {p}");
        }
        return 2;
    }
    for p in &problems {
        eprintln!("onestep: problem in {target}: {p}");
    }
    if args.json {
        let mut summary = match serde_json::to_value(cfg.json_summary()) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("onestep: cannot render the summary: {e}");
                return 2;
            }
        };
        if let Some(map) = summary.as_object_mut() {
            map.insert(
                "components".to_owned(),
                components.iter().map(ComponentReport::json).collect(),
            );
        }
        match serde_json::to_string_pretty(&summary) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("onestep: cannot render the summary: {e}");
                return 2;
            }
        }
    } else {
        print!("{}", cfg.summary());
        print_components(&components);
    }
    if !args.connect {
        return 0;
    }
    let limit = match super::common::seconds_flag(
        "--connect-timeout",
        args.connect_timeout,
        super::common::SecondsRange::Positive,
    ) {
        Ok(limit) => limit,
        Err(e) => {
            eprintln!("onestep: {e}");
            return 2;
        }
    };
    let mut seen = std::collections::BTreeSet::new();
    let mut ok = true;
    println!("Connectivity:");
    for source in cfg.sources.values() {
        if !seen.insert(backend_key(source)) {
            continue;
        }
        let line = match store_options(&cfg, source) {
            Err(e) => {
                ok = false;
                format!("failed ({e:#})")
            }
            Ok(opts) => match tokio::time::timeout(limit, probe(opts)).await {
                Ok(Ok(line)) => line,
                Ok(Err(e)) => {
                    ok = false;
                    format!("failed ({e})")
                }
                Err(_) => {
                    ok = false;
                    "timed_out".to_owned()
                }
            },
        };
        let display = source.kind.source_display();
        println!("- {}<{display}>: {line}", source.name);
    }
    println!("Connectivity: {}", if ok { "ok" } else { "failed" });
    if ok { 0 } else { 1 }
}

/// What loading one task's component found.
struct ComponentReport {
    task: String,
    path: PathBuf,
    /// Loaded: world version, the `wasi:http` import if any, SHA-256, how it was loaded.
    loaded: Option<Loaded>,
    /// Not loadable: (kind, the message `onestep run` fails with).
    problem: Option<(&'static str, String)>,
    elapsed: Duration,
}

struct Loaded {
    world: &'static str,
    http: bool,
    digest: String,
    /// `compiled`, `disk cache` or `memory cache`.
    how: &'static str,
}

impl ComponentReport {
    fn json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "task": self.task,
            "component": self.path,
            "load_ms": self.elapsed.as_secs_f64() * 1000.0,
        });
        if let Some(l) = &self.loaded {
            v["world"] = l.world.into();
            v["imports_http"] = l.http.into();
            v["sha256"] = l.digest.clone().into();
            v["loaded_from"] = l.how.into();
        }
        if let Some((kind, message)) = &self.problem {
            v["problem"] = serde_json::json!({"kind": kind, "message": message});
        }
        v
    }
}

fn print_components(components: &[ComponentReport]) {
    println!("Components:");
    for c in components {
        let ms = c.elapsed.as_secs_f64() * 1000.0;
        match (&c.loaded, &c.problem) {
            (Some(l), _) => println!(
                "- {}: {} world={} network={} sha256={} ({}, {ms:.1} ms)",
                c.task,
                c.path.display(),
                l.world,
                if l.http { "wasi:http" } else { "none" },
                &l.digest[..l.digest.len().min(12)],
                l.how,
            ),
            (None, Some((kind, _))) => println!(
                "- {}: {} problem={kind} (see stderr)",
                c.task,
                c.path.display()
            ),
            (None, None) => {}
        }
    }
    let total: Duration = components.iter().map(|c| c.elapsed).sum();
    let loaded = components.iter().filter(|c| c.loaded.is_some()).count();
    println!(
        "Components: {loaded} of {} loaded in {:.1} ms",
        components.len(),
        total.as_secs_f64() * 1000.0
    );
}

/// Loads every task's component into one runtime built as `onestep run` builds it, as the
/// worker does at start; one report per task (a runtime that cannot start is one problem).
fn component_reports(cfg: &AppConfig) -> Vec<ComponentReport> {
    let runtime = match build_runtime(cfg) {
        Ok(r) => r,
        Err(e) => {
            return vec![ComponentReport {
                task: "*".to_owned(),
                path: PathBuf::new(),
                loaded: None,
                problem: Some(("engine", format!("{e:#}"))),
                elapsed: Duration::ZERO,
            }];
        }
    };
    cfg.tasks
        .iter()
        .map(|task| {
            let sandbox = sandbox_settings(&task.sandbox, &cfg.env);
            let before = runtime.cache_stats();
            let started = Instant::now();
            let result = load_task_handler(&runtime, task, &sandbox);
            let elapsed = started.elapsed();
            let after = runtime.cache_stats();
            let (loaded, problem) = match result {
                Ok(h) => (
                    Some(Loaded {
                        world: h.world_version(),
                        http: h.imports_http(),
                        digest: h.digest_hex(),
                        how: if after.compiles > before.compiles {
                            "compiled"
                        } else if after.disk_hits > before.disk_hits {
                            "disk cache"
                        } else {
                            "memory cache"
                        },
                    }),
                    None,
                ),
                Err(e) => {
                    let kind = e
                        .downcast_ref::<onestep_wasm::Error>()
                        .map_or("load", onestep_wasm::Error::kind);
                    (None, Some((kind, format!("{e:#}"))))
                }
            };
            ComponentReport {
                task: task.name.clone(),
                path: task.handler.component.clone(),
                loaded,
                problem,
                elapsed,
            }
        })
        .collect()
}

async fn probe(opts: StoreOptions) -> Result<String, onestep_core::ExecutionError> {
    let tables = opts.tables.clone();
    let backend = Store::open(&opts).await?;
    let session = backend.session().await?;
    let line = format!(
        "connected server={} time_zone={} isolation={} tables={},{} created=[{}]",
        backend.server_version(),
        session.time_zone,
        session.isolation,
        tables.executions,
        tables.attempts,
        backend.tables_created().join(",")
    );
    let line = with_upgrade_hint(line, backend.upgrade_command().as_deref());
    backend.close().await?;
    Ok(line)
}

/// Tables the reference created and `onestep migrate --upgrade` has not upgraded yet work, at a
/// cost that grows with their history (docs/schema.md#upgrading-reference-tables); the line says
/// so with the command that fixes it. Not a failure: the connection is fine.
fn with_upgrade_hint(line: String, command: Option<&str>) -> String {
    match command {
        Some(cmd) => format!(
            "{line} schema=needs-upgrade (reference tables: claims or maintenance read the \
             finished history; run: {cmd})"
        ),
        None => format!("{line} schema=ok"),
    }
}
