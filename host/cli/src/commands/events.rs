//! `onestep watch ID` (docs/cli.md#onestep-watch): follows one execution's event stream
//! (`GET /v1/executions/{id}/events`, docs/http-api.md#stream) on a running `onestep serve`,
//! printing one line per event, or one JSON object per line with `--json`. A dropped connection
//! (the server's `api.max_stream_s`, a restart, the network) is resumed with `Last-Event-ID`, so
//! every event is printed once.
//!
//! Unlike the other client commands it talks to the HTTP API, not to the database: the stream
//! is the API's. The SSE framing is decoded by `sse-stream`.
//!
//! Exit codes: 0 the execution succeeded; 1 it ended failed, cancelled or expired, or it does
//! not exist (404, or purged while watched); 2 usage errors (id, URL); 3 the API refused the
//! request (401, 403, 422) or could not be reached for `--give-up-after` seconds.

use std::time::{Duration, Instant};

use futures::StreamExt;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use onestep_core::request::parse_execution_id;
use serde_json::Value;
use sse_stream::SseStream;
use uuid::Uuid;

/// Exit code: the execution succeeded.
const OK: u8 = 0;
/// Exit code: the execution ended badly or does not exist.
const FAILED: u8 = 1;
/// Exit code: usage error.
const USAGE: u8 = 2;
/// Exit code: the API refused the request or could not be reached.
const UNREACHABLE: u8 = 3;

/// The most bytes of an error answer read.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// The first pause before reconnecting; doubled after each failure up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(250);
const MAX_PAUSE: Duration = Duration::from_secs(5);

/// Arguments of `onestep watch`.
#[derive(Debug, clap::Args)]
pub(crate) struct WatchArgs {
    /// Execution id.
    pub(crate) id: String,
    /// Base URL of the API (`onestep serve`), `http://HOST:PORT` with an optional path prefix.
    #[arg(long, env = "ONESTEP_API_URL", default_value = "http://127.0.0.1:8080")]
    pub(crate) url: String,
    /// Bearer token (when the server is configured with tokens).
    #[arg(long, env = "ONESTEP_API_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    /// Print each event as one JSON object per line: `{"event", "id", "data"}`.
    #[arg(long)]
    pub(crate) json: bool,
    /// Give up after this many seconds without reaching the API (exit 3).
    #[arg(long, default_value_t = 60.0)]
    pub(crate) give_up_after: f64,
}

/// Where the stream is.
struct Target {
    host: String,
    port: u16,
    authority: String,
    path: String,
}

fn target(url: &str, id: Uuid) -> Result<Target, String> {
    let uri: Uri = url
        .trim()
        .parse()
        .map_err(|e| format!("--url must be an http:// URL like http://127.0.0.1:8080: {e}"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some(other) => {
            return Err(format!(
                "--url must be an http:// URL ({other}:// is not supported; reach the API \
                 through a local port of your TLS proxy)"
            ));
        }
        None => return Err("--url must start with http://".into()),
    }
    let authority = uri
        .authority()
        .ok_or_else(|| "--url names no host".to_owned())?;
    let prefix = uri.path().trim_end_matches('/');
    Ok(Target {
        host: authority.host().trim_matches(['[', ']']).to_owned(),
        port: authority.port_u16().unwrap_or(80),
        authority: authority.as_str().to_owned(),
        path: format!("{prefix}/v1/executions/{id}/events"),
    })
}

/// How one connection ended.
enum Outcome {
    /// The `end` event arrived: the exit code.
    Ended(u8),
    /// The connection dropped (or could not be made): reconnect.
    Dropped(String),
    /// The API refused the request for good: the exit code.
    Refused(u8),
}

/// What is carried from one connection to the next.
struct Follow {
    last_id: Option<String>,
    json: bool,
    /// Streams the API answered with 200 so far.
    streams: u64,
}

pub(crate) async fn watch(args: WatchArgs) -> u8 {
    let id = match parse_execution_id(&args.id) {
        Ok(id) => id,
        Err(e) => return usage(&e.to_string()),
    };
    let target = match target(&args.url, id) {
        Ok(t) => t,
        Err(e) => return usage(&e),
    };
    if !args.give_up_after.is_finite() || args.give_up_after < 0.0 {
        return usage("--give-up-after must be a non-negative number of seconds");
    }
    let give_up_after = Duration::from_secs_f64(args.give_up_after);
    let mut follow = Follow {
        last_id: None,
        json: args.json,
        streams: 0,
    };
    let mut pause = FIRST_PAUSE;
    let mut failing_since: Option<Instant> = None;
    loop {
        let before = follow.streams;
        match connect_once(&target, args.token.as_deref(), &mut follow).await {
            Outcome::Ended(code) | Outcome::Refused(code) => return code,
            Outcome::Dropped(why) => {
                if follow.streams > before {
                    // The API answered with a stream: it is there; start afresh.
                    failing_since = None;
                    pause = FIRST_PAUSE;
                }
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= give_up_after {
                    eprintln!(
                        "onestep: giving up on {}: {why} (for {:.0}s)",
                        target.authority,
                        since.elapsed().as_secs_f64()
                    );
                    return UNREACHABLE;
                }
                eprintln!(
                    "onestep: stream of {id} interrupted ({why}); reconnecting{}",
                    follow
                        .last_id
                        .as_deref()
                        .map(|i| format!(" after event {i}"))
                        .unwrap_or_default()
                );
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(MAX_PAUSE);
            }
        }
    }
}

fn usage(message: &str) -> u8 {
    eprintln!("onestep: {message}");
    USAGE
}

/// One connection: request, then print events until the stream ends or drops.
async fn connect_once(target: &Target, token: Option<&str>, follow: &mut Follow) -> Outcome {
    let stream = match tokio::net::TcpStream::connect((target.host.as_str(), target.port)).await {
        Ok(s) => s,
        Err(e) => return Outcome::Dropped(format!("cannot connect: {e}")),
    };
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
    {
        Ok(pair) => pair,
        Err(e) => return Outcome::Dropped(format!("HTTP handshake failed: {e}")),
    };
    let connection = tokio::spawn(conn);
    let outcome = request(&mut sender, target, token, follow).await;
    connection.abort();
    outcome
}

async fn request(
    sender: &mut hyper::client::conn::http1::SendRequest<Empty<Bytes>>,
    target: &Target,
    token: Option<&str>,
    follow: &mut Follow,
) -> Outcome {
    let mut req = Request::get(target.path.as_str())
        .header(hyper::header::HOST, target.authority.as_str())
        .header(hyper::header::ACCEPT, "text/event-stream");
    if let Some(t) = token {
        req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    if let Some(last) = &follow.last_id {
        req = req.header("Last-Event-ID", last.as_str());
    }
    let req = match req.body(Empty::<Bytes>::new()) {
        Ok(r) => r,
        Err(e) => return Outcome::Refused(usage(&format!("cannot build the request: {e}"))),
    };
    let resp = match sender.send_request(req).await {
        Ok(r) => r,
        Err(e) => return Outcome::Dropped(format!("request failed: {e}")),
    };
    let status = resp.status();
    if status != StatusCode::OK {
        let body = Limited::new(resp.into_body(), MAX_ERROR_BODY)
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let message = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v["message"].as_str().map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&body).into_owned());
        let why = format!("HTTP {}: {message}", status.as_u16());
        return match status {
            StatusCode::NOT_FOUND => {
                eprintln!("onestep: {message}");
                Outcome::Refused(FAILED)
            }
            StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
                Outcome::Dropped(why)
            }
            s if s.is_server_error() => Outcome::Dropped(why),
            _ => {
                eprintln!("onestep: the API refused the stream: {why}");
                Outcome::Refused(UNREACHABLE)
            }
        };
    }
    follow.streams += 1;
    let mut events = SseStream::new(resp.into_body());
    while let Some(item) = events.next().await {
        let sse = match item {
            Ok(sse) => sse,
            Err(e) => return Outcome::Dropped(format!("the stream broke: {e}")),
        };
        let Some(name) = sse.event.as_deref() else {
            continue;
        };
        let data: Value = match sse.data.as_deref().map(serde_json::from_str) {
            Some(Ok(v)) => v,
            _ => Value::Null,
        };
        print_event(name, sse.id.as_deref(), &data, follow.json);
        if let Some(id) = sse.id {
            follow.last_id = Some(id);
        }
        if name == "end" {
            return Outcome::Ended(if data["status"] == "succeeded" {
                OK
            } else {
                FAILED
            });
        }
    }
    Outcome::Dropped("the server closed the stream".into())
}

fn print_event(name: &str, id: Option<&str>, data: &Value, json: bool) {
    if json {
        let line = serde_json::json!({"event": name, "id": id, "data": data});
        println!("{line}");
        return;
    }
    println!("{}", human(name, data));
}

/// One human-readable line for an event.
fn human(name: &str, d: &Value) -> String {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    match name {
        "status" => {
            let mut line = format!("status    {} (attempts {})", s(&d["status"]), d["attempts"]);
            if let Some(p) = d["progress"].as_object() {
                line.push_str(&format!(
                    ", progress {}/{}",
                    p.get("done").unwrap_or(&Value::Null),
                    p.get("total").unwrap_or(&Value::Null)
                ));
            }
            if let Some(e) = d["error"]["exception_type"].as_str() {
                line.push_str(&format!(", error {e}"));
            }
            line
        }
        "attempt" => {
            let mut line = format!(
                "attempt   {} {} at {} on {}",
                d["attempt"],
                s(&d["status"]),
                s(&d["at"]),
                s(&d["worker_id"])
            );
            if let Some(m) = d["message"].as_str() {
                line.push_str(&format!(": {m}"));
            }
            line
        }
        "progress" => format!(
            "progress  {}/{} {} (attempt {})",
            d["done"],
            d["total"],
            s(&d["note"]),
            d["attempt"]
        ),
        "log" => {
            let mut line = String::new();
            if let Some(n) = d["skipped"].as_u64().filter(|n| *n > 0) {
                line.push_str(&format!("log       ({n} earlier lines no longer kept)\n"));
            }
            line.push_str(&format!(
                "log       [{}#{}] {:<5} {}",
                d["attempt"],
                d["seq"],
                s(&d["level"]),
                s(&d["message"])
            ));
            line
        }
        "end" => match d["status"].as_str() {
            Some(status) => format!("end       {status}"),
            None => "end       the execution no longer exists".into(),
        },
        other => format!("{other:<9} {d}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_gives_host_port_and_the_route() {
        let id = Uuid::nil();
        let t = target("http://127.0.0.1:18080", id).expect("plain");
        assert_eq!((t.host.as_str(), t.port), ("127.0.0.1", 18080));
        assert_eq!(t.path, format!("/v1/executions/{id}/events"));
        let t = target("http://api.local/onestep/", id).expect("prefix");
        assert_eq!((t.host.as_str(), t.port), ("api.local", 80));
        assert_eq!(t.path, format!("/onestep/v1/executions/{id}/events"));
        let t = target("http://[::1]:9000", id).expect("ipv6");
        assert_eq!(t.host, "::1");
        for bad in ["https://x", "127.0.0.1:8080", "ftp://x", "http://"] {
            assert!(target(bad, id).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_event_has_a_human_line() {
        let status = serde_json::json!({"status": "running", "attempts": 1,
            "progress": {"done": 3, "total": 10}});
        assert_eq!(
            human("status", &status),
            "status    running (attempts 1), progress 3/10"
        );
        let log = serde_json::json!({"attempt": 2, "seq": 7, "level": "info",
            "message": "hello", "skipped": 0});
        assert_eq!(human("log", &log), "log       [2#7] info  hello");
        let end = serde_json::json!({"status": "failed"});
        assert_eq!(human("end", &end), "end       failed");
    }
}
