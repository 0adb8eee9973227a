//! `summarize`: reads a text document from a (read-only) preopened directory
//! and returns line/word/byte counts, the 10 most frequent terms and the
//! document's SHA-256.
//! Payload: `{"path": "/docs/x.txt"}` (a path inside a preopen).

wit_bindgen::generate!({ path: "../../wit", world: "handler" });

use onestep::handler::host::{Level, log};
use sha2::{Digest, Sha256};
use std::collections::HashMap;

struct Summarize;

fn fatal(message: String) -> HandlerError {
    HandlerError {
        retryable: false,
        message,
        retry_after_ms: None,
    }
}

impl Guest for Summarize {
    fn handle(_ctx: Context, payload: String) -> Result<String, HandlerError> {
        let v: serde_json::Value =
            serde_json::from_str(&payload).map_err(|e| fatal(format!("invalid payload: {e}")))?;
        let path = v
            .get("path")
            .and_then(|p| p.as_str())
            .ok_or_else(|| fatal("payload needs a string field `path`".into()))?;
        let bytes = std::fs::read(path).map_err(|e| fatal(format!("cannot read {path}: {e}")))?;
        let text = String::from_utf8_lossy(&bytes);

        let mut counts: HashMap<String, u64> = HashMap::new();
        let mut words = 0u64;
        for word in text.split_whitespace() {
            words += 1;
            let term: String = word
                .chars()
                .filter(|c| c.is_alphanumeric())
                .flat_map(char::to_lowercase)
                .collect();
            if !term.is_empty() {
                *counts.entry(term).or_default() += 1;
            }
        }
        let mut top: Vec<(String, u64)> = counts.into_iter().collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        top.truncate(10);
        let sha = Sha256::digest(&bytes);
        let sha_hex: String = sha.iter().map(|b| format!("{b:02x}")).collect();
        log(
            Level::Info,
            &format!("summarized {path}: {} bytes", bytes.len()),
        );
        Ok(serde_json::json!({
            "path": path,
            "lines": text.lines().count(),
            "words": words,
            "bytes": bytes.len(),
            "top_terms": top.iter().map(|(t, c)| serde_json::json!({"term": t, "count": c})).collect::<Vec<_>>(),
            "sha256": sha_hex,
        })
        .to_string())
    }
}

export!(Summarize);
