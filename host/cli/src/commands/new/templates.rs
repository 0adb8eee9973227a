//! The files of a new handler project per language and template: the sources under
//! `templates/`, filled in with [`render`].

use super::{
    COMPONENTIZE_JS_VERSION, COMPONENTIZE_PY_VERSION, Lang, Template, WIT_BINDGEN_VERSION,
};

/// The WIT written into every project: `wit/v0.3` of this repository (`onestep:handler@0.3.0`,
/// with the `durable` interface of docs/steps.md), a version this binary serves
/// (`onestep_wasm::WIT_PACKAGES`).
const WIT: &[(&str, &str)] = &[
    (
        "wit/handler.wit",
        include_str!("../../../../../wit/v0.3/handler.wit"),
    ),
    (
        "wit/deps/cli.wit",
        include_str!("../../../../../wit/v0.3/deps/cli.wit"),
    ),
    (
        "wit/deps/clocks.wit",
        include_str!("../../../../../wit/v0.3/deps/clocks.wit"),
    ),
    (
        "wit/deps/filesystem.wit",
        include_str!("../../../../../wit/v0.3/deps/filesystem.wit"),
    ),
    (
        "wit/deps/http.wit",
        include_str!("../../../../../wit/v0.3/deps/http.wit"),
    ),
    (
        "wit/deps/io.wit",
        include_str!("../../../../../wit/v0.3/deps/io.wit"),
    ),
    (
        "wit/deps/random.wit",
        include_str!("../../../../../wit/v0.3/deps/random.wit"),
    ),
    (
        "wit/deps/sockets.wit",
        include_str!("../../../../../wit/v0.3/deps/sockets.wit"),
    ),
];

const README: &str = include_str!("templates/README.md");
const HANDLER_YAML: &str = include_str!("templates/handler.yaml");

/// Replaces every `{{key}}` of `template`.
fn render(template: &str, vars: &[(&str, &str)]) -> String {
    vars.iter().fold(template.to_owned(), |text, (key, value)| {
        text.replace(&format!("{{{{{key}}}}}"), value)
    })
}

/// What differs between the templates (the language aside).
struct Kind {
    /// The world of `wit/handler.wit` the handler is built against.
    world: &'static str,
    payload: &'static str,
    /// `handler.params` in `handler.yaml` (a YAML flow mapping).
    params: &'static str,
    /// `sandbox.network` in `handler.yaml` (indented lines), or nothing.
    network: &'static str,
    timeout_s: &'static str,
    max_attempts: &'static str,
    /// Comment lines at the top of `handler.yaml` (the variables the file reads).
    yaml_env: &'static str,
    /// README: one sentence of what the handler does.
    about: &'static str,
    /// README: commands before `task run` (each line ending in a newline).
    setup: &'static str,
    /// README: what `task run` prints as the result.
    sample_result: &'static str,
    /// README: the end of the sentence of what the sandbox grants.
    network_grant: &'static str,
    /// README: a closing section.
    notes: &'static str,
    /// README: the key of the handler's step.
    step_key: &'static str,
    /// README: a `task run` that starts from a recorded step.
    step_resume: &'static str,
}

fn kind(template: Template) -> Kind {
    match template {
        Template::Compute => Kind {
            world: "compute",
            payload: include_str!("templates/compute/payload.json"),
            params: "{greeting: Hello}",
            network: "",
            timeout_s: "60",
            max_attempts: "3",
            yaml_env: "",
            about: "It greets: payload `{\"name\": \"world\"}`, greeting from `handler.params`.",
            setup: "",
            sample_result: "`{\"message\": \"Hello, world!\", \"attempt\": 1}`",
            network_grant: "no network. To call other services over HTTP, build against world \
                            `handler` of the same package instead of `compute` (it adds \
                            `wasi:http/outgoing-handler`) and list the origins under \
                            `sandbox.network.allow` (or start from `onestep new handler NAME \
                            --template http` or `--template agent`)",
            notes: "",
            step_key: "`greeting`, the message",
            step_resume: "`--steps <(echo '{\"greeting\": \"Hello again, world!\"}')` returns that \
                          message",
        },
        Template::Http => Kind {
            world: "handler",
            payload: include_str!("templates/http/payload.json"),
            params: "{url: \"${FETCH_ORIGIN:-https://example.com}/\"}",
            network: include_str!("templates/http/network.yaml"),
            timeout_s: "30",
            max_attempts: "3",
            yaml_env: "#   FETCH_ORIGIN (default https://example.com): the origin fetched and allowed, e.g.\n\
                       #   FETCH_ORIGIN=http://127.0.0.1:8000 for a local `python3 -m http.server`\n#\n",
            about: "It fetches one URL over HTTP (the payload's `url`, else `handler.params.url`) and \
                    returns the status and the start of the body.",
            setup: "python3 -m http.server 8000 --bind 127.0.0.1 &   # something to fetch\n\
                    export FETCH_ORIGIN=http://127.0.0.1:8000        # the origin fetched and allowed\n",
            sample_result: "`{\"url\": \"http://127.0.0.1:8000/\", \"status\": 200, \"content_type\": \
                            \"text/html; charset=utf-8\", \"bytes\": 1234, \"text\": \"<!DOCTYPE HTML>…\"}`",
            network_grant: "and HTTP only to the origins under `sandbox.network.allow`",
            notes: include_str!("templates/http/notes.md"),
            step_key: "`fetch`, the request",
            step_resume: "`--steps <(echo '{\"fetch\": {\"status\": 200, \"text\": \"recorded\"}}')` \
                          returns that without a request",
        },
        Template::Agent => Kind {
            world: "handler",
            payload: include_str!("templates/agent/payload.json"),
            params: "{base_url: \"${LLM_ORIGIN:-https://api.openai.com}/v1\", model: \
                     \"${LLM_MODEL:-gpt-4o-mini}\", system: \"You are a concise assistant.\", \
                     max_tokens: 256}",
            network: include_str!("templates/agent/network.yaml"),
            timeout_s: "120",
            max_attempts: "4",
            yaml_env: "#   OPENAI_API_KEY: the API key, which the host adds to each request (the guest never\n\
                       #   sees it); LLM_ORIGIN (default https://api.openai.com): the endpoint's origin, its\n\
                       #   API under /v1; LLM_MODEL (default gpt-4o-mini)\n#\n",
            about: "It asks an OpenAI-compatible chat-completions endpoint (OpenAI, a gateway, a \
                    local Ollama or vLLM) one question and returns the answer; the API key is \
                    added by the host, never seen by the handler.",
            setup: "export OPENAI_API_KEY=sk-…                       # read by the host, never by the handler\n\
                    # export LLM_ORIGIN=http://127.0.0.1:11434 LLM_MODEL=llama3.2   # e.g. a local Ollama\n",
            sample_result: "`{\"answer\": \"2, 3 and 5.\", \"model\": \"gpt-4o-mini-2024-07-18\", \
                            \"usage\": {\"prompt_tokens\": 24, \"completion_tokens\": 8, \
                            \"total_tokens\": 32}}`",
            network_grant: "and HTTP only to the origins under `sandbox.network.allow`",
            notes: include_str!("templates/agent/notes.md"),
            step_key: "`model-0`, the model call: a retried attempt does not pay for it again",
            step_resume: "`--steps <(echo '{\"model-0\": {\"answer\": \"recorded\", \"model\": \"m\", \
                          \"usage\": null}}')` returns that answer without calling the model",
        },
    }
}

/// The language's part: (language name, handler source path, component path, build commands,
/// README rows of its build files, its source files).
type LangFiles = (
    &'static str,
    &'static str,
    String,
    String,
    &'static str,
    Vec<(&'static str, &'static str)>,
);

fn lang_files(name: &str, lang: Lang, template: Template, world: &str) -> LangFiles {
    let crate_file = format!("{}.wasm", name.replace('-', "_"));
    let network = template != Template::Compute;
    match lang {
        Lang::Rust => (
            "Rust",
            "src/lib.rs",
            format!("target/wasm32-wasip2/release/{crate_file}"),
            format!(
                "cargo build --release                         # -> target/wasm32-wasip2/release/{crate_file}"
            ),
            "| `src/steps.rs` | durable steps: `step(key, \\|\\| work())` records the work's value, or loads what an earlier attempt recorded |\n\
             | `Cargo.toml`, `.cargo/config.toml` | the crate (a `cdylib`, size-optimised release profile) and its default target, `wasm32-wasip2` |\n",
            vec![
                ("Cargo.toml", include_str!("templates/rust/Cargo.toml")),
                (
                    ".cargo/config.toml",
                    include_str!("templates/rust/cargo-config.toml"),
                ),
                (
                    "src/lib.rs",
                    match template {
                        Template::Compute => include_str!("templates/rust/compute.rs"),
                        Template::Http => include_str!("templates/rust/http.rs"),
                        Template::Agent => include_str!("templates/rust/agent.rs"),
                    },
                ),
                ("src/steps.rs", include_str!("templates/rust/steps.rs")),
                (".gitignore", include_str!("templates/rust/gitignore")),
            ],
        ),
        Lang::Python => {
            let mut sources = vec![
                (
                    "app.py",
                    match template {
                        Template::Compute => include_str!("templates/python/compute.py"),
                        Template::Http => include_str!("templates/python/http.py"),
                        Template::Agent => include_str!("templates/python/agent.py"),
                    },
                ),
                ("steps.py", include_str!("templates/python/steps.py")),
                (
                    "requirements.txt",
                    include_str!("templates/python/requirements.txt"),
                ),
                (".gitignore", include_str!("templates/python/gitignore")),
            ];
            if network {
                // One source: the helper of the repository's own Python agent example.
                sources.push((
                    "wasi_http.py",
                    include_str!("../../../../../guest-examples/python-agent/wasi_http.py"),
                ));
            }
            (
                "Python",
                "app.py",
                format!("{name}.wasm"),
                format!(
                    "python3 -m venv .venv && .venv/bin/pip install -r requirements.txt\n\
                     .venv/bin/componentize-py -d wit -w {world} componentize app -o {name}.wasm"
                ),
                if network {
                    "| `steps.py` | durable steps: `step(key, fn)` and the decorator `@step(\"key-{arg}\")` record the work's value, or load what an earlier attempt recorded |\n\
                     | `wasi_http.py` | blocking outbound HTTP over `wasi:http` (`send(method, url, headers, body)`) |\n\
                     | `requirements.txt` | the build tool, componentize-py, pinned |\n"
                } else {
                    "| `steps.py` | durable steps: `step(key, fn)` and the decorator `@step(\"key-{arg}\")` record the work's value, or load what an earlier attempt recorded |\n\
                     | `requirements.txt` | the build tool, componentize-py, pinned |\n"
                },
                sources,
            )
        }
        Lang::Js => {
            let mut sources = vec![
                ("package.json", include_str!("templates/js/package.json")),
                (
                    "handler.js",
                    match template {
                        Template::Compute => include_str!("templates/js/compute.js"),
                        Template::Http => include_str!("templates/js/http.js"),
                        Template::Agent => include_str!("templates/js/agent.js"),
                    },
                ),
                ("steps.js", include_str!("templates/js/steps.js")),
                (".gitignore", include_str!("templates/js/gitignore")),
            ];
            if network {
                sources.push(("wasi_http.js", include_str!("templates/js/wasi_http.js")));
            }
            (
                "JavaScript",
                "handler.js",
                format!("{name}.wasm"),
                format!("npm install && npm run build                  # -> {name}.wasm"),
                if network {
                    "| `steps.js` | durable steps: `step(key, () => work())` records the work's value, or loads what an earlier attempt recorded |\n\
                     | `wasi_http.js` | blocking outbound HTTP over `wasi:http` (`send(method, url, headers, body)`) |\n\
                     | `package.json` | the build tool, componentize-js, pinned, and `npm run build` |\n"
                } else {
                    "| `steps.js` | durable steps: `step(key, () => work())` records the work's value, or loads what an earlier attempt recorded |\n\
                     | `package.json` | the build tool, componentize-js, pinned, and `npm run build` |\n"
                },
                sources,
            )
        }
    }
}

/// The files of a project: (relative path, contents).
pub(crate) fn project_files(name: &str, lang: Lang, template: Template) -> Vec<(String, String)> {
    let kind = kind(template);
    let (language, source, component, build, files, sources) =
        lang_files(name, lang, template, kind.world);
    let extra_deps = if template == Template::Compute {
        ""
    } else {
        "\n# The guest HTTP client (wasi:http through wasip2).\nwstd = \"0.6\""
    };
    let payload_inline = kind.payload.trim();
    let (steps_file, steps_example) = match lang {
        Lang::Rust => ("src/steps.rs", "`let v: T = step(\"key\", || work())?;`"),
        Lang::Python => (
            "steps.py",
            "`v = step(\"key\", lambda: work())` (or a function decorated with \
             `@step(\"page-{n}\")`, each call a step named by its arguments)",
        ),
        Lang::Js => ("steps.js", "`const v = step(\"key\", () => work());`"),
    };
    let vars = [
        ("name", name),
        ("language", language),
        ("source", source),
        ("component", component.as_str()),
        ("build", build.as_str()),
        ("files", files),
        ("world", kind.world),
        ("params", kind.params),
        ("network", kind.network),
        ("timeout_s", kind.timeout_s),
        ("max_attempts", kind.max_attempts),
        ("yaml_env", kind.yaml_env),
        ("about", kind.about),
        ("setup", kind.setup),
        ("sample_result", kind.sample_result),
        ("network_grant", kind.network_grant),
        ("notes", kind.notes),
        ("steps_file", steps_file),
        ("steps_example", steps_example),
        ("step_key", kind.step_key),
        ("step_resume", kind.step_resume),
        ("payload_inline", payload_inline),
        ("extra_deps", extra_deps),
        ("wit_bindgen", WIT_BINDGEN_VERSION),
        ("componentize_py", COMPONENTIZE_PY_VERSION),
        ("componentize_js", COMPONENTIZE_JS_VERSION),
    ];
    let mut out: Vec<(String, String)> = sources
        .into_iter()
        .chain([
            ("README.md", README),
            ("handler.yaml", HANDLER_YAML),
            ("payload.json", kind.payload),
        ])
        .map(|(path, text)| (path.to_owned(), render(text, &vars)))
        .collect();
    out.extend(
        WIT.iter()
            .map(|(path, text)| ((*path).to_owned(), (*text).to_owned())),
    );
    out
}
