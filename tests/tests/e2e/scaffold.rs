//! `onestep new handler NAME --lang rust|python|js` (docs/cli.md#onestep-new-handler): each
//! language's project, written into a temporary directory outside this repository, builds with
//! nothing but its own files and the language's pinned tool, passes `onestep check --strict` and
//! `onestep task run` on its sample payload, its greeting a durable step that `--steps` preloads
//! (world `onestep:handler@0.3.0`). Build tools: cargo with a target directory shared
//! by the runs (`target/scaffold`), the componentize-py of `scripts/build-guests.sh`'s venv, and
//! componentize-js installed by `npm install` into the project's own `node_modules`.
//!
//! The `agent` template in Rust (`--template agent`) builds the same way and asks
//! `scripts/lib/fake-openai.py` on loopback, which answers only with the key the host injects and
//! a body with `Content-Length`; `check --strict` refuses it while the key's variable is empty;
//! with its model call (the step `model-0`) preloaded by `--steps`, it answers the same and the
//! fake counts no request.
//! Every language × template is built and run by `scripts/check-scaffolds.sh` (scripts/test.sh).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use onestep_e2e::{guest, repo_root, run_cli};
use serde_json::{Value, json};

/// Runs `program args…` in `dir`; fails with its output when it does not succeed.
fn run_in(dir: &Path, program: &str, args: &[&str], envs: &[(&str, &Path)]) -> Result<()> {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .envs(envs.iter().map(|(k, v)| (*k, v.as_os_str())))
        // The test's own cargo settings belong to the host build.
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .output()
        .with_context(|| format!("cannot run {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {args:?} in {}: {}\n{}\n{}",
            dir.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// `onestep new handler NAME --lang LANG --dir <tmp>/NAME`: the project directory.
fn scaffold(tmp: &Path, name: &str, lang: &str) -> Result<PathBuf> {
    scaffold_template(tmp, name, lang, "compute")
}

/// `onestep new handler NAME --lang LANG --template TEMPLATE --dir <tmp>/NAME`.
fn scaffold_template(tmp: &Path, name: &str, lang: &str, template: &str) -> Result<PathBuf> {
    let dir = tmp.join(name);
    let dir_arg = dir.display().to_string();
    let (code, stdout, stderr) = run_cli(
        &[
            "new",
            "handler",
            name,
            "--lang",
            lang,
            "--template",
            template,
            "--dir",
            &dir_arg,
        ],
        &[],
    )?;
    ensure!(code == 0, "new handler exited {code}: {stdout} {stderr}");
    ensure!(
        stdout.starts_with(&format!("created {dir_arg} (")),
        "{stdout}"
    );
    for file in [
        "README.md",
        "handler.yaml",
        "payload.json",
        "wit/handler.wit",
        "wit/deps/http.wit",
    ] {
        ensure!(dir.join(file).is_file(), "{lang}: no {file}");
    }
    ensure!(
        !dir.starts_with(repo_root()),
        "the project must be outside the repository"
    );
    Ok(dir)
}

/// The project passes `check --strict` and `task run` on its sample payload (and a bad payload
/// is its fatal handler error).
fn runs(dir: &Path, name: &str) -> Result<()> {
    let yaml = dir.join("handler.yaml").display().to_string();
    let (code, stdout, stderr) = run_cli(&["check", "--strict", &yaml], &[])?;
    ensure!(code == 0, "check --strict: {code} {stdout} {stderr}");
    ensure!(
        stdout.contains("world=onestep:handler@0.3.0 network=none"),
        "{stdout}"
    );
    let payload = format!("@{}", dir.join("payload.json").display());
    let (code, stdout, stderr) = run_cli(
        &["task", "run", &yaml, name, "--payload", &payload, "--json"],
        &[],
    )?;
    ensure!(code == 0, "task run: {code} {stdout} {stderr}");
    let r: Value = serde_json::from_str(stdout.trim())?;
    ensure!(
        r["result"] == json!({"message": "Hello, world!", "attempt": 1})
            && r["steps"] == json!({"preloaded": 0, "loaded": 0, "missed": 1, "saved": 1}),
        "{r}"
    );
    // The greeting is the durable step `greeting`: recorded, it is loaded, not made again.
    let steps = dir.join("steps.json");
    std::fs::write(&steps, r#"{"greeting": "Recorded, world!"}"#)?;
    let steps_arg = steps.display().to_string();
    let (code, stdout, stderr) = run_cli(
        &[
            "task",
            "run",
            &yaml,
            name,
            "--payload",
            &payload,
            "--steps",
            &steps_arg,
            "--json",
        ],
        &[],
    )?;
    ensure!(code == 0, "task run --steps: {code} {stdout} {stderr}");
    let r: Value = serde_json::from_str(stdout.trim())?;
    ensure!(
        r["result"] == json!({"message": "Recorded, world!", "attempt": 1})
            && r["steps"] == json!({"preloaded": 1, "loaded": 1, "missed": 0, "saved": 0}),
        "{r}"
    );
    let (code, stdout, _) = run_cli(
        &["task", "run", &yaml, name, "--payload", "{}", "--json"],
        &[],
    )?;
    let r: Value = serde_json::from_str(stdout.trim())?;
    ensure!(
        code == 3
            && r["error"]["retryable"] == false
            && r["error"]["message"] == "the payload needs a string `name`",
        "{code} {r}"
    );
    Ok(())
}

#[test]
fn rust_scaffold_builds_outside_the_repository_and_runs() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = scaffold(tmp.path(), "greet-rs", "rust")?;
    build_rust(&dir, "greet_rs")?;
    runs(&dir, "greet-rs")
}

/// Builds a Rust project with the target directory every Rust scaffold test (and
/// `scripts/check-scaffolds.sh`) shares, so dependencies compile once, and copies the component
/// where its `handler.yaml` expects it.
fn build_rust(dir: &Path, crate_name: &str) -> Result<()> {
    let target = repo_root().join("target").join("scaffold");
    run_in(
        dir,
        "cargo",
        &["build", "--target", "wasm32-wasip2", "--release"],
        &[("CARGO_TARGET_DIR", &target)],
    )?;
    let file = format!("wasm32-wasip2/release/{crate_name}.wasm");
    let built = target.join(&file);
    let expected = dir.join("target").join(&file);
    std::fs::create_dir_all(expected.parent().context("no parent")?)?;
    std::fs::copy(&built, &expected)
        .with_context(|| format!("cargo built no {}", built.display()))?;
    Ok(())
}

/// `scripts/lib/fake-openai.py` on a free loopback port, killed when dropped.
struct FakeOpenAi {
    child: std::process::Child,
    origin: String,
}

impl FakeOpenAi {
    fn start(key: &str) -> Result<Self> {
        use std::io::BufRead as _;
        let mut child = Command::new("python3")
            .arg(repo_root().join("scripts/lib/fake-openai.py"))
            .args(["--key", key])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("cannot start python3 scripts/lib/fake-openai.py")?;
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            std::io::BufReader::new(out).read_line(&mut line)?;
        }
        let Some(port) = line.trim().strip_prefix("port ") else {
            let _ = child.kill();
            bail!("fake-openai printed {line:?}, not its port");
        };
        let origin = format!("http://127.0.0.1:{port}");
        Ok(Self { child, origin })
    }

    /// The chat-completions requests it has received (its `GET /requests`).
    fn requests(&self) -> Result<u64> {
        use std::io::{Read as _, Write as _};
        let addr = self.origin.trim_start_matches("http://");
        let mut conn = std::net::TcpStream::connect(addr)?;
        conn.write_all(b"GET /requests HTTP/1.0\r\nHost: fake\r\n\r\n")?;
        let mut answer = String::new();
        conn.read_to_string(&mut answer)?;
        let body = answer
            .split_once("\r\n\r\n")
            .map(|(_, b)| b)
            .with_context(|| format!("GET /requests answered {answer:?}"))?;
        let v: Value = serde_json::from_str(body)?;
        v["chat_completions"]
            .as_u64()
            .with_context(|| format!("GET /requests answered {body}"))
    }
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn rust_agent_scaffold_asks_with_the_injected_key_only() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = scaffold_template(tmp.path(), "ask-rs", "rust", "agent")?;
    let cargo = std::fs::read_to_string(dir.join("Cargo.toml"))?;
    ensure!(cargo.contains("wstd = "), "{cargo}");
    build_rust(&dir, "ask_rs")?;
    let fake = FakeOpenAi::start("sk-e2e-scaffold")?;
    let yaml = dir.join("handler.yaml").display().to_string();

    // The key's variable empty: strict loading names it; set, the component loads with network.
    let no_key = [("LLM_ORIGIN", fake.origin.as_str()), ("OPENAI_API_KEY", "")];
    let (code, stdout, stderr) = run_cli(&["check", "--strict", &yaml], &no_key)?;
    ensure!(
        code == 2
            && stderr.contains("the injected header's variable OPENAI_API_KEY is unset or empty"),
        "{code} {stdout} {stderr}"
    );
    let env = [
        ("LLM_ORIGIN", fake.origin.as_str()),
        ("OPENAI_API_KEY", "sk-e2e-scaffold"),
    ];
    let (code, stdout, stderr) = run_cli(&["check", "--strict", &yaml], &env)?;
    ensure!(code == 0, "check --strict: {code} {stdout} {stderr}");
    ensure!(
        stdout.contains("world=onestep:handler@0.3.0 network="),
        "{stdout}"
    );

    let task_run_with = |payload: &str, env: &[(&str, &str)], extra: &[&str]| {
        let mut args = vec![
            "task",
            "run",
            yaml.as_str(),
            "ask-rs",
            "--payload",
            payload,
            "--json",
        ];
        args.extend_from_slice(extra);
        let (code, stdout, stderr) = run_cli(&args, env)?;
        let report: Value = serde_json::from_str(stdout.trim())
            .with_context(|| format!("task run printed {stdout:?} {stderr}"))?;
        anyhow::Ok((code, report))
    };
    let task_run = |payload: &str, env: &[(&str, &str)]| task_run_with(payload, env, &[]);
    let payload = format!("@{}", dir.join("payload.json").display());
    let asked = fake.requests()?;
    let (code, r) = task_run(&payload, &env)?;
    let answer = json!({
        "answer": "echo: Name three prime numbers.",
        "model": "gpt-4o-mini",
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    });
    ensure!(
        code == 0
            && r["result"] == answer
            && r["steps"] == json!({"preloaded": 0, "loaded": 0, "missed": 1, "saved": 1}),
        "{code} {r}"
    );
    ensure!(fake.requests()? == asked + 1, "one model request");
    // The model call is the durable step `model-0`: an attempt that starts with it recorded
    // returns the same answer and sends no request.
    let steps = dir.join("steps.json");
    std::fs::write(&steps, json!({"model-0": r["result"]}).to_string())?;
    let steps_arg = steps.display().to_string();
    let (code, r) = task_run_with(&payload, &env, &["--steps", &steps_arg])?;
    ensure!(
        code == 0
            && r["result"] == answer
            && r["steps"] == json!({"preloaded": 1, "loaded": 1, "missed": 0, "saved": 0}),
        "{code} {r}"
    );
    ensure!(
        fake.requests()? == asked + 1,
        "the resumed attempt asked the model again"
    );
    // A wrong key is the server's 401: fatal, with the server's message.
    let wrong = [
        ("LLM_ORIGIN", fake.origin.as_str()),
        ("OPENAI_API_KEY", "sk-wrong"),
    ];
    let (code, r) = task_run(&payload, &wrong)?;
    ensure!(
        code == 3
            && r["error"]["retryable"] == false
            && r["error"]["message"]
                == "chat completions answered 401 Unauthorized: Incorrect API key provided",
        "{code} {r}"
    );
    // 5xx: retryable.
    let (code, r) = task_run(r#"{"prompt": "status:503"}"#, &env)?;
    ensure!(code == 3 && r["error"]["retryable"] == true, "{code} {r}");
    Ok(())
}

#[test]
fn python_scaffold_builds_outside_the_repository_and_runs() -> Result<()> {
    // The venv scripts/build-guests.sh installs componentize-py into (built with python-echo).
    guest("python-echo")?;
    let tool = repo_root().join("guest-examples/.venv/bin/componentize-py");
    let tmp = tempfile::tempdir()?;
    let dir = scaffold(tmp.path(), "greet-py", "python")?;
    let pinned = std::fs::read_to_string(dir.join("requirements.txt"))?;
    ensure!(pinned.contains("componentize-py==0.25.1"), "{pinned}");
    run_in(
        &dir,
        &tool.display().to_string(),
        &[
            "-d",
            "wit",
            "-w",
            "compute",
            "componentize",
            "app",
            "-o",
            "greet-py.wasm",
        ],
        &[],
    )?;
    runs(&dir, "greet-py")
}

#[test]
fn js_scaffold_builds_outside_the_repository_and_runs() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = scaffold(tmp.path(), "greet-js", "js")?;
    // componentize-js as pinned in the project's package.json, into its own node_modules.
    run_in(
        &dir,
        "npm",
        &["install", "--no-audit", "--no-fund", "--loglevel=error"],
        &[],
    )?;
    ensure!(
        dir.join("node_modules/.bin/componentize-js").exists(),
        "npm installed no componentize-js"
    );
    run_in(&dir, "npm", &["run", "build", "--silent"], &[])?;
    runs(&dir, "greet-js")
}

#[test]
fn new_handler_refuses_bad_input() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("taken");
    std::fs::create_dir(&dir)?;
    std::fs::write(dir.join("mine.txt"), "keep")?;
    let dir_arg = dir.display().to_string();
    let (code, _, stderr) = run_cli(
        &["new", "handler", "h", "--lang", "rust", "--dir", &dir_arg],
        &[],
    )?;
    ensure!(code == 2, "exit {code}");
    ensure!(
        stderr
            == format!(
                "onestep: {dir_arg} already exists: choose another --dir, or pass --force to \
                 write the project's files into it (files of the same names are replaced, \
                 others kept)\n"
            ),
        "{stderr}"
    );
    ensure!(
        !dir.join("Cargo.toml").exists(),
        "wrote into an existing directory"
    );
    let (code, _, stderr) = run_cli(
        &[
            "new", "handler", "h", "--lang", "rust", "--dir", &dir_arg, "--force",
        ],
        &[],
    )?;
    ensure!(code == 0, "--force: exit {code} {stderr}");
    ensure!(dir.join("Cargo.toml").is_file() && dir.join("mine.txt").is_file());

    let other = tmp.path().join("x").display().to_string();
    let (code, _, stderr) = run_cli(
        &[
            "new", "handler", "Bad_Name", "--lang", "js", "--dir", &other,
        ],
        &[],
    )?;
    ensure!(
        code == 2 && stderr.starts_with("onestep: invalid handler name 'Bad_Name': "),
        "{code} {stderr}"
    );
    let (code, _, stderr) = run_cli(
        &["new", "handler", "ok", "--lang", "cobol", "--dir", &other],
        &[],
    )?;
    ensure!(code == 2 && stderr.contains("cobol"), "{code} {stderr}");
    let missing_parent = tmp.path().join("no/such/dir").display().to_string();
    let (code, _, stderr) = run_cli(
        &[
            "new",
            "handler",
            "ok",
            "--lang",
            "js",
            "--dir",
            &missing_parent,
        ],
        &[],
    )?;
    ensure!(
        code == 2 && stderr.contains("does not exist"),
        "{code} {stderr}"
    );
    ensure!(!tmp.path().join("x").exists());
    Ok(())
}
