//! `fetch`: a handler of world `onestep:handler/handler@0.2.0` that makes one
//! outbound HTTP request through `wasi:http` (with the `wstd` client) and
//! returns what it got.
//!
//! Payload: `{"url": "http://...", "method": "GET", "headers": {"x": "y"},
//! "body": "text", "follow": 0}`; only `url` is required. `follow` is how
//! many redirects the guest follows itself (the host never follows one):
//! each hop is a new request the host checks again.
//!
//! Output: `{"status", "bytes", "json" | "body_prefix", "location"?,
//! "hops", "sent_headers"}`: `json` when the body parses as JSON, otherwise
//! its first 256 characters; `sent_headers` lists the header names of the
//! guest's own request (host-injected headers are never among them). A failed
//! request (denied, timeout, too large...) is a handler error
//! (`retryable: false`) whose message carries the `wasi:http` error code.
//!
//! Many requests in one attempt: `{"url": "http://u{i}@host:port/ok",
//! "repeat": N}` sends N GET requests one after the other, `{i}` replaced by
//! the request's index; `{"urls": [...]}` sends one GET to each. With
//! `"hold": true` every response is kept, its body unread, until the last
//! request is done (each holds its connection). Output: `{"ok": n,
//! "errors": {"<error code>": count}, "results": [status or error code, ...
//! (the first 64)]}`; a failed request is counted, never an error of the
//! handler.
//!
//! Hostile modes (docs/security.md#http-resources), through the raw
//! `wasi:http/types` bindings: `{"mode": "fields-hog", "n": N, "size": S}`
//! holds N `fields` of one S-byte header each; `{"mode": "body-hog", "url":
//! U, "n": N}` holds N open request bodies of requests sent to U (e.g. a
//! denied origin). Both return `{"held": N}` if the host let them.

wit_bindgen::generate!({
    path: "../../wit/v0.2",
    world: "onestep:handler/handler@0.2.0",
    generate_all,
});

use onestep::handler::host::{Level, log};
use wstd::http::{Body, Client, ErrorCode, Method, Request};

struct Fetch;

fn fatal(message: String) -> HandlerError {
    HandlerError {
        retryable: false,
        message,
        retry_after_ms: None,
    }
}

/// `request failed: HttpRequestDenied` etc.: the `wasi:http` error code when
/// there is one, otherwise the whole error chain (e.g. a failed body read).
fn describe(e: &wstd::http::Error) -> String {
    match e.chain().find_map(|c| c.downcast_ref::<ErrorCode>()) {
        Some(code) => format!("request failed: {code:?}"),
        None => format!("request failed: {e:#}"),
    }
}

impl Guest for Fetch {
    fn handle(_ctx: Context, payload: String) -> Result<String, HandlerError> {
        let v: serde_json::Value =
            serde_json::from_str(&payload).map_err(|e| fatal(format!("invalid payload: {e}")))?;
        let n = v.get("n").and_then(|n| n.as_u64()).unwrap_or(1000);
        match v.get("mode").and_then(|m| m.as_str()) {
            Some("fields-hog") => {
                let size = v.get("size").and_then(|n| n.as_u64()).unwrap_or(100_000) as usize;
                return fields_hog(n, size);
            }
            Some("body-hog") => {
                let url = v.get("url").and_then(|u| u.as_str()).unwrap_or_default();
                return body_hog(n, url);
            }
            _ => {}
        }
        if v.get("repeat").is_some() || v.get("urls").is_some() {
            let template = v.get("url").and_then(|u| u.as_str()).unwrap_or_default();
            let repeat = v.get("repeat").and_then(|n| n.as_u64()).unwrap_or(0);
            let urls: Vec<String> = match v.get("urls").and_then(|u| u.as_array()) {
                Some(list) => list
                    .iter()
                    .filter_map(|u| u.as_str().map(str::to_string))
                    .collect(),
                None => (0..repeat)
                    .map(|i| template.replace("{i}", &i.to_string()))
                    .collect(),
            };
            let hold = v.get("hold").and_then(|h| h.as_bool()).unwrap_or(false);
            return Ok(wstd::runtime::block_on(many(urls, hold)));
        }
        let Some(url) = v.get("url").and_then(|u| u.as_str()) else {
            return Err(fatal("payload needs \"url\": a string".into()));
        };
        let method = v.get("method").and_then(|m| m.as_str()).unwrap_or("GET");
        let follow = v.get("follow").and_then(|n| n.as_u64()).unwrap_or(0);
        let headers: Vec<(String, String)> = v
            .get("headers")
            .and_then(|h| h.as_object())
            .map(|h| {
                h.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let body = v.get("body").and_then(|b| b.as_str()).map(str::to_string);
        wstd::runtime::block_on(run(url.to_string(), method, headers, body, follow))
    }
}

/// The `repeat` / `urls` mode (see the module docs).
async fn many(urls: Vec<String>, hold: bool) -> String {
    let client = Client::new();
    let mut ok = 0u64;
    let mut errors = serde_json::Map::new();
    let mut results = Vec::new();
    let mut held = Vec::new();
    for url in urls {
        let outcome = match Request::get(url.as_str()).body(Body::empty()) {
            Err(e) => Err(format!("invalid request: {e}")),
            Ok(request) => match client.send(request).await {
                Err(e) => Err(describe(&e)
                    .trim_start_matches("request failed: ")
                    .trim_start_matches("ErrorCode::")
                    .to_string()),
                Ok(response) => {
                    let status = response.status().as_u16();
                    if hold {
                        held.push(response);
                        Ok(status)
                    } else {
                        let mut body = response.into_body();
                        match body.contents().await {
                            Ok(_) => Ok(status),
                            Err(e) => Err(describe(&e)
                                .trim_start_matches("request failed: ")
                                .trim_start_matches("ErrorCode::")
                                .to_string()),
                        }
                    }
                }
            },
        };
        let shown = match outcome {
            Ok(status) => {
                ok += 1;
                serde_json::json!(status)
            }
            Err(code) => {
                let n = errors.get(&code).and_then(|n| n.as_u64()).unwrap_or(0);
                errors.insert(code.clone(), (n + 1).into());
                serde_json::json!(code)
            }
        };
        if results.len() < 64 {
            results.push(shown);
        }
    }
    drop(held);
    serde_json::json!({"ok": ok, "errors": errors, "results": results}).to_string()
}

async fn run(
    mut url: String,
    method: &str,
    headers: Vec<(String, String)>,
    body: Option<String>,
    follow: u64,
) -> Result<String, HandlerError> {
    let method =
        Method::from_bytes(method.as_bytes()).map_err(|e| fatal(format!("invalid method: {e}")))?;
    let client = Client::new();
    let mut hops = Vec::new();
    loop {
        let mut builder = Request::builder().method(method.clone()).uri(url.as_str());
        for (k, v) in &headers {
            builder = builder.header(k.as_str(), v.as_str());
        }
        let request = builder
            .body(match &body {
                Some(b) => Body::from(b.clone()),
                None => Body::empty(),
            })
            .map_err(|e| fatal(format!("invalid request: {e}")))?;
        let sent_headers: Vec<String> = request
            .headers()
            .keys()
            .map(|k| k.as_str().to_string())
            .collect();
        log(Level::Info, &format!("fetching {url}"));
        let response = client
            .send(request)
            .await
            .map_err(|e| fatal(describe(&e)))?;
        let status = response.status().as_u16();
        let location = response
            .headers()
            .get("location")
            .and_then(|l| l.to_str().ok())
            .map(str::to_string);
        hops.push(serde_json::json!({"url": url, "status": status}));
        if let (true, Some(next)) = (response.status().is_redirection(), &location) {
            if (hops.len() as u64) <= follow {
                url = next.clone();
                continue;
            }
        }
        let mut body = response.into_body();
        let bytes = body
            .contents()
            .await
            .map_err(|e| fatal(describe(&e)))?
            .to_vec();
        let mut out = serde_json::json!({
            "status": status,
            "bytes": bytes.len(),
            "hops": hops,
            "sent_headers": sent_headers,
        });
        match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(json) if !bytes.is_empty() => out["json"] = json,
            _ => {
                let text = String::from_utf8_lossy(&bytes);
                out["body_prefix"] = text.chars().take(256).collect::<String>().into();
            }
        }
        if let Some(l) = location {
            out["location"] = l.into();
        }
        return Ok(out.to_string());
    }
}

/// Holds `n` fields of one `size`-byte header each.
fn fields_hog(n: u64, size: usize) -> Result<String, HandlerError> {
    use wasi::http::types::Fields;
    let value = vec![b'x'; size];
    let mut held = Vec::new();
    for i in 0..n {
        let f = Fields::new();
        f.append("x-hog", &value)
            .map_err(|e| fatal(format!("fields {i}: {e:?}")))?;
        held.push(f);
    }
    Ok(serde_json::json!({ "held": held.len() }).to_string())
}

/// Holds `n` open bodies of requests sent to `url`.
fn body_hog(n: u64, url: &str) -> Result<String, HandlerError> {
    use wasi::http::types::{Fields, OutgoingRequest, Scheme};
    let (scheme, rest) = match url.split_once("://") {
        Some(("https", rest)) => (Scheme::Https, rest),
        Some((_, rest)) => (Scheme::Http, rest),
        None => (Scheme::Http, url),
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let mut held = Vec::new();
    for i in 0..n {
        let request = OutgoingRequest::new(Fields::new());
        let _ = request.set_scheme(Some(&scheme));
        let _ = request.set_authority(Some(authority));
        let _ = request.set_path_with_query(Some("/"));
        let body = request
            .body()
            .map_err(|()| fatal(format!("body {i}: already taken")))?;
        let future = wasi::http::outgoing_handler::handle(request, None);
        held.push((body, future));
    }
    Ok(serde_json::json!({ "held": held.len() }).to_string())
}

export!(Fetch);
