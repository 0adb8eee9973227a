//! `onestep new handler NAME --lang rust|python|js [--template compute|http|agent] [--dir D]
//! [--force]`: writes a handler project that builds outside this repository
//! (docs/cli.md#onestep-new-handler): its own copy of the WIT this binary serves
//! (`onestep:handler@0.3.0`, embedded at build time), the build files of its language with the
//! build tool pinned, the handler source (a greeting, an HTTP fetch, or an OpenAI-compatible
//! chat-completions call with a host-injected key, each doing its work as a durable step), the
//! language's step helper (docs/steps.md), a `handler.yaml` app file with an `api:` section, a
//! sample payload and a README with the build, run-locally, dev and deploy commands.
//!
//! A new directory is written beside its destination and renamed into place, so a failure
//! leaves nothing half-written; an existing directory is refused unless `--force`, which
//! replaces the files of the same names (one atomic rename each) and leaves the others.

use std::path::{Path, PathBuf};

/// Exit code of bad arguments or a destination that cannot be written.
const USAGE: u8 = 2;

/// The version of wit-bindgen a Rust handler builds with (as the repository's Rust guests).
pub(crate) const WIT_BINDGEN_VERSION: &str = "0.61";
/// The componentize-py a Python handler builds with (as `scripts/build-guests.sh`).
pub(crate) const COMPONENTIZE_PY_VERSION: &str = "0.25.1";
/// The componentize-js a JavaScript handler builds with (as `guest-examples/package.json`).
pub(crate) const COMPONENTIZE_JS_VERSION: &str = "0.23.0";
/// The version of `onestep:handler` a new handler is built against (`wit/v0.3`, with durable
/// steps).
pub(crate) const WIT_VERSION: &str = "0.3.0";

mod templates;

pub(crate) use templates::project_files;

/// `onestep new …`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum NewCommand {
    /// Write a new handler project (WIT, build files, handler.yaml, sample payload, README).
    Handler(NewHandlerArgs),
}

/// The language of a new handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Lang {
    /// Rust (wit-bindgen, cargo, target wasm32-wasip2).
    Rust,
    /// Python (componentize-py).
    Python,
    /// JavaScript (componentize-js, npm).
    Js,
}

/// What a new handler does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum Template {
    /// Pure computation: a greeting (world `compute`, no network).
    #[default]
    Compute,
    /// Fetches a URL over HTTP (world `handler`, `sandbox.network.allow`).
    Http,
    /// Asks an OpenAI-compatible chat-completions endpoint, with a host-injected API key.
    Agent,
}

impl Template {
    /// The world of `onestep:handler@0.3.0` the handler is built against.
    fn world(self) -> &'static str {
        match self {
            Template::Compute => "compute",
            Template::Http | Template::Agent => "handler",
        }
    }
}

/// Arguments of `onestep new handler`.
#[derive(Debug, clap::Args)]
pub(crate) struct NewHandlerArgs {
    /// The handler's (and its task's) name: lower-case letters, digits and `-`, starting with
    /// a letter, at most 64 characters.
    pub(crate) name: String,
    /// The language of the handler.
    #[arg(long, value_enum)]
    pub(crate) lang: Lang,
    /// What the handler does: `compute` (no network), `http` (fetches a URL) or `agent` (calls
    /// an OpenAI-compatible chat-completions API with a key the host injects).
    #[arg(long, value_enum, default_value_t = Template::Compute)]
    pub(crate) template: Template,
    /// Where to write the project (default: ./NAME). Must not exist, unless --force.
    #[arg(long, value_name = "DIR")]
    pub(crate) dir: Option<PathBuf>,
    /// Write into an existing directory, replacing the project's files there.
    #[arg(long)]
    pub(crate) force: bool,
}

/// A handler name `onestep new handler` refuses ([`check_name`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct InvalidName(String);

impl std::fmt::Display for InvalidName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "invalid handler name '{}': use lower-case letters, digits and '-', starting with a \
             letter and not ending with '-', at most 64 characters (e.g. 'resize-image')",
            self.0
        )
    }
}

impl std::error::Error for InvalidName {}

/// Checks a handler name (it becomes a crate, package, task and file name).
pub(crate) fn check_name(name: &str) -> Result<(), InvalidName> {
    let mut chars = name.chars();
    let starts_with_letter = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !starts_with_letter || !rest_ok || name.len() > 64 || name.ends_with('-') {
        return Err(InvalidName(name.to_owned()));
    }
    Ok(())
}

/// Writes `files` under `root`, creating directories.
fn write_all(root: &Path, files: &[(String, String)]) -> anyhow::Result<()> {
    for (rel, text) in files {
        let path = root.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", parent.display()))?;
        }
        std::fs::write(&path, text)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Writes `files` into the existing `dir`, one file at a time through a temporary file renamed
/// over the old one.
fn write_over(dir: &Path, files: &[(String, String)]) -> anyhow::Result<()> {
    for (rel, text) in files {
        let path = dir.join(rel);
        if path.is_dir() {
            return Err(anyhow::anyhow!(
                "{} is a directory: the project's file of that name cannot be written",
                path.display()
            ));
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", parent.display()))?;
        }
        let tmp = path.with_file_name(format!(
            ".{}.onestep-new",
            path.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        ));
        std::fs::write(&tmp, text)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, &path)
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Writes a new project at `dir` (which must not exist): into a sibling temporary directory,
/// renamed into place at the end.
fn write_new(dir: &Path, files: &[(String, String)]) -> anyhow::Result<()> {
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !parent.is_dir() {
        return Err(anyhow::anyhow!(
            "the parent directory {} does not exist",
            parent.display()
        ));
    }
    let leaf = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| anyhow::anyhow!("{} names no directory", dir.display()))?;
    let tmp = parent.join(format!(".{leaf}.onestep-new-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let written = write_all(&tmp, files).and_then(|()| {
        std::fs::rename(&tmp, dir)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))
    });
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    written
}

/// The command line that builds the project (the README's first command).
fn build_hint(lang: Lang, template: Template, name: &str) -> String {
    match lang {
        Lang::Rust => "cargo build --release".into(),
        Lang::Python => format!(
            "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt && \
             .venv/bin/componentize-py -d wit -w {} componentize app -o {name}.wasm",
            template.world()
        ),
        Lang::Js => "npm install && npm run build".into(),
    }
}

/// `onestep new handler`.
pub(crate) fn new_handler(args: NewHandlerArgs) -> u8 {
    if let Err(e) = check_name(&args.name) {
        eprintln!("onestep: {e}");
        return USAGE;
    }
    let dir = args
        .dir
        .clone()
        .unwrap_or_else(|| PathBuf::from(&args.name));
    let files = project_files(&args.name, args.lang, args.template);
    let written = if dir.exists() {
        if !args.force {
            eprintln!(
                "onestep: {} already exists: choose another --dir, or pass --force to write the \
                 project's files into it (files of the same names are replaced, others kept)",
                dir.display()
            );
            return USAGE;
        }
        if !dir.is_dir() {
            eprintln!("onestep: {} exists and is not a directory", dir.display());
            return USAGE;
        }
        write_over(&dir, &files)
    } else {
        write_new(&dir, &files)
    };
    if let Err(e) = written {
        eprintln!("onestep: {e}");
        return USAGE;
    }
    println!(
        "created {} ({} handler '{}', template {}, world onestep:handler/{}@{WIT_VERSION}, {} files)",
        dir.display(),
        match args.lang {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::Js => "JavaScript",
        },
        args.name,
        match args.template {
            Template::Compute => "compute",
            Template::Http => "http",
            Template::Agent => "agent",
        },
        args.template.world(),
        files.len()
    );
    println!("next, in {}:", dir.display());
    println!("  {}", build_hint(args.lang, args.template, &args.name));
    println!(
        "  onestep task run handler.yaml {} --payload @payload.json",
        args.name
    );
    println!("  onestep dev handler.yaml");
    println!("  (README.md has the submit and deploy commands)");
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    const LANGS: [Lang; 3] = [Lang::Rust, Lang::Python, Lang::Js];
    const TEMPLATES: [Template; 3] = [Template::Compute, Template::Http, Template::Agent];

    fn file(lang: Lang, template: Template, path: &str) -> String {
        project_files("my-handler", lang, template)
            .into_iter()
            .find(|(p, _)| p == path)
            .map(|(_, t)| t)
            .unwrap_or_default()
    }

    #[test]
    fn names_are_checked() {
        for ok in ["a", "resize-image", "h2", "x-1-y"] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
        for bad in ["", "1a", "A", "a_b", "a-", "a b", "-a", &"a".repeat(65)] {
            let e = check_name(bad).expect_err(bad).to_string();
            assert!(e.contains("invalid handler name"), "{e}");
        }
    }

    #[test]
    fn every_placeholder_is_filled() {
        for lang in LANGS {
            for template in TEMPLATES {
                for (path, text) in project_files("my-handler", lang, template) {
                    assert!(!text.contains("{{"), "{lang:?} {template:?} {path}: {text}");
                }
            }
        }
    }

    #[test]
    fn the_wit_is_a_version_served() {
        let files = project_files("h", Lang::Rust, Template::Compute);
        let wit = files
            .iter()
            .find(|(p, _)| p == "wit/handler.wit")
            .map(|(_, t)| t.as_str())
            .unwrap_or_default();
        // Whatever the scaffolds target must be served; `0.3.0` has the durable steps the
        // templates use.
        let scaffold = format!("onestep:handler@{WIT_VERSION}");
        assert!(onestep_wasm::WIT_PACKAGES.contains(&scaffold.as_str()));
        assert!(wit.contains(&format!("package {scaffold};")), "{wit}");
        assert!(wit.contains("world compute"), "{wit}");
        assert!(wit.contains("interface durable"), "{wit}");
    }

    /// The pinned tools are the ones the repository's own guests build with.
    #[test]
    fn pinned_versions_match_the_repository_guests() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let read = |p: &str| std::fs::read_to_string(root.join(p)).expect(p);
        assert!(read("scripts/build-guests.sh").contains(&format!(
            "COMPONENTIZE_PY_VERSION=\"{COMPONENTIZE_PY_VERSION}\""
        )));
        assert!(read("guest-examples/package.json").contains(&format!(
            "\"@bytecodealliance/componentize-js\": \"{COMPONENTIZE_JS_VERSION}\""
        )));
        assert!(
            read("guest-examples/Cargo.toml")
                .contains(&format!("wit-bindgen = \"{WIT_BINDGEN_VERSION}\""))
        );
    }

    #[test]
    fn handler_yaml_names_the_built_component() {
        for template in TEMPLATES {
            let yaml = |lang| file(lang, template, "handler.yaml");
            assert!(
                yaml(Lang::Rust)
                    .contains("component: target/wasm32-wasip2/release/my_handler.wasm")
            );
            assert!(yaml(Lang::Python).contains("component: my-handler.wasm"));
            assert!(yaml(Lang::Js).contains("task_names: [my-handler]"));
        }
    }

    /// Every template's file has the `api:` section `serve` and `dev` need; the network
    /// templates grant their origin, and only the agent injects a key.
    #[test]
    fn every_handler_yaml_has_an_api_section_and_its_network() {
        for lang in LANGS {
            for template in TEMPLATES {
                let yaml = file(lang, template, "handler.yaml");
                assert!(yaml.contains("\napi:\n  listen: 127.0.0.1:8080\n  connector: db\n  namespace: default\n  allowed_tasks: [my-handler]\n"), "{yaml}");
                assert_eq!(
                    yaml.contains("allow: [\"${"),
                    template != Template::Compute,
                    "{lang:?} {template:?}: {yaml}"
                );
                assert_eq!(
                    yaml.contains("{Authorization: \"Bearer ${OPENAI_API_KEY}\"}"),
                    template == Template::Agent,
                    "{lang:?} {template:?}: {yaml}"
                );
            }
        }
    }

    /// Every template's file loads, and its store is the embedded SQLite file `onestep dev`
    /// uses (`.onestep/dev.db` beside the file) unless `ONESTEP_DB_TYPE`/`ONESTEP_DSN` name a
    /// server.
    #[test]
    fn handler_yaml_defaults_to_the_embedded_store() {
        use onestep_config::{DatabaseKind, EnvLookup, LoadOptions};
        let path = Path::new("/scaffold/my-handler/handler.yaml");
        let load = |yaml: &str, vars: &[(&str, &str)]| {
            let opts = LoadOptions {
                env: EnvLookup::isolated(vars.iter().copied()),
                check_files: false,
                ..LoadOptions::default()
            };
            onestep_config::load_str(yaml, path, &opts).expect("the scaffold's file loads")
        };
        for lang in LANGS {
            for template in TEMPLATES {
                // `run`/`dev` create the database there; it is never committed.
                assert!(file(lang, template, ".gitignore").contains("/.onestep\n"));
                let yaml = file(lang, template, "handler.yaml");
                let key = [("OPENAI_API_KEY", "sk-test")];
                let cfg = load(&yaml, &key);
                let db = &cfg.connectors["db"];
                assert_eq!(db.kind, DatabaseKind::Sqlite, "{lang:?} {template:?}");
                assert_eq!(cfg.sources["jobs"].kind, DatabaseKind::Sqlite);
                assert!(
                    db.dsn.expose().starts_with("sqlite://")
                        && db.dsn.expose().ends_with(".onestep/dev.db"),
                    "{}",
                    db.dsn.expose()
                );
                let server = [
                    ("OPENAI_API_KEY", "sk-test"),
                    ("ONESTEP_DB_TYPE", "postgres"),
                    ("ONESTEP_DSN", "postgres://u@db:5432/app"),
                ];
                let cfg = load(&yaml, &server);
                assert_eq!(cfg.connectors["db"].kind, DatabaseKind::Postgres);
                assert_eq!(cfg.sources["jobs"].kind, DatabaseKind::Postgres);
                assert_eq!(
                    cfg.connectors["db"].dsn.expose(),
                    "postgres://u@db:5432/app"
                );
            }
        }
    }

    /// The network templates build against world `handler` (it imports `wasi:http`), the
    /// compute one against `compute`, in every language's build command.
    #[test]
    fn the_world_follows_the_template() {
        for template in TEMPLATES {
            let world = format!(
                "world: \"onestep:handler/{}@{WIT_VERSION}\"",
                template.world()
            );
            assert!(file(Lang::Rust, template, "src/lib.rs").contains(&world));
            let cmd = format!("-w {} componentize", template.world());
            assert!(file(Lang::Python, template, "README.md").contains(&cmd));
            let npm = format!("-n {} -d http", template.world());
            assert!(file(Lang::Js, template, "package.json").contains(&npm));
            let helper = template != Template::Compute;
            assert_eq!(
                !file(Lang::Python, template, "wasi_http.py").is_empty(),
                helper
            );
            assert_eq!(!file(Lang::Js, template, "wasi_http.js").is_empty(), helper);
            assert_eq!(
                file(Lang::Rust, template, "Cargo.toml").contains("wstd = "),
                helper
            );
        }
    }

    /// Every language ships its step helper, over the `durable` import of the WIT it is built
    /// against, and every template does its work as a step: the agent's model call is
    /// `model-0`, the http fetch `fetch`, the greeting `greeting`.
    #[test]
    fn every_template_uses_the_step_helper() {
        let durable = format!("onestep:handler/durable@{WIT_VERSION}");
        for template in TEMPLATES {
            let rust = file(Lang::Rust, template, "src/steps.rs");
            assert!(
                rust.contains("use crate::onestep::handler::durable::"),
                "{rust}"
            );
            assert!(rust.contains("pub fn step<T, F>(key: &str, work: F)"));
            assert!(file(Lang::Rust, template, "Cargo.toml").contains("serde = "));
            let py = file(Lang::Python, template, "steps.py");
            assert!(py.contains("from wit_world.imports import durable"), "{py}");
            assert!(py.contains("def step(key: str, fn=None):"), "{py}");
            let js = file(Lang::Js, template, "steps.js");
            assert!(js.contains(&format!("from \"{durable}\"")), "{js}");
            assert!(js.contains("export function step(key, fn)"), "{js}");
            // Fenced and unavailable are retryable; the caps' errors name the cap.
            for helper in [&rust, &py, &js] {
                for cap in [
                    "1 MiB per step",
                    "1,000 per execution",
                    "16 MiB per execution",
                ] {
                    assert!(helper.contains(cap), "{template:?}: {cap}");
                }
            }
            let key = match template {
                Template::Compute => "\"greeting\"",
                Template::Http => "\"fetch\"",
                Template::Agent => "model-",
            };
            let sources = [
                file(Lang::Rust, template, "src/lib.rs"),
                file(Lang::Python, template, "app.py"),
                file(Lang::Js, template, "handler.js"),
            ];
            for source in sources {
                assert!(
                    source.contains(&format!("step({key}"))
                        || source.contains(&format!("step(`{key}"))
                        || source.contains(&format!("step(&format!(\"{key}"))
                        || source.contains(&format!("@step(\"{key}")),
                    "{template:?}: {source}"
                );
                assert!(!source.contains("@0.2.0"), "{template:?}: {source}");
            }
            assert!(file(Lang::Rust, template, "src/lib.rs").contains("mod steps;"));
            assert!(file(Lang::Python, template, "app.py").contains("from steps import step"));
            assert!(
                file(Lang::Js, template, "handler.js")
                    .contains("import { step } from \"./steps.js\"")
            );
            assert!(
                file(Lang::Js, template, "handler.js")
                    .contains(&format!("onestep:handler/host@{WIT_VERSION}"))
            );
            let readme = file(Lang::Python, template, "README.md");
            assert!(
                readme.contains("## Durable steps") && readme.contains("`steps.py`"),
                "{readme}"
            );
        }
    }

    #[test]
    fn an_existing_directory_is_refused_without_force() {
        let dir = std::env::temp_dir().join(format!("onestep-new-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(dir.join("keep.txt"), "mine").expect("file");
        let args = |force| NewHandlerArgs {
            name: "h".into(),
            lang: Lang::Js,
            template: Template::Compute,
            dir: Some(dir.clone()),
            force,
        };
        assert_eq!(new_handler(args(false)), USAGE);
        assert!(!dir.join("handler.js").exists());
        assert_eq!(new_handler(args(true)), 0);
        assert!(dir.join("handler.js").is_file());
        assert_eq!(
            std::fs::read_to_string(dir.join("keep.txt")).expect("kept"),
            "mine"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
