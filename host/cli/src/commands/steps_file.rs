//! The steps a local attempt starts with (docs/steps.md#local-runs): `onestep task run --steps
//! FILE` reads them from a file, `onestep replay --with-steps` from the execution's record.
//! Either way they are seeded into the attempt's in-memory [`MemorySteps`], so that the
//! handler's `step-load` finds them and does not run their work again; nothing is written to
//! a database.
//!
//! A steps file is one JSON object, in either of two shapes:
//! - `{"KEY": VALUE, …}`: each member is one step, its value any JSON;
//! - the output of `onestep steps ID --values --json` (the API's steps view: an object with
//!   `execution_id` and `items`, each item with `key` and `value`), so that one command's output
//!   can be piped into the other.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

use onestep_api::steps::StepsView;
use onestep_core::steps::{MemorySteps, StepError, validate};
use serde_json::Value;
use uuid::Uuid;

/// Steps to seed, as (key, value as JSON text), in order.
pub(crate) type Seed = Vec<(String, String)>;

/// Why a steps file was refused: where (`source`, and the step when one is at fault) and what.
#[derive(Debug)]
pub(crate) struct StepsFileError {
    /// The file's path, or `stdin`.
    source: String,
    /// What is wrong.
    message: String,
}

impl fmt::Display for StepsFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "--steps {}: {}", self.source, self.message)
    }
}

impl std::error::Error for StepsFileError {}

/// Reads `arg` (a path, or `-` for stdin) as a steps file.
pub(crate) fn read(arg: &str) -> Result<Seed, StepsFileError> {
    let (source, text) = if arg == "-" {
        let text = std::io::read_to_string(std::io::stdin()).map_err(|e| StepsFileError {
            source: "stdin".into(),
            message: format!("cannot read: {e}"),
        })?;
        ("stdin".to_owned(), text)
    } else {
        let text = std::fs::read_to_string(Path::new(arg)).map_err(|e| StepsFileError {
            source: arg.to_owned(),
            message: format!("cannot read: {e}"),
        })?;
        (arg.to_owned(), text)
    };
    parse(&text).map_err(|message| StepsFileError { source, message })
}

const SHAPES: &str = "a steps file is a JSON object of step key → recorded value, or the output \
    of `onestep steps ID --values --json`";

/// The steps of a steps file's text, checked as a store checks a save: the keys, each value
/// and the caps of one execution (docs/steps.md#caps). The error says what is wrong and where.
pub(crate) fn parse(text: &str) -> Result<Seed, String> {
    let value: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
    let Value::Object(members) = value else {
        return Err(format!("{SHAPES}; this is {}", kind_of(&value)));
    };
    let seed: Seed = if members.contains_key("execution_id") && members.contains_key("items") {
        // `onestep steps ID --values --json`.
        let view: StepsView = serde_json::from_value(Value::Object(members)).map_err(|e| {
            format!("read as the output of `onestep steps ID --values --json`: {e}")
        })?;
        let mut seed = Vec::with_capacity(view.items.len());
        for (i, item) in view.items.into_iter().enumerate() {
            let Some(value) = item.value else {
                return Err(format!(
                    "items[{i}] (step {:?}) has no value: write the file with `onestep steps \
                     ID --values --json` (steps whose values did not fit in its 4 MiB are left \
                     without one: add them with `--key K`)",
                    item.key
                ));
            };
            seed.push((item.key, value.to_string()));
        }
        seed
    } else {
        members
            .into_iter()
            .map(|(key, value)| (key, value.to_string()))
            .collect()
    };
    check(&seed).map_err(|(key, e)| format!("step {key:?}: {e}"))?;
    Ok(seed)
}

/// Checks `seed` against the rules of every store: each key and value, then the caps of one
/// execution; the first step refused and why.
fn check(seed: &Seed) -> Result<(), (String, StepError)> {
    let store = MemorySteps::new(Arc::new(onestep_core::time::SystemClock));
    let id = Uuid::nil();
    for (key, value) in seed {
        validate(key, value).map_err(|e| (key.clone(), e))?;
        store.seed(id, key, value).map_err(|e| (key.clone(), e))?;
    }
    Ok(())
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_object_is_key_to_value_in_order() {
        let seed =
            parse(r#"{"step-1": {"i": 1}, "step-0": [1, 2], "s": "x", "n": null}"#).expect("valid");
        assert_eq!(
            seed,
            vec![
                ("step-1".to_owned(), r#"{"i":1}"#.to_owned()),
                ("step-0".to_owned(), "[1,2]".to_owned()),
                ("s".to_owned(), r#""x""#.to_owned()),
                ("n".to_owned(), "null".to_owned()),
            ]
        );
        assert_eq!(parse("{}").expect("empty"), vec![]);
    }

    #[test]
    fn the_steps_command_output_is_read() {
        let text = r#"{"execution_id": "2a31b3a6-72c9-4ae3-8e8e-4d6f78c00f3a",
            "items": [
              {"key": "step-0", "bytes": 20, "saved_at": "2026-01-01T00:00:00.000000",
               "attempt": 1, "attempt_id": "2a31b3a6-72c9-4ae3-8e8e-4d6f78c00f3b",
               "value": {"i": 0, "attempt": 1}}
            ],
            "total_bytes": 20, "steps_kept": true, "values_omitted": 0}"#;
        assert_eq!(
            parse(text).expect("valid"),
            vec![("step-0".to_owned(), r#"{"i":0,"attempt":1}"#.to_owned())]
        );
        // Without --values: says which step and how to write the file.
        let without = text.replace(r#""value": {"i": 0, "attempt": 1}"#, r#""x": 1"#);
        let e = parse(&without).expect_err("no value");
        assert!(
            e.contains("items[0] (step \"step-0\") has no value") && e.contains("--values --json"),
            "{e}"
        );
        let e = parse(r#"{"execution_id": "nope", "items": []}"#).expect_err("bad view");
        assert!(e.contains("read as the output of `onestep steps"), "{e}");
    }

    #[test]
    fn bad_files_say_what_and_where() {
        let e = parse("{\"a\": 1,\n \"b\": }").expect_err("bad JSON");
        assert!(
            e.starts_with("not valid JSON") && e.contains("line 2"),
            "{e}"
        );
        let e = parse("[1, 2]").expect_err("array");
        assert!(
            e.contains("JSON object") && e.ends_with("this is an array"),
            "{e}"
        );
        let e = parse(r#"{"": 1}"#).expect_err("empty key");
        assert!(e.starts_with("step \"\": invalid step key"), "{e}");
        let long = format!(r#"{{"{}": 1}}"#, "k".repeat(256));
        let e = parse(&long).expect_err("long key");
        assert!(
            e.contains("invalid step key") && e.contains("256 bytes"),
            "{e}"
        );
        let big = format!(
            r#"{{"big": "{}"}}"#,
            "x".repeat(onestep_core::steps::MAX_STEP_BYTES)
        );
        let e = parse(&big).expect_err("too large");
        assert!(e.starts_with("step \"big\": step value of"), "{e}");
        let many: serde_json::Map<String, Value> = (0
            ..=onestep_core::steps::MAX_STEPS_PER_EXECUTION)
            .map(|i| (format!("k{i}"), Value::from(i)))
            .collect();
        let e = parse(&Value::Object(many).to_string()).expect_err("too many");
        assert!(
            e.starts_with("step \"k1000\": the execution already has 1000 steps"),
            "{e}"
        );
    }

    #[test]
    fn a_missing_file_is_named() {
        let e = read("/no/such/steps.json").expect_err("missing");
        let text = e.to_string();
        assert!(
            text.starts_with("--steps /no/such/steps.json: cannot read:"),
            "{text}"
        );
    }
}
