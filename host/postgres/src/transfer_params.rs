//! The bound arrays of `onestep copy`'s inserts on PostgreSQL ([`crate::transfer`]): one
//! array per column for each table's `INSERT … SELECT FROM unnest(…)`, and their element types.

use chrono::{DateTime, Utc};
use onestep_core::ExecutionError;
use onestep_core::transfer::{AttemptRow, DiagnosticsRow, ExecutionRow, TraceRow};
use serde_json::Value;
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use crate::errors::OpError;

pub(crate) fn out_of_range(what: &str, v: i64) -> OpError {
    OpError::Domain(ExecutionError::invalid(format!(
        "copy: {what} {v} does not fit PostgreSQL's INTEGER column"
    )))
}

pub(crate) fn json(v: Option<&Value>) -> Option<String> {
    v.map(crate::json_text::to_text)
}

pub(crate) type Params = Vec<Box<dyn ToSql + Sync + Send>>;

pub(crate) fn refs(p: &Params) -> Vec<&(dyn ToSql + Sync)> {
    p.iter()
        .map(|b| b.as_ref() as &(dyn ToSql + Sync))
        .collect()
}

/// The arrays of one page of rows; `priority` and `fairness_key` only when the target has them.
pub(crate) fn execution_params(rows: &[&ExecutionRow], scheduled: bool) -> Result<Params, OpError> {
    let s = |f: fn(&ExecutionRow) -> String| rows.iter().map(|r| f(r)).collect::<Vec<_>>();
    let os = |f: fn(&ExecutionRow) -> Option<String>| rows.iter().map(|r| f(r)).collect::<Vec<_>>();
    let ot = |f: fn(&ExecutionRow) -> Option<DateTime<Utc>>| {
        rows.iter().map(|r| f(r)).collect::<Vec<_>>()
    };
    let t = |f: fn(&ExecutionRow) -> DateTime<Utc>| rows.iter().map(|r| f(r)).collect::<Vec<_>>();
    let attempts = rows
        .iter()
        .map(|r| {
            i32::try_from(r.stored.attempts)
                .map_err(|_| out_of_range("attempts", r.stored.attempts))
        })
        .collect::<Result<Vec<i32>, _>>()?;
    let mut params: Params = vec![
        Box::new(rows.iter().map(|r| r.stored.id).collect::<Vec<Uuid>>()),
        Box::new(s(|r| r.stored.namespace.clone())),
        Box::new(s(|r| r.stored.task_name.clone())),
        Box::new(s(|r| r.stored.status.clone())),
        Box::new(os(|r| json(r.stored.payload.as_ref()))),
        Box::new(os(|r| json(r.stored.metadata.as_ref()))),
        Box::new(os(|r| json(r.stored.result.as_ref()))),
        Box::new(os(|r| json(r.stored.error.as_ref()))),
        Box::new(attempts),
        Box::new(t(|r| r.stored.available_at)),
        Box::new(ot(|r| r.stored.started_at)),
        Box::new(ot(|r| r.stored.finished_at)),
        Box::new(ot(|r| r.stored.cancel_requested_at)),
        Box::new(ot(|r| r.stored.expires_at)),
        Box::new(t(|r| r.stored.created_at)),
        Box::new(rows.iter().map(|r| r.stored.version).collect::<Vec<i64>>()),
    ];
    if scheduled {
        let priorities = rows
            .iter()
            .map(|r| {
                i16::try_from(r.stored.priority)
                    .map_err(|_| out_of_range("priority", r.stored.priority))
            })
            .collect::<Result<Vec<i16>, _>>()?;
        params.push(Box::new(priorities));
        params.push(Box::new(os(|r| r.stored.fairness_key.clone())));
    }
    params.extend::<Params>(vec![
        Box::new(os(|r| r.idempotency_key.clone())),
        Box::new(os(|r| r.submission_digest.clone())),
        Box::new(
            rows.iter()
                .map(|r| r.lease_token)
                .collect::<Vec<Option<Uuid>>>(),
        ),
        Box::new(ot(|r| r.lease_expires_at)),
        Box::new(os(|r| r.worker_id.clone())),
        Box::new(os(|r| r.cancel_reason.clone())),
        Box::new(t(|r| r.updated_at)),
    ]);
    Ok(params)
}

/// The array types of [`execution_params`]: the sixteen common columns, then (on tables with
/// them) `priority` and `fairness_key`, then the extra columns.
pub(crate) fn execution_types(scheduled: bool) -> Vec<&'static str> {
    let mut v = EXECUTION_TYPES[..16].to_vec();
    if scheduled {
        v.extend(["int2", "text"]);
    }
    v.extend(&EXECUTION_TYPES[16..]);
    v
}

pub(crate) const EXECUTION_TYPES: [&str; 23] = [
    "uuid",
    "text",
    "text",
    "text",
    "text",
    "text",
    "text",
    "text",
    "int4",
    "timestamptz",
    "timestamptz",
    "timestamptz",
    "timestamptz",
    "timestamptz",
    "timestamptz",
    "int8",
    "text",
    "text",
    "uuid",
    "timestamptz",
    "text",
    "text",
    "timestamptz",
];

pub(crate) fn attempt_params(rows: &[&AttemptRow]) -> Result<Params, OpError> {
    let nos = rows
        .iter()
        .map(|r| i32::try_from(r.attempt_no).map_err(|_| out_of_range("attempt_no", r.attempt_no)))
        .collect::<Result<Vec<i32>, _>>()?;
    Ok(vec![
        Box::new(rows.iter().map(|r| r.id).collect::<Vec<_>>()),
        Box::new(rows.iter().map(|r| r.execution_id).collect::<Vec<_>>()),
        Box::new(nos),
        Box::new(rows.iter().map(|r| r.lease_token).collect::<Vec<_>>()),
        Box::new(rows.iter().map(|r| r.worker_id.clone()).collect::<Vec<_>>()),
        Box::new(rows.iter().map(|r| r.status.clone()).collect::<Vec<_>>()),
        Box::new(
            rows.iter()
                .map(|r| json(r.error.as_ref()))
                .collect::<Vec<_>>(),
        ),
        Box::new(rows.iter().map(|r| r.started_at).collect::<Vec<_>>()),
        Box::new(rows.iter().map(|r| r.heartbeat_at).collect::<Vec<_>>()),
        Box::new(rows.iter().map(|r| r.finished_at).collect::<Vec<_>>()),
    ])
}

pub(crate) const ATTEMPT_TYPES: [&str; 10] = [
    "uuid",
    "uuid",
    "int4",
    "uuid",
    "text",
    "text",
    "text",
    "timestamptz",
    "timestamptz",
    "timestamptz",
];

pub(crate) fn diagnostics_params(rows: &[&DiagnosticsRow]) -> Params {
    let os =
        |f: fn(&DiagnosticsRow) -> Option<String>| rows.iter().map(|r| f(r)).collect::<Vec<_>>();
    let oi = |f: fn(&DiagnosticsRow) -> Option<i64>| rows.iter().map(|r| f(r)).collect::<Vec<_>>();
    vec![
        Box::new(rows.iter().map(|r| r.attempt_id).collect::<Vec<_>>()),
        Box::new(rows.iter().map(|r| r.execution_id).collect::<Vec<_>>()),
        Box::new(rows.iter().map(|r| r.is_final).collect::<Vec<_>>()),
        Box::new(os(|r| r.message.clone())),
        Box::new(oi(|r| r.progress_done)),
        Box::new(oi(|r| r.progress_total)),
        Box::new(os(|r| r.progress_note.clone())),
        Box::new(rows.iter().map(|r| r.progress_at).collect::<Vec<_>>()),
        Box::new(rows.iter().map(|r| r.log_lines).collect::<Vec<_>>()),
        Box::new(os(|r| r.log_tail.clone())),
        Box::new(os(|r| r.trap_kind.clone())),
        Box::new(os(|r| r.component_digest.clone())),
        Box::new(oi(|r| r.fuel_consumed)),
        Box::new(oi(|r| r.peak_memory_bytes)),
        Box::new(rows.iter().map(|r| r.updated_at).collect::<Vec<_>>()),
    ]
}

pub(crate) const DIAGNOSTICS_TYPES: [&str; 15] = [
    "uuid",
    "uuid",
    "bool",
    "text",
    "int8",
    "int8",
    "text",
    "timestamptz",
    "int8",
    "text",
    "text",
    "text",
    "int8",
    "int8",
    "timestamptz",
];

pub(crate) fn trace_params(rows: &[&TraceRow]) -> Params {
    vec![
        Box::new(rows.iter().map(|r| r.execution_id).collect::<Vec<_>>()),
        Box::new(
            rows.iter()
                .map(|r| r.traceparent.clone())
                .collect::<Vec<_>>(),
        ),
        Box::new(rows.iter().map(|r| r.created_at).collect::<Vec<_>>()),
    ]
}

pub(crate) const TRACE_TYPES: [&str; 3] = ["uuid", "text", "timestamptz"];
