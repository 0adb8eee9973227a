//! Every response of the router tests is checked against the OpenAPI document the router serves:
//! the status must be documented for the operation and the JSON body must match its schema (a
//! validator for the subset of JSON Schema that utoipa emits: `$ref`, `type` (also as a list),
//! `properties`/`required`/`additionalProperties`, `items`, `oneOf`/`anyOf`/`allOf`, `enum`,
//! `minimum`/`maximum`, `format: uuid`).

use axum::http::{Method, StatusCode};
use serde_json::Value;

/// Panics when `(method, path, status, body)` does not match the document.
pub fn check_against_openapi(
    doc: &Value,
    method: &Method,
    path: &str,
    status: StatusCode,
    body: &Value,
) {
    if path == "/openapi.json" {
        return; // the document itself
    }
    let Some(op) = find_operation(doc, method, path) else {
        // Unknown routes and methods answer with the error body too.
        assert!(
            matches!(status.as_u16(), 404 | 405),
            "{method} {path}: no such operation in the OpenAPI document, yet status {status}"
        );
        let schema = serde_json::json!({"$ref": "#/components/schemas/ErrorBody"});
        if let Err(e) = validate(doc, &schema, body, "$") {
            panic!("{method} {path} -> {status}: body does not match ErrorBody: {e}\n{body}");
        }
        return;
    };
    let Some(resp) = op["responses"].get(status.as_str()) else {
        panic!("{method} {path}: status {status} is not documented; body {body}");
    };
    let schema = &resp["content"]["application/json"]["schema"];
    assert!(
        !schema.is_null(),
        "{method} {path} -> {status}: no JSON schema documented"
    );
    if let Err(e) = validate(doc, schema, body, "$") {
        panic!("{method} {path} -> {status}: body does not match the schema: {e}\n{body}");
    }
}

fn find_operation<'a>(doc: &'a Value, method: &Method, path: &str) -> Option<&'a Value> {
    let want: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    let paths = doc["paths"].as_object()?;
    paths.iter().find_map(|(template, item)| {
        let have: Vec<&str> = template.split('/').collect();
        let same = have.len() == want.len()
            && have
                .iter()
                .zip(&want)
                .all(|(h, w)| (h.starts_with('{') && !w.is_empty()) || h == w);
        if !same {
            return None;
        }
        item.get(method.as_str().to_ascii_lowercase())
    })
}

fn resolve<'a>(doc: &'a Value, reference: &str) -> Result<&'a Value, String> {
    let mut node = doc;
    for part in reference.trim_start_matches("#/").split('/') {
        node = node
            .get(part)
            .ok_or_else(|| format!("unresolvable $ref {reference}"))?;
    }
    Ok(node)
}

fn type_matches(t: &str, v: &Value) -> bool {
    match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        _ => false,
    }
}

/// Validates `v` against `schema`; the error names the JSON path.
pub fn validate(doc: &Value, schema: &Value, v: &Value, at: &str) -> Result<(), String> {
    if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        return validate(doc, resolve(doc, r)?, v, at);
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(alts) = schema.get(key).and_then(Value::as_array) {
            let errors: Vec<String> = alts
                .iter()
                .filter_map(|s| validate(doc, s, v, at).err())
                .collect();
            let ok = alts.len() - errors.len();
            if ok == 0 || (key == "oneOf" && ok > 1) {
                return Err(format!(
                    "{at}: {key} matched {ok} alternatives ({errors:?})"
                ));
            }
        }
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for s in all {
            validate(doc, s, v, at)?;
        }
    }
    match schema.get("type") {
        Some(Value::String(t)) if !type_matches(t, v) => {
            return Err(format!("{at}: expected {t}, got {v}"));
        }
        Some(Value::Array(ts))
            if !ts
                .iter()
                .any(|t| t.as_str().is_some_and(|t| type_matches(t, v))) =>
        {
            return Err(format!("{at}: expected one of {ts:?}, got {v}"));
        }
        _ => {}
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array)
        && !values.contains(v)
    {
        return Err(format!("{at}: {v} is not in {values:?}"));
    }
    if let (Some(n), Some(min)) = (v.as_f64(), schema.get("minimum").and_then(Value::as_f64))
        && n < min
    {
        return Err(format!("{at}: {n} < minimum {min}"));
    }
    if let (Some(n), Some(max)) = (v.as_f64(), schema.get("maximum").and_then(Value::as_f64))
        && n > max
    {
        return Err(format!("{at}: {n} > maximum {max}"));
    }
    if schema.get("format").and_then(Value::as_str) == Some("uuid")
        && let Some(s) = v.as_str()
        && uuid::Uuid::parse_str(s).is_err()
    {
        return Err(format!("{at}: {s:?} is not a UUID"));
    }
    if let Some(obj) = v.as_object() {
        let props = schema.get("properties").and_then(Value::as_object);
        if let Some(required) = schema.get("required").and_then(Value::as_array) {
            for r in required.iter().filter_map(Value::as_str) {
                if !obj.contains_key(r) {
                    return Err(format!("{at}: missing required property {r}"));
                }
            }
        }
        for (k, value) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(s) => validate(doc, s, value, &format!("{at}.{k}"))?,
                None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                    return Err(format!("{at}: unexpected property {k}"));
                }
                None if props.is_some() => {
                    // utoipa does not emit additionalProperties:false; undocumented keys are
                    // still a mismatch between the code and its document.
                    return Err(format!("{at}: undocumented property {k}"));
                }
                None => {}
            }
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), v.as_array()) {
        for (i, item) in arr.iter().enumerate() {
            validate(doc, items, item, &format!("{at}[{i}]"))?;
        }
    }
    Ok(())
}

#[test]
fn the_validator_rejects_mismatches() {
    let doc = serde_json::to_value(onestep_api::openapi_document()).expect("doc");
    let view = serde_json::json!({"$ref": "#/components/schemas/ExecutionView"});
    let good = serde_json::json!({
        "id": uuid::Uuid::nil(), "namespace": "n", "task_name": "t", "status": "queued",
        "terminal": false, "attempts": 0, "metadata": {}, "version": 0,
        "created_at": "x", "available_at": "x", "started_at": null, "finished_at": null,
        "cancel_requested_at": null, "expires_at": null, "error": null
    });
    assert_eq!(validate(&doc, &view, &good, "$"), Ok(()));
    let mutations: [(&str, Value); 5] = [
        ("status", serde_json::json!("done")),
        ("attempts", serde_json::json!("1")),
        ("id", serde_json::json!("nope")),
        ("error", serde_json::json!({"kind": 1})),
        ("extra", serde_json::json!(1)),
    ];
    for (key, value) in mutations {
        let mut bad = good.clone();
        bad[key] = value;
        assert!(validate(&doc, &view, &bad, "$").is_err(), "{key}");
    }
    let mut missing = good.clone();
    missing.as_object_mut().map(|o| o.remove("created_at"));
    assert!(validate(&doc, &view, &missing, "$").is_err());
    let result = serde_json::json!({"$ref": "#/components/schemas/ResultView"});
    for v in [
        serde_json::json!("s"),
        serde_json::json!(null),
        serde_json::json!([1]),
    ] {
        assert_eq!(
            validate(&doc, &result, &serde_json::json!({"result": v}), "$"),
            Ok(())
        );
    }
}
