//! `misbehave`: a handler that tries to break out of its sandbox, used by the
//! host's tests. Payload: `{"mode": "...", ...}`:
//!
//! - `spin`: loop forever (CPU bound, never calls the host).
//! - `alloc`: allocate memory without bound.
//! - `panic`: panic with a known message.
//! - `read_passwd`: read `/etc/passwd`.
//! - `escape`: read `path` (default `/data/../secret`), outside its preopen.
//! - `write_ro`: write to `path` (default `/ro/written.txt`) in a read-only preopen.
//! - `read`: read `path` and return its content (used to test isolation).
//! - `write`: write `content` to `path` (used to test isolation).
//! - `env`: read env var `name` (default `ONESTEP_SECRET`).
//! - `tcp`: open a TCP connection to `addr` (default `127.0.0.1:3306`).
//! - `sleep`: sleep `secs` seconds (default 3600) inside a host call.
//! - `fatal`: return a fatal handler error.
//! - `print`: print `lines` lines (default 1000) of 100 bytes to stdout.
//! - `log-injection`: send `message` (default: a newline followed by a forged
//!   log line naming another execution) through `log`, `progress`, stdout,
//!   stderr and as the message of a fatal handler error.
//! - `byte-writes`: write `n` (default 2,000,000) single bytes to stdout, one
//!   write call each, never a newline.
//! - `big_result`: return a JSON array of `bytes` bytes (default 30,000,000): `[0,0,…,0]`.
//! - `result`: return the string `text` verbatim as the result (default `null`), e.g. JSON
//!   nested deeper than a backend stores, or a string holding U+0000.
//! - `retryable`: return a retryable handler error without `retry-after-ms` (the retry policy's
//!   own delays apply).
//! - `open_files`: open `path` (default `/ro/doc.txt`) again and again
//!   without closing, up to `max` times (default 100000) or the first error;
//!   with `"read": true` also reads a byte of each (a stream per file).
//!   Holds them for `hold_ms` (default 0), then closes one and tries once
//!   more. Returns `{"opened": N, "error":
//!   "..." | null, "os_error": N | null, "reopened": bool}`.
//!
//! - `log-flood`: says `n` (default 100,000) lines of `size` bytes (default
//!   100) through each channel named in `via` (default all of `log`,
//!   `progress`, `stdout`, `stderr`), then fails with a fatal handler error
//!   whose message is `error_bytes` long (default 10 MiB; 0: succeeds
//!   instead with `{"said": n}`).
//!
//! The escape modes return what the OS said as *data*:
//! `{"denied": true, "error": "..."}` (or `{"denied": false, ...}` if the
//! operation unexpectedly worked).

wit_bindgen::generate!({ path: "../../wit", world: "handler" });

use onestep::handler::host::{Level, log, progress};
use serde_json::{Value, json};
use std::io::Write;
use std::time::Duration;

/// What `log-injection` sends by default: a line break, then a complete log
/// line in the host's text format attributed to someone else's execution,
/// with an ANSI colour escape for good measure.
const FORGED: &str = "ok\n2026-01-01T00:00:00.000000Z  INFO onestep_wasm::guest: \
execution_id=victim-execution attempt_id=victim-attempt \x1b[31mforged\x1b[0m\r\n";

struct Misbehave;

fn fatal(message: String) -> HandlerError {
    HandlerError {
        retryable: false,
        message,
        retry_after_ms: None,
    }
}

fn outcome<T>(r: std::io::Result<T>, ok: impl FnOnce(T) -> Value) -> String {
    match r {
        Ok(v) => json!({ "denied": false, "result": ok(v) }).to_string(),
        Err(e) => {
            json!({ "denied": true, "error": e.to_string(), "kind": format!("{:?}", e.kind()) })
                .to_string()
        }
    }
}

impl Guest for Misbehave {
    fn handle(_ctx: Context, payload: String) -> Result<String, HandlerError> {
        let v: Value =
            serde_json::from_str(&payload).map_err(|e| fatal(format!("invalid payload: {e}")))?;
        let s = |k: &str, d: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or(d).to_string();
        let mode = s("mode", "");
        match mode.as_str() {
            "spin" => {
                let mut x: u64 = 0;
                loop {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            }
            "alloc" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    // Touch every page so the memory is really committed.
                    hoard.push(vec![0xA5u8; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "panic" => panic!("misbehave: deliberate panic"),
            "result" => Ok(s("text", "null")),
            "read_passwd" => Ok(outcome(std::fs::read_to_string("/etc/passwd"), |c| {
                json!(c.len())
            })),
            "escape" => {
                let path = s("path", "/data/../secret");
                Ok(outcome(std::fs::read_to_string(&path), |c| json!(c)))
            }
            "write_ro" => {
                let path = s("path", "/ro/written.txt");
                Ok(outcome(
                    std::fs::write(&path, b"should not be here"),
                    |_| json!(path),
                ))
            }
            "read" => Ok(outcome(std::fs::read_to_string(s("path", "")), |c| {
                json!(c)
            })),
            "write" => {
                let path = s("path", "");
                Ok(outcome(std::fs::write(&path, s("content", "x")), |_| {
                    json!(path)
                }))
            }
            "env" => {
                let name = s("name", "ONESTEP_SECRET");
                Ok(match std::env::var(&name) {
                    Ok(val) => json!({ "denied": false, "result": val }).to_string(),
                    Err(e) => json!({ "denied": true, "error": e.to_string() }).to_string(),
                })
            }
            "tcp" => {
                let addr = s("addr", "127.0.0.1:3306");
                Ok(outcome(std::net::TcpStream::connect(&addr), |_| {
                    json!(addr)
                }))
            }
            "sleep" => {
                let secs = v.get("secs").and_then(|x| x.as_u64()).unwrap_or(3600);
                std::thread::sleep(Duration::from_secs(secs));
                Ok(json!({ "slept": secs }).to_string())
            }
            "print" => {
                let lines = v.get("lines").and_then(|x| x.as_u64()).unwrap_or(1000);
                for i in 0..lines {
                    println!("{i:>8} {}", "x".repeat(90));
                }
                Ok(json!({ "printed": lines }).to_string())
            }
            "log-injection" => {
                let message = s("message", FORGED);
                log(Level::Info, &message);
                progress(1, 2, &message);
                print!("{message}");
                eprint!("{message}");
                Err(fatal(message))
            }
            "byte-writes" => {
                let n = v.get("n").and_then(|x| x.as_u64()).unwrap_or(2_000_000);
                // Unbuffered: every byte is its own write to the host.
                let mut out = std::io::stdout().lock();
                for _ in 0..n {
                    let _ = out.write_all(b"x");
                    let _ = out.flush();
                }
                Ok(json!({ "written": n }).to_string())
            }
            "open_files" => {
                let path = s("path", "/ro/doc.txt");
                let max = v.get("max").and_then(|x| x.as_u64()).unwrap_or(100_000);
                let read = v.get("read").and_then(|x| x.as_bool()).unwrap_or(false);
                let open = || -> std::io::Result<std::fs::File> {
                    let mut f = std::fs::File::open(&path)?;
                    if read {
                        let mut byte = [0u8; 1];
                        std::io::Read::read(&mut f, &mut byte)?;
                    }
                    Ok(f)
                };
                let mut held = Vec::new();
                let mut error = None;
                while (held.len() as u64) < max {
                    match open() {
                        Ok(f) => held.push(f),
                        Err(e) => {
                            error = Some(e);
                            break;
                        }
                    }
                }
                let opened = held.len();
                let hold_ms = v.get("hold_ms").and_then(|x| x.as_u64()).unwrap_or(0);
                std::thread::sleep(Duration::from_millis(hold_ms));
                held.pop();
                let reopened = open().is_ok();
                Ok(json!({
                    "opened": opened,
                    "error": error.as_ref().map(|e| e.to_string()),
                    "os_error": error.as_ref().and_then(|e| e.raw_os_error()),
                    "reopened": reopened,
                })
                .to_string())
            }
            "log-flood" => {
                let n = v.get("n").and_then(|x| x.as_u64()).unwrap_or(100_000);
                let size = v.get("size").and_then(|x| x.as_u64()).unwrap_or(100) as usize;
                let error_bytes = v
                    .get("error_bytes")
                    .and_then(|x| x.as_u64())
                    .unwrap_or(10 << 20) as usize;
                let all = ["log", "progress", "stdout", "stderr"];
                let via: Vec<String> = match v.get("via").and_then(|x| x.as_array()) {
                    Some(list) => list
                        .iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect(),
                    None => all.iter().map(|x| x.to_string()).collect(),
                };
                let line = "y".repeat(size);
                let mut out = std::io::stdout().lock();
                let mut err = std::io::stderr().lock();
                for i in 0..n {
                    for channel in &via {
                        match channel.as_str() {
                            "log" => log(Level::Info, &line),
                            "progress" => progress(i, n, &line),
                            "stdout" => {
                                let _ = writeln!(out, "{line}");
                            }
                            "stderr" => {
                                let _ = writeln!(err, "{line}");
                            }
                            _ => {}
                        }
                    }
                }
                let _ = out.flush();
                let _ = err.flush();
                if error_bytes == 0 {
                    Ok(json!({ "said": n }).to_string())
                } else {
                    Err(fatal("e".repeat(error_bytes)))
                }
            }
            "fatal" => Err(fatal("misbehave: deliberate fatal error".into())),
            "big_result" => {
                // Exactly `bytes` bytes (at least `[0]`), built in place: no second copy.
                let bytes = v
                    .get("bytes")
                    .and_then(|x| x.as_u64())
                    .unwrap_or(30_000_000);
                let n = (bytes.max(3) as usize - 1) / 2;
                let mut out = String::with_capacity(2 * n + 2);
                out.push('[');
                for i in 0..n {
                    out.push_str(if i == 0 { "0" } else { ",0" });
                }
                if bytes % 2 == 0 {
                    out.push(' ');
                }
                out.push(']');
                Ok(out)
            }
            "retryable" => Err(HandlerError {
                retryable: true,
                message: "misbehave: deliberate retryable error".into(),
                retry_after_ms: None,
            }),
            other => Err(fatal(format!("unknown mode {other:?}"))),
        }
    }
}

export!(Misbehave);
