//! `onestep new handler NAME --lang rust|python|js [--dir D] [--force]`: writes a handler
//! project that builds outside this repository (docs/cli.md#onestep-new-handler): its own copy
//! of the WIT this binary serves (`onestep:handler@0.2.0`, embedded at build time), the build
//! files of its language with the build tool pinned, the handler source, a `handler.yaml` task,
//! a sample payload and a README with the build, run-locally and deploy commands.
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

/// The WIT written into every project: `wit/v0.2` of this repository, the newest version this
/// binary serves (`onestep_wasm::WIT_PACKAGES`).
const WIT: &[(&str, &str)] = &[
    (
        "wit/handler.wit",
        include_str!("../../../../../wit/v0.2/handler.wit"),
    ),
    (
        "wit/deps/cli.wit",
        include_str!("../../../../../wit/v0.2/deps/cli.wit"),
    ),
    (
        "wit/deps/clocks.wit",
        include_str!("../../../../../wit/v0.2/deps/clocks.wit"),
    ),
    (
        "wit/deps/filesystem.wit",
        include_str!("../../../../../wit/v0.2/deps/filesystem.wit"),
    ),
    (
        "wit/deps/http.wit",
        include_str!("../../../../../wit/v0.2/deps/http.wit"),
    ),
    (
        "wit/deps/io.wit",
        include_str!("../../../../../wit/v0.2/deps/io.wit"),
    ),
    (
        "wit/deps/random.wit",
        include_str!("../../../../../wit/v0.2/deps/random.wit"),
    ),
    (
        "wit/deps/sockets.wit",
        include_str!("../../../../../wit/v0.2/deps/sockets.wit"),
    ),
];

const README: &str = include_str!("templates/README.md");
const HANDLER_YAML: &str = include_str!("templates/handler.yaml");
const PAYLOAD: &str = include_str!("templates/payload.json");

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

/// Arguments of `onestep new handler`.
#[derive(Debug, clap::Args)]
pub(crate) struct NewHandlerArgs {
    /// The handler's (and its task's) name: lower-case letters, digits and `-`, starting with
    /// a letter, at most 64 characters.
    pub(crate) name: String,
    /// The language of the handler.
    #[arg(long, value_enum)]
    pub(crate) lang: Lang,
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

/// Replaces every `{{key}}` of `template`.
fn render(template: &str, vars: &[(&str, &str)]) -> String {
    vars.iter().fold(template.to_owned(), |text, (key, value)| {
        text.replace(&format!("{{{{{key}}}}}"), value)
    })
}

/// The files of a project: (relative path, contents).
pub(crate) fn project_files(name: &str, lang: Lang) -> Vec<(String, String)> {
    let crate_file = format!("{}.wasm", name.replace('-', "_"));
    let (language, source, component, build, files, sources): (
        &str,
        &str,
        String,
        String,
        &str,
        Vec<(&str, &str)>,
    ) = match lang {
        Lang::Rust => (
            "Rust",
            "src/lib.rs",
            format!("target/wasm32-wasip2/release/{crate_file}"),
            "cargo build --release                         # -> target/wasm32-wasip2/release/"
                .to_owned()
                + &crate_file,
            "| `Cargo.toml`, `.cargo/config.toml` | the crate (a `cdylib`, size-optimised release profile) and its default target, `wasm32-wasip2` |\n",
            vec![
                ("Cargo.toml", include_str!("templates/rust/Cargo.toml")),
                (
                    ".cargo/config.toml",
                    include_str!("templates/rust/cargo-config.toml"),
                ),
                ("src/lib.rs", include_str!("templates/rust/lib.rs")),
                (".gitignore", include_str!("templates/rust/gitignore")),
            ],
        ),
        Lang::Python => (
            "Python",
            "app.py",
            format!("{name}.wasm"),
            format!(
                "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt\n\
                 .venv/bin/componentize-py -d wit -w compute componentize app -o {name}.wasm"
            ),
            "| `requirements.txt` | the build tool, componentize-py, pinned |\n",
            vec![
                ("app.py", include_str!("templates/python/app.py")),
                (
                    "requirements.txt",
                    include_str!("templates/python/requirements.txt"),
                ),
                (".gitignore", include_str!("templates/python/gitignore")),
            ],
        ),
        Lang::Js => (
            "JavaScript",
            "handler.js",
            format!("{name}.wasm"),
            format!("npm install && npm run build                  # -> {name}.wasm"),
            "| `package.json` | the build tool, componentize-js, pinned, and `npm run build` |\n",
            vec![
                ("package.json", include_str!("templates/js/package.json")),
                ("handler.js", include_str!("templates/js/handler.js")),
                (".gitignore", include_str!("templates/js/gitignore")),
            ],
        ),
    };
    let vars = [
        ("name", name),
        ("language", language),
        ("source", source),
        ("component", component.as_str()),
        ("build", build.as_str()),
        ("files", files),
        ("wit_bindgen", WIT_BINDGEN_VERSION),
        ("componentize_py", COMPONENTIZE_PY_VERSION),
        ("componentize_js", COMPONENTIZE_JS_VERSION),
    ];
    let mut out: Vec<(String, String)> = sources
        .into_iter()
        .chain([
            ("README.md", README),
            ("handler.yaml", HANDLER_YAML),
            ("payload.json", PAYLOAD),
        ])
        .map(|(path, text)| (path.to_owned(), render(text, &vars)))
        .collect();
    out.extend(
        WIT.iter()
            .map(|(path, text)| ((*path).to_owned(), (*text).to_owned())),
    );
    out
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
fn build_hint(lang: Lang) -> &'static str {
    match lang {
        Lang::Rust => "cargo build --release",
        Lang::Python => {
            "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt && \
             .venv/bin/componentize-py -d wit -w compute componentize app -o NAME.wasm"
        }
        Lang::Js => "npm install && npm run build",
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
    let files = project_files(&args.name, args.lang);
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
        "created {} ({} handler '{}', world onestep:handler/compute@0.2.0, {} files)",
        dir.display(),
        match args.lang {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
            Lang::Js => "JavaScript",
        },
        args.name,
        files.len()
    );
    println!("next, in {}:", dir.display());
    println!("  {}", build_hint(args.lang).replace("NAME", &args.name));
    println!(
        "  onestep task run handler.yaml {} --payload @payload.json",
        args.name
    );
    println!("  (README.md has the deploy commands)");
    0
}

#[cfg(test)]
mod tests {
    use super::*;

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
        for lang in [Lang::Rust, Lang::Python, Lang::Js] {
            for (path, text) in project_files("my-handler", lang) {
                assert!(!text.contains("{{"), "{lang:?} {path}: {text}");
            }
        }
    }

    #[test]
    fn the_wit_is_the_newest_version_served() {
        let files = project_files("h", Lang::Rust);
        let wit = files
            .iter()
            .find(|(p, _)| p == "wit/handler.wit")
            .map(|(_, t)| t.as_str())
            .unwrap_or_default();
        let newest = onestep_wasm::WIT_PACKAGES[onestep_wasm::WIT_PACKAGES.len() - 1];
        assert!(wit.contains(&format!("package {newest};")), "{wit}");
        assert!(wit.contains("world compute"), "{wit}");
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
        let yaml = |lang| {
            project_files("my-handler", lang)
                .into_iter()
                .find(|(p, _)| p == "handler.yaml")
                .map(|(_, t)| t)
                .unwrap_or_default()
        };
        assert!(
            yaml(Lang::Rust).contains("component: target/wasm32-wasip2/release/my_handler.wasm")
        );
        assert!(yaml(Lang::Python).contains("component: my-handler.wasm"));
        assert!(yaml(Lang::Js).contains("task_names: [my-handler]"));
    }

    #[test]
    fn an_existing_directory_is_refused_without_force() {
        let dir = std::env::temp_dir().join(format!("onestep-new-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        std::fs::write(dir.join("keep.txt"), "mine").expect("file");
        let args = |force| NewHandlerArgs {
            name: "h".into(),
            lang: Lang::Js,
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
