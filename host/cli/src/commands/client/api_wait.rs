//! `onestep wait ID --api URL` (docs/cli.md#waiting-through-the-api): follows one execution
//! through a running `onestep serve`'s bounded wait (`GET /v1/executions/{id}?wait=S`,
//! docs/http-api.md#waiting), one request after the other on one kept-alive connection, until
//! the execution is terminal or `--timeout` passes. Output and exit codes are those of `wait` on
//! the database: the final execution view, exit 0 only for `succeeded`.
//!
//! Each request asks for the server's longest wait (60 s, or less when `--timeout` leaves less);
//! a server with a lower `api.max_wait_s` refuses it with a 422 naming its bound, and the next
//! requests ask for that. A server that answers a non-terminal execution early (it is shutting
//! down, or its waits are off) is asked again after the client backoff of
//! [`onestep_api::poll::delay`]. An API that cannot be reached on the first request is an error
//! at once (a wrong URL); once it has answered, connection failures, `429` and `5xx` are retried
//! (0.25 s doubling to 5 s) for up to [`GIVE_UP`] in a row, so a restart or a rolling deploy of
//! the API does not end the wait. HTTP is hyper's pooled client; TLS is not spoken (point `--api`
//! at a local port of a TLS proxy, as for `onestep watch`).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper::header::{ACCEPT, AUTHORIZATION, HeaderValue};
use hyper::{Request, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use onestep_api::ExecutionView;
use onestep_api::error::ApiError;
use onestep_core::api_settings::MAX_API_WAIT_S;
use serde_json::Value;
use uuid::Uuid;

use super::output::{FAILED, Failure, OK, print_view};

/// How long the API may stay unreachable (or answer `429`/`5xx`) after it first answered.
pub(crate) const GIVE_UP: Duration = Duration::from_secs(60);
/// The first pause before retrying a failed request; doubled after each failure up to
/// [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(250);
const MAX_PAUSE: Duration = Duration::from_secs(5);
/// How much longer than the wait it asked for a request may take before it counts as lost.
const REQUEST_SLACK: Duration = Duration::from_secs(15);
/// A non-terminal answer this much sooner than the wait asked for (or in less than half of a
/// short one) is "early".
const EARLY: Duration = Duration::from_millis(500);
/// The most bytes of an answer read (an execution view is bounded by the API's limits).
const MAX_BODY: usize = 16 * 1024 * 1024;
/// The message prefix of the API's 422 for a `wait` above its `api.max_wait_s`.
const WAIT_BOUND_PREFIX: &str = "wait must be a number of seconds from 0 to ";

/// Where the API is: its base URL without a trailing slash (`http://host:port/prefix`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiBase(String);

impl ApiBase {
    /// Checks `--api`: an `http://` URL with a host, and an optional path prefix.
    pub(crate) fn parse(url: &str) -> Result<ApiBase, String> {
        let uri: Uri = url
            .trim()
            .parse()
            .map_err(|e| format!("--api must be an http:// URL like http://127.0.0.1:8080: {e}"))?;
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
        let authority = uri
            .authority()
            .filter(|a| !a.host().is_empty())
            .ok_or_else(|| "--api names no host".to_owned())?;
        if uri.query().is_some() {
            return Err("--api must not carry a query string".into());
        }
        let prefix = uri.path().trim_end_matches('/');
        Ok(ApiBase(format!("http://{authority}{prefix}")))
    }

    fn wait_uri(&self, id: Uuid, wait: Duration) -> Result<Uri, String> {
        let url = format!(
            "{}/v1/executions/{id}?wait={:.3}",
            self.0,
            wait.as_secs_f64()
        );
        url.parse()
            .map_err(|e| format!("cannot build the request URL {url}: {e}"))
    }
}

impl std::fmt::Display for ApiBase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The `Authorization` header value of `--token`.
pub(crate) fn bearer(token: &str) -> Result<HeaderValue, Failure> {
    let token = token.trim();
    if token.is_empty() {
        return Err(Failure::usage("--token is empty"));
    }
    HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
        Failure::usage("--token holds characters an HTTP header cannot carry (control characters)")
    })
}

/// What one request gave.
#[derive(Debug)]
enum Answer {
    /// The execution, as the API answered it.
    View(Box<ExecutionView>),
    /// The API refused the request for good (401, 403, 404, 422, …): the failure to report.
    Refused(Failure),
    /// The API's `api.max_wait_s` is below the wait asked for.
    WaitAbove(u32),
    /// No answer, or one worth asking again (429, 5xx); `connect` when the connection could not
    /// be made at all.
    Transient { why: String, connect: bool },
}

/// The pieces of one follow.
pub(crate) struct ApiWait<'a> {
    pub(crate) base: &'a ApiBase,
    pub(crate) auth: Option<HeaderValue>,
    pub(crate) id: Uuid,
    pub(crate) timeout: Option<Duration>,
    pub(crate) json: bool,
}

/// Follows the execution to its end (see the module's comment); the exit code, or the failure.
pub(crate) async fn wait(w: ApiWait<'_>) -> Result<u8, Failure> {
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let id = w.id;
    let start = Instant::now();
    let tty = std::io::stderr().is_terminal();
    let mut max_wait = MAX_API_WAIT_S;
    let mut answered = false;
    let mut last: Option<Box<ExecutionView>> = None;
    let mut failing_since: Option<Instant> = None;
    let mut pause = FIRST_PAUSE;
    let mut early = 0u32;
    let timed_out = |last: &Option<Box<ExecutionView>>, why: Option<&str>| {
        if tty {
            eprintln!();
        }
        let state = match last {
            Some(v) => format!("is still {}", v.status),
            None => "was not reached".to_owned(),
        };
        let why = why.map(|w| format!(" ({w})")).unwrap_or_default();
        Failure::failed(
            "timeout",
            format!(
                "execution {id} {state} after {:.0}s{why}",
                start.elapsed().as_secs_f64()
            ),
        )
    };
    loop {
        let remaining = w.timeout.map(|t| t.saturating_sub(start.elapsed()));
        let ask = remaining.map_or(Duration::from_secs(max_wait.into()), |r| {
            r.min(Duration::from_secs(max_wait.into()))
        });
        let asked_at = Instant::now();
        let answer = request(&client, w.base, w.auth.as_ref(), id, ask).await;
        match answer {
            Answer::View(view) => {
                answered = true;
                failing_since = None;
                pause = FIRST_PAUSE;
                if tty {
                    eprint!(
                        "\r\x1b[Kwaiting for {id}: {} (attempts {}, {}s)",
                        view.status,
                        view.attempts,
                        start.elapsed().as_secs()
                    );
                }
                if view.terminal {
                    if tty {
                        eprintln!();
                    }
                    print_view(&view, w.json);
                    return Ok(if view.status == "succeeded" {
                        OK
                    } else {
                        eprintln!("onestep: execution {id} is {}", view.status);
                        FAILED
                    });
                }
                last = Some(view);
                let remaining = w.timeout.map(|t| t.saturating_sub(start.elapsed()));
                if remaining.is_some_and(|r| r.is_zero()) {
                    return Err(timed_out(&last, None));
                }
                // A non-terminal answer well before the wait asked for: the server is closing
                // or does not wait; ask again after the client backoff.
                let held_enough = ask.saturating_sub(EARLY).max(ask / 2);
                if ask.is_zero() || asked_at.elapsed() < held_enough {
                    let Some(d) = onestep_api::poll::delay_within(early, remaining) else {
                        return Err(timed_out(&last, None));
                    };
                    early += 1;
                    tokio::time::sleep(d).await;
                } else {
                    early = 0;
                }
            }
            Answer::WaitAbove(bound) if bound < max_wait => max_wait = bound,
            Answer::WaitAbove(bound) => {
                return Err(Failure::failed(
                    "unexpected_answer",
                    format!(
                        "the API at {} refused a wait of {:.3}s although its bound is {bound}s",
                        w.base,
                        ask.as_secs_f64()
                    ),
                ));
            }
            Answer::Refused(f) => {
                if tty && answered {
                    eprintln!();
                }
                return Err(f);
            }
            Answer::Transient { why, connect } => {
                if connect && !answered {
                    return Err(Failure::failed(
                        "unreachable",
                        format!("cannot reach the API at {}: {why}", w.base),
                    ));
                }
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= GIVE_UP {
                    if tty {
                        eprintln!();
                    }
                    return Err(Failure::failed(
                        "unreachable",
                        format!(
                            "giving up on the API at {}: {why} (for {:.0}s)",
                            w.base,
                            since.elapsed().as_secs_f64()
                        ),
                    ));
                }
                let remaining = w.timeout.map(|t| t.saturating_sub(start.elapsed()));
                let Some(d) =
                    remaining.map_or(Some(pause), |r| (!r.is_zero()).then_some(pause.min(r)))
                else {
                    return Err(timed_out(&last, Some(&why)));
                };
                if tty && answered {
                    eprintln!();
                }
                eprintln!(
                    "onestep: the API at {} did not answer ({why}); asking again in {:.2}s",
                    w.base,
                    d.as_secs_f64()
                );
                tokio::time::sleep(d).await;
                pause = (pause * 2).min(MAX_PAUSE);
            }
        }
    }
}

/// One `GET /v1/executions/{id}?wait=S`.
async fn request(
    client: &Client<HttpConnector, Empty<Bytes>>,
    base: &ApiBase,
    auth: Option<&HeaderValue>,
    id: Uuid,
    wait: Duration,
) -> Answer {
    let uri = match base.wait_uri(id, wait) {
        Ok(u) => u,
        Err(e) => return Answer::Refused(Failure::usage(e)),
    };
    let mut req = Request::get(uri).header(ACCEPT, "application/json");
    if let Some(a) = auth {
        req = req.header(AUTHORIZATION, a.clone());
    }
    let req = match req.body(Empty::<Bytes>::new()) {
        Ok(r) => r,
        Err(e) => return Answer::Refused(Failure::usage(format!("cannot build the request: {e}"))),
    };
    let limit = wait + REQUEST_SLACK;
    let exchange = async {
        let resp = client.request(req).await?;
        let status = resp.status();
        let body = Limited::new(resp.into_body(), MAX_BODY).collect().await;
        Ok::<_, hyper_util::client::legacy::Error>((status, body))
    };
    let (status, body) = match tokio::time::timeout(limit, exchange).await {
        Err(_) => {
            return Answer::Transient {
                why: format!("no answer within {:.0}s", limit.as_secs_f64()),
                connect: false,
            };
        }
        Ok(Err(e)) => {
            return Answer::Transient {
                why: error_chain(&e),
                connect: e.is_connect(),
            };
        }
        Ok(Ok(pair)) => pair,
    };
    let body = match body {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return Answer::Transient {
                why: format!("the answer broke off: {e}"),
                connect: false,
            };
        }
    };
    classify(status, &body, base)
}

/// What an answer means.
fn classify(status: StatusCode, body: &[u8], base: &ApiBase) -> Answer {
    if status == StatusCode::OK {
        return match serde_json::from_slice::<ExecutionView>(body) {
            Ok(v) => Answer::View(Box::new(v)),
            Err(e) => Answer::Refused(Failure::failed(
                "unexpected_answer",
                format!(
                    "the API at {base} answered 200 with something that is not an execution \
                     ({e}): {}",
                    excerpt(body)
                ),
            )),
        };
    }
    let parsed = serde_json::from_slice::<Value>(body).ok();
    let code = parsed
        .as_ref()
        .and_then(|v| v["code"].as_str().map(str::to_owned));
    let message = parsed
        .as_ref()
        .and_then(|v| v["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| excerpt(body));
    if status == StatusCode::TOO_MANY_REQUESTS || status.is_server_error() {
        return Answer::Transient {
            why: format!("HTTP {}: {message}", status.as_u16()),
            connect: false,
        };
    }
    if status == StatusCode::UNPROCESSABLE_ENTITY
        && let Some(bound) = wait_bound(&message)
    {
        return Answer::WaitAbove(bound);
    }
    let message = match status {
        StatusCode::NOT_FOUND => message,
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => format!(
            "the API at {base} refused the request (HTTP {}): {message}{}",
            status.as_u16(),
            if status == StatusCode::UNAUTHORIZED {
                " (pass its token with --token or ONESTEP_API_TOKEN)"
            } else {
                ""
            }
        ),
        _ => format!(
            "the API at {base} refused the request (HTTP {}): {message}",
            status.as_u16()
        ),
    };
    let code = code.unwrap_or_else(|| format!("http_{}", status.as_u16()));
    Answer::Refused(Failure {
        exit: FAILED,
        body: Box::new(ApiError::new(status, &code, message).body().clone()),
    })
}

/// The bound named by the API's 422 for a too long `wait`
/// ("wait must be a number of seconds from 0 to 10, got '60.000'").
fn wait_bound(message: &str) -> Option<u32> {
    let rest = message.strip_prefix(WAIT_BOUND_PREFIX)?;
    let end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// The start of a body that is not the expected JSON, for a message.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None if text.is_empty() => "(empty body)".to_owned(),
        None => text.to_owned(),
    }
}

/// An error and its causes ("client error (Connect): tcp connect error: Connection refused").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
#[path = "api_wait_tests.rs"]
mod tests;
