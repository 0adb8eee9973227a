//! `onestep deploy MANIFEST` and `onestep deployments list|show|events|rollback|deactivate`
//! (docs/cli.md#onestep-deploy): a tenant's deployments through the HTTP API of a running
//! `onestep serve` (docs/http-api.md#deployments), and `onestep components gc`, the operator's
//! garbage collection of unreferenced components, run directly on the database.
//!
//! `deploy` reads the manifest with the same parser the API's settings come from
//! ([`onestep_config::load_manifest`]), uploads the component (`POST /v1/components`), then
//! posts the deployment (`POST /v1/deployments`); the API runs the policy and load checks and
//! the CLI prints its answer (every violated limit on its own line).
//!
//! Exit codes: 0 done; 1 the API refused the request (its code and message on stderr) or could
//! not be reached; 2 usage errors (manifest, URL, component file).

use std::path::PathBuf;
use std::time::Duration;

use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use super::client::ConnArgs;

const OK: u8 = 0;
const FAILED: u8 = 1;
const USAGE: u8 = 2;

/// The most bytes of an answer read.
const MAX_ANSWER: usize = 16 * 1024 * 1024;
/// How long one request may take (an upload of a large component, a deploy's load check).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// Where the API is and who calls it.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ApiArgs {
    /// Base URL of the API (`onestep serve`), `http://HOST:PORT` with an optional path prefix.
    #[arg(
        long = "api",
        alias = "url",
        env = "ONESTEP_API_URL",
        default_value = "http://127.0.0.1:8080",
        value_name = "URL"
    )]
    pub(crate) api: String,
    /// Bearer token (a `deploy` token to change deployments).
    #[arg(long, env = "ONESTEP_API_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// Print the API's JSON answer instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Arguments of `onestep deploy`.
#[derive(Debug, clap::Args)]
pub(crate) struct DeployArgs {
    /// The deployment manifest (docs/deployment-policy.md#the-manifest).
    pub(crate) manifest: PathBuf,
    /// The component to deploy, instead of the manifest's `handler.component`.
    #[arg(long, value_name = "PATH")]
    pub(crate) component: Option<PathBuf>,
    /// Why (kept with the version and its audit event).
    #[arg(long)]
    pub(crate) note: Option<String>,
    #[command(flatten)]
    pub(crate) api: ApiArgs,
}

/// `onestep deployments …`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum DeploymentsCommand {
    /// The namespace's deployment history, newest first (`history` is the same).
    #[command(alias = "history")]
    List(ListArgs),
    /// One task's active version and recent versions.
    Show(TaskArgs),
    /// The audit events: who deployed, activated or deactivated what, when.
    Events(ListArgs),
    /// Make an earlier version of a task active again.
    Rollback(RollbackArgs),
    /// Stop a task's active version (it serves no new claims).
    Deactivate(DeactivateArgs),
}

/// Arguments of `deployments list` and `events`.
#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    /// Only this task.
    #[arg(long)]
    pub(crate) task: Option<String>,
    /// Page size, 1–200.
    #[arg(long, default_value_t = 50)]
    pub(crate) limit: u32,
    /// Continue before this revision (printed as `more: --before …`).
    #[arg(long)]
    pub(crate) before: Option<i64>,
    #[command(flatten)]
    pub(crate) api: ApiArgs,
}

/// Arguments of `deployments show`.
#[derive(Debug, clap::Args)]
pub(crate) struct TaskArgs {
    /// Task name.
    pub(crate) task: String,
    #[command(flatten)]
    pub(crate) api: ApiArgs,
}

/// Arguments of `deployments rollback`.
#[derive(Debug, clap::Args)]
pub(crate) struct RollbackArgs {
    /// Task name.
    pub(crate) task: String,
    /// The version to make active.
    pub(crate) version: i64,
    /// Why.
    #[arg(long)]
    pub(crate) note: Option<String>,
    #[command(flatten)]
    pub(crate) api: ApiArgs,
}

/// Arguments of `deployments deactivate`.
#[derive(Debug, clap::Args)]
pub(crate) struct DeactivateArgs {
    /// Task name.
    pub(crate) task: String,
    /// Why.
    #[arg(long)]
    pub(crate) note: Option<String>,
    #[command(flatten)]
    pub(crate) api: ApiArgs,
}

/// `onestep components …`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum ComponentsCommand {
    /// Delete stored components no deployment references (operator; on the database).
    Gc(GcArgs),
}

/// Arguments of `components gc`.
#[derive(Debug, clap::Args)]
pub(crate) struct GcArgs {
    /// Keep unreferenced components stored less than this many seconds ago (a deploy may be
    /// about to name them).
    #[arg(long, default_value_t = 3600)]
    pub(crate) grace_s: u64,
    #[command(flatten)]
    pub(crate) conn: ConnArgs,
}

/// One API endpoint and its caller.
struct Api {
    base: String,
    token: Option<String>,
    client: Client<HttpConnector, Full<Bytes>>,
}

/// An API refusal or a transport failure.
struct Refused {
    status: Option<StatusCode>,
    body: Value,
    message: String,
}

impl Refused {
    fn print(&self) {
        match self.status {
            Some(s) => {
                let code = self.body["code"].as_str().unwrap_or("error");
                eprintln!(
                    "onestep: the API refused the request: HTTP {} {code}: {}",
                    s.as_u16(),
                    self.message
                );
            }
            None => eprintln!("onestep: {}", self.message),
        }
        if let Some(vs) = self.body["violations"].as_array() {
            for v in vs {
                if let Some(line) = v["message"].as_str() {
                    eprintln!("  - {line}");
                }
            }
        }
    }
}

impl Api {
    fn new(args: &ApiArgs) -> Result<Api, String> {
        let uri: Uri =
            args.api.trim().parse().map_err(|e| {
                format!("--api must be an http:// URL like http://127.0.0.1:8080: {e}")
            })?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => {
                return Err(format!(
                    "--api must be an http:// URL ({other}:// is not supported; reach the API \
                     through a local port of your TLS proxy)"
                ));
            }
            None => return Err("--api must start with http://".into()),
        }
        if uri.authority().is_none() {
            return Err("--api names no host".into());
        }
        Ok(Api {
            base: args.api.trim().trim_end_matches('/').to_owned(),
            token: args.token.clone(),
            client: Client::builder(TokioExecutor::new()).build_http(),
        })
    }

    /// Sends one request; the JSON answer on a 2xx, the refusal otherwise.
    async fn call(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> Result<(StatusCode, Value), Refused> {
        let transport = |message: String| Refused {
            status: None,
            body: Value::Null,
            message,
        };
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base))
            .header(hyper::header::ACCEPT, "application/json");
        if !body.is_empty() || !content_type.is_empty() {
            req = req.header(hyper::header::CONTENT_TYPE, content_type);
        }
        if let Some(t) = &self.token {
            req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = req
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| transport(format!("cannot build the request: {e}")))?;
        let resp = tokio::time::timeout(REQUEST_TIMEOUT, self.client.request(req))
            .await
            .map_err(|_| {
                transport(format!(
                    "the API did not answer within {} s ({})",
                    REQUEST_TIMEOUT.as_secs(),
                    self.base
                ))
            })?
            .map_err(|e| transport(format!("cannot reach the API at {}: {e}", self.base)))?;
        let status = resp.status();
        let bytes = Limited::new(resp.into_body(), MAX_ANSWER)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .map_err(|e| transport(format!("the answer could not be read: {e}")))?;
        let body: Value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        if status.is_success() {
            return Ok((status, body));
        }
        let message = body["message"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| body.to_string());
        Err(Refused {
            status: Some(status),
            body,
            message,
        })
    }

    async fn get(&self, path: &str) -> Result<Value, Refused> {
        self.call(Method::GET, path, "", Vec::new())
            .await
            .map(|(_, v)| v)
    }

    async fn post_json(&self, path: &str, body: &Value) -> Result<(StatusCode, Value), Refused> {
        self.call(
            Method::POST,
            path,
            "application/json",
            body.to_string().into_bytes(),
        )
        .await
    }
}

fn usage(message: &str) -> u8 {
    eprintln!("onestep: {message}");
    USAGE
}

fn print_json(v: &Value) {
    match serde_json::to_string_pretty(v) {
        Ok(s) => println!("{s}"),
        Err(_) => println!("{v}"),
    }
}

fn short(digest: &str) -> &str {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    &hex[..hex.len().min(12)]
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// One line per version: `task vN state digest deployed_by deployed_at [note]`.
fn version_line(d: &Value) -> String {
    let mut line = format!(
        "{} v{} {} sha256:{} by {} at {}",
        text(&d["task"]),
        text(&d["version"]),
        text(&d["state"]),
        short(d["digest"].as_str().unwrap_or_default()),
        text(&d["deployed_by"]),
        text(&d["deployed_at"]),
    );
    if let Some(n) = d["note"].as_str() {
        line.push_str(&format!(" note={n:?}"));
    }
    line
}

/// `onestep deploy MANIFEST`.
pub(crate) async fn deploy(args: DeployArgs) -> u8 {
    let manifest = match onestep_config::load_manifest(&args.manifest) {
        Ok(m) => m,
        Err(e) => return usage(&format!("{}: {e}", args.manifest.display())),
    };
    let Some(path) = args.component.clone().or(manifest.component.clone()) else {
        return usage(
            "the manifest names no handler.component; pass --component PATH to name the .wasm file",
        );
    };
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) => return usage(&format!("cannot read {}: {e}", path.display())),
    };
    let api = match Api::new(&args.api) {
        Ok(a) => a,
        Err(e) => return usage(&e),
    };
    let settings = match serde_json::to_value(&manifest.settings) {
        Ok(v) => v,
        Err(e) => return usage(&format!("the manifest's settings cannot be encoded: {e}")),
    };
    let (_, component) = match api
        .call(Method::POST, "/v1/components", "application/wasm", bytes)
        .await
    {
        Ok(v) => v,
        Err(r) => {
            r.print();
            return FAILED;
        }
    };
    let Some(digest) = component["digest"].as_str() else {
        eprintln!("onestep: the API's upload answer names no digest: {component}");
        return FAILED;
    };
    let mut body = serde_json::json!({"settings": settings, "digest": digest});
    if let Some(n) = &args.note {
        body["note"] = Value::String(n.clone());
    }
    let (_, deployed) = match api.post_json("/v1/deployments", &body).await {
        Ok(v) => v,
        Err(r) => {
            r.print();
            return FAILED;
        }
    };
    if args.api.json {
        print_json(&serde_json::json!({"component": component, "deployed": deployed}));
        return OK;
    }
    let d = &deployed["deployment"];
    let created = deployed["created"].as_bool().unwrap_or(false);
    println!(
        "{} {}/{} version {} digest {} ({} bytes{})",
        if created {
            "deployed"
        } else {
            "unchanged: already active"
        },
        text(&d["namespace"]),
        text(&d["task"]),
        text(&d["version"]),
        text(&d["digest"]),
        text(&component["bytes"]),
        if component["created"].as_bool() == Some(true) {
            ", uploaded"
        } else {
            ", already stored"
        },
    );
    if let Some(prev) = d["previous_version"].as_i64() {
        println!(
            "previous version: {prev} (roll back with `onestep deployments rollback {} {prev}`)",
            text(&d["task"])
        );
    }
    OK
}

fn page_query(task: Option<&str>, before: Option<i64>, limit: u32) -> String {
    let mut q = vec![format!("limit={limit}")];
    if let Some(t) = task {
        q.push(format!("task={}", encode(t)));
    }
    if let Some(b) = before {
        q.push(format!("before={b}"));
    }
    format!("?{}", q.join("&"))
}

/// Percent-encodes a path segment or query value (everything but RFC 3986 unreserved).
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `onestep deployments …`.
pub(crate) async fn deployments(cmd: DeploymentsCommand) -> u8 {
    let api_args = match &cmd {
        DeploymentsCommand::List(a) | DeploymentsCommand::Events(a) => &a.api,
        DeploymentsCommand::Show(a) => &a.api,
        DeploymentsCommand::Rollback(a) => &a.api,
        DeploymentsCommand::Deactivate(a) => &a.api,
    };
    let json = api_args.json;
    let api = match Api::new(api_args) {
        Ok(a) => a,
        Err(e) => return usage(&e),
    };
    let answer = match &cmd {
        DeploymentsCommand::List(a) => {
            api.get(&format!(
                "/v1/deployments{}",
                page_query(a.task.as_deref(), a.before, a.limit)
            ))
            .await
        }
        DeploymentsCommand::Events(a) => {
            api.get(&format!(
                "/v1/deployments/events{}",
                page_query(a.task.as_deref(), a.before, a.limit)
            ))
            .await
        }
        DeploymentsCommand::Show(a) => {
            api.get(&format!("/v1/deployments/{}", encode(&a.task)))
                .await
        }
        DeploymentsCommand::Rollback(a) => api
            .post_json(
                &format!(
                    "/v1/deployments/{}/versions/{}/activate",
                    encode(&a.task),
                    a.version
                ),
                &serde_json::json!({"note": a.note}),
            )
            .await
            .map(|(_, v)| v),
        DeploymentsCommand::Deactivate(a) => api
            .post_json(
                &format!("/v1/deployments/{}/deactivate", encode(&a.task)),
                &serde_json::json!({"note": a.note}),
            )
            .await
            .map(|(_, v)| v),
    };
    let v = match answer {
        Ok(v) => v,
        Err(r) => {
            r.print();
            return FAILED;
        }
    };
    if json {
        print_json(&v);
        return OK;
    }
    match &cmd {
        DeploymentsCommand::List(_) => {
            for d in v["items"].as_array().into_iter().flatten() {
                println!("{}", version_line(d));
            }
            if let Some(b) = v["next_before"].as_i64() {
                println!("more: --before {b}");
            }
        }
        DeploymentsCommand::Events(_) => {
            for e in v["items"].as_array().into_iter().flatten() {
                let from = match e["from_version"].as_i64() {
                    Some(f) => format!(" from v{f}"),
                    None => String::new(),
                };
                let mut line = format!(
                    "#{} {} {} {} v{}{from} sha256:{} by {}",
                    text(&e["revision"]),
                    text(&e["at"]),
                    text(&e["action"]),
                    text(&e["task"]),
                    text(&e["version"]),
                    short(e["digest"].as_str().unwrap_or_default()),
                    text(&e["actor"]),
                );
                if let Some(n) = e["note"].as_str() {
                    line.push_str(&format!(" note={n:?}"));
                }
                println!("{line}");
            }
            if let Some(b) = v["next_before"].as_i64() {
                println!("more: --before {b}");
            }
        }
        DeploymentsCommand::Show(_) => {
            match v["active"].as_object() {
                Some(_) => println!("active: {}", version_line(&v["active"])),
                None => println!("active: none"),
            }
            for d in v["versions"].as_array().into_iter().flatten() {
                println!("{}", version_line(d));
            }
        }
        DeploymentsCommand::Rollback(_) => {
            println!("active: {}", version_line(&v));
        }
        DeploymentsCommand::Deactivate(_) => {
            println!("deactivated: {}", version_line(&v));
        }
    }
    OK
}

/// `onestep components gc`.
pub(crate) async fn components(cmd: ComponentsCommand) -> u8 {
    let ComponentsCommand::Gc(args) = cmd;
    let mut conn = args.conn.clone();
    // The collection is fleet-wide: the namespace only satisfies the connection's options.
    if conn.namespace.is_none() {
        conn.namespace = Some("default".to_owned());
    }
    let json = conn.json;
    let connected = match super::client::connect(&conn).await {
        Ok(c) => c,
        Err(f) => return f.report(json),
    };
    let grace = Duration::from_secs(args.grace_s);
    let result = connected
        .backend()
        .deployments()
        .collect_garbage(grace)
        .await;
    connected.close().await;
    match result {
        Ok(r) => {
            if json {
                print_json(&serde_json::json!({"components": r.components, "bytes": r.bytes}));
            } else {
                println!(
                    "removed {} unreferenced component(s), {} bytes (kept those stored less \
                     than {} s ago)",
                    r.components, r.bytes, args.grace_s
                );
            }
            OK
        }
        Err(e) => {
            eprintln!("onestep: components gc failed: {e}");
            FAILED
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_and_segments_are_encoded() {
        assert_eq!(encode("a b/c"), "a%20b%2Fc");
        assert_eq!(encode("t-1.x_y~"), "t-1.x_y~");
        assert_eq!(
            page_query(Some("x y"), Some(4), 10),
            "?limit=10&task=x%20y&before=4"
        );
        assert_eq!(short("sha256:0123456789abcdef"), "0123456789ab");
    }

    #[test]
    fn only_http_urls_are_accepted() {
        let args = |u: &str| ApiArgs {
            api: u.into(),
            token: None,
            json: false,
        };
        assert!(Api::new(&args("http://127.0.0.1:8080/")).is_ok());
        let e = Api::new(&args("https://x")).err().unwrap_or_default();
        assert!(e.contains("not supported"), "{e}");
        let e = Api::new(&args("127.0.0.1")).err().unwrap_or_default();
        assert!(e.contains("http://"), "{e}");
    }
}
