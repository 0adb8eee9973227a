//! The events of several executions on one connection (docs/http-api.md#stream-of-several-executions):
//! `GET /v1/executions/events?ids=A,B,…` as server-sent events — each execution's `status`
//! changes and `progress` reports, and its `end` once it is terminal — resumable with
//! `Last-Event-ID`, closed once every listed execution has ended. The dashboard's list page
//! follows its live rows with it (docs/ui.md#list).
//!
//! **Reads.** Nothing of its own: each listed execution is followed through the process's
//! [`StreamHub`] feed of that execution — the same feed the per-execution streams share — which
//! sleeps on the one [`crate::wait::WaitHub`] poller until the execution's version moves. So the
//! database work grows with the number of distinct executions followed, never with the number of
//! open streams: a hundred dashboards on the same page cost what one does.
//!
//! **Namespaces.** Every feed reads through the caller's namespace-scoped client: an id of
//! another namespace reads as absent, exactly as an unknown id, and yields no event at all.
//!
//! **Events and their ids.** Per execution, in order: `progress` and `status` as the
//! per-execution stream computes them ([`next_event`], without its `attempt` and `log` events),
//! then `end`. Every event's data carries `execution_id`, and every event's id is the position of
//! *every* listed execution after it ([`Marks`], one [`Mark`] per id, in the order of `ids`), so a
//! client reconnecting with `Last-Event-ID` and the same `ids` resumes exactly there.
//!
//! **Bounds.** One stream permit of `api.max_streams` per connection whatever the number of ids,
//! at most [`MAX_IDS`] ids, closed after `api.max_stream_s`, a keep-alive comment every
//! [`KEEP_ALIVE`], and closed when the process starts shutting down.

use std::collections::HashSet;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, watch};
use utoipa::IntoParams;
use uuid::Uuid;

use crate::error::{ApiError, ErrorBody};
use crate::extract::Tenant;
use crate::openapi::V1Errors;
use crate::state::ApiState;
use crate::stream::{
    KEEP_ALIVE, Position, RETRY_HINT, Snapshot, StreamEvent, end_event, next_event,
};
use crate::wait::WaitHub;

/// The most execution ids one stream follows (the largest page of `GET /v1/executions`).
pub const MAX_IDS: usize = 200;
/// The longest position of one execution in a `Last-Event-ID` (`VERSION.ATTEMPT.AT_US`).
const MAX_MARK_BYTES: usize = 48;

/// How far a stream has shown one of its executions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Shown up to this version (`-1`: nothing yet) and this progress report (attempt 0: none).
    At {
        /// The version of the last `status` event.
        version: i64,
        /// The attempt of the last `progress` event (0: none).
        progress_attempt: u32,
        /// When that report was made, in microseconds since the Unix epoch.
        progress_at_us: i64,
    },
    /// Its `end` was sent: nothing follows.
    Ended,
}

impl Mark {
    /// Nothing shown.
    pub const START: Mark = Mark::At {
        version: -1,
        progress_attempt: 0,
        progress_at_us: i64::MIN,
    };
}

impl std::fmt::Display for Mark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mark::Ended => f.write_str("e"),
            Mark::At {
                version,
                progress_attempt: 0,
                ..
            } => write!(f, "{version}"),
            Mark::At {
                version,
                progress_attempt,
                progress_at_us,
            } => write!(f, "{version}.{progress_attempt}.{progress_at_us}"),
        }
    }
}

impl std::str::FromStr for Mark {
    type Err = ();

    /// `e`, `VERSION` (no progress shown) or `VERSION.ATTEMPT.AT_US`.
    fn from_str(text: &str) -> Result<Self, ()> {
        let text = text.trim();
        if text.len() > MAX_MARK_BYTES {
            return Err(());
        }
        if text == "e" {
            return Ok(Mark::Ended);
        }
        let parts: Vec<&str> = text.split('.').collect();
        let mark = match parts.as_slice() {
            [v] => Mark::At {
                version: v.parse().map_err(|_| ())?,
                progress_attempt: 0,
                progress_at_us: i64::MIN,
            },
            [v, a, t] => Mark::At {
                version: v.parse().map_err(|_| ())?,
                progress_attempt: a.parse().map_err(|_| ())?,
                progress_at_us: t.parse().map_err(|_| ())?,
            },
            _ => return Err(()),
        };
        match mark {
            Mark::At { version, .. } if version < -1 => Err(()),
            _ => Ok(mark),
        }
    }
}

/// The positions of every execution of a stream, in the order of its `ids`: the id of each
/// event (`MARK,MARK,…`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marks(pub Vec<Mark>);

impl std::fmt::Display for Marks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, m) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{m}")?;
        }
        Ok(())
    }
}

impl Marks {
    /// Parses a `Last-Event-ID` for a stream of `count` ids.
    pub fn parse(text: &str, count: usize) -> Result<Marks, String> {
        let refused = |why: &str| {
            let shown: String = text.chars().take(128).collect();
            format!(
                "Last-Event-ID must be the id of an event of this stream (one position per id of \
                 `ids`, in the same order, separated by commas): {why}, got '{shown}'"
            )
        };
        if text.len() > count.saturating_mul(MAX_MARK_BYTES + 1) {
            return Err(refused("it is too long"));
        }
        let parts: Vec<&str> = text.split(',').collect();
        if parts.len() != count {
            return Err(refused(&format!(
                "it holds {} positions for {count} ids",
                parts.len()
            )));
        }
        parts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                p.parse::<Mark>()
                    .map_err(|()| refused(&format!("position {} is malformed", i + 1)))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Marks)
    }
}

/// The execution ids of `ids=` (comma-separated UUIDs, 1 to [`MAX_IDS`], no repeats), refused
/// with a message naming the first fault.
pub fn parse_ids(raw: Option<&str>) -> Result<Vec<Uuid>, String> {
    let wanted = format!("1 to {MAX_IDS} execution ids (UUIDs) separated by commas");
    let raw = raw.map(str::trim).unwrap_or_default();
    if raw.is_empty() {
        return Err(format!("ids is required: {wanted}"));
    }
    let items: Vec<&str> = raw.split(',').collect();
    if items.len() > MAX_IDS {
        return Err(format!(
            "ids lists {} items; at most {MAX_IDS} ({wanted})",
            items.len()
        ));
    }
    let mut seen = HashSet::with_capacity(items.len());
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let item = item.trim();
        if item.is_empty() {
            return Err(format!("ids item {} is empty ({wanted})", i + 1));
        }
        let id = Uuid::try_parse(item).map_err(|_| {
            let shown: String = item.chars().take(64).collect();
            format!(
                "ids item {} is not an execution id (UUID): '{}'",
                i + 1,
                shown.escape_debug()
            )
        })?;
        if !seen.insert(id) {
            return Err(format!("ids lists {id} twice"));
        }
        out.push(id);
    }
    Ok(out)
}

/// The next event of execution `id` after `mark` in snapshot `s`, and the mark after it: its
/// `progress` and `status` events as the per-execution stream has them, then `end` once it is
/// terminal. `None` when `s` holds nothing more (or the execution does not exist).
pub fn next_of(id: Uuid, s: &Snapshot, mark: &Mark) -> Option<(StreamEvent, Mark)> {
    let Mark::At {
        version,
        progress_attempt,
        progress_at_us,
    } = *mark
    else {
        return None;
    };
    // A position past every attempt step and log line: only progress and status remain.
    let p = Position {
        version,
        attempt_step: u64::MAX,
        log_attempt: u32::MAX,
        log_seq: u64::MAX,
        progress_attempt,
        progress_at_us,
    };
    if let Some((event, next)) = next_event(s, &p) {
        let next = Mark::At {
            version: next.version,
            progress_attempt: next.progress_attempt,
            progress_at_us: next.progress_at_us,
        };
        return Some((event, next));
    }
    s.execution.as_ref().filter(|e| e.terminal())?;
    end_event(id, s).map(|end| (end, Mark::Ended))
}

/// An event's data with the execution it is about.
fn data_of(id: Uuid, event: &StreamEvent) -> Result<Value, serde_json::Error> {
    let mut data = match event {
        StreamEvent::Status(v) => serde_json::to_value(v),
        StreamEvent::Attempt(v) => serde_json::to_value(v),
        StreamEvent::Progress(v) => serde_json::to_value(v),
        StreamEvent::Log(v) => serde_json::to_value(v),
        StreamEvent::End(v) => serde_json::to_value(v),
    }?;
    if let Value::Object(map) = &mut data {
        map.insert("execution_id".into(), Value::String(id.to_string()));
    }
    Ok(data)
}

type Feed = watch::Receiver<Option<Arc<Snapshot>>>;

/// What one open stream holds.
struct Many {
    ids: Vec<Uuid>,
    feeds: Vec<Feed>,
    /// Whether each feed may still publish (its reader has not ended).
    open: Vec<bool>,
    marks: Marks,
    /// Where the next scan starts (round robin, so that a busy execution starves none).
    cursor: usize,
    first: bool,
    deadline: tokio::time::Instant,
    waits: WaitHub,
    _permit: OwnedSemaphorePermit,
}

impl Many {
    /// The next event of any execution, scanning from the cursor.
    fn next(&mut self) -> Option<(usize, StreamEvent)> {
        let n = self.ids.len();
        for k in 0..n {
            let i = (self.cursor + k) % n;
            let Some(snapshot) = self.feeds[i].borrow_and_update().clone() else {
                continue;
            };
            if let Some((event, mark)) = next_of(self.ids[i], &snapshot, &self.marks.0[i]) {
                self.marks.0[i] = mark;
                self.cursor = (i + 1) % n;
                return Some((i, event));
            }
        }
        None
    }

    /// Whether nothing can follow for any execution: each has ended or does not exist.
    fn finished(&self) -> bool {
        self.feeds.iter().zip(&self.marks.0).all(|(feed, mark)| {
            *mark == Mark::Ended
                || feed
                    .borrow()
                    .as_ref()
                    .is_some_and(|s| s.execution.is_none())
        })
    }

    fn sse(&mut self, i: usize, event: &StreamEvent) -> Result<Event, axum::Error> {
        let data = data_of(self.ids[i], event).map_err(axum::Error::new)?;
        let sse = Event::default()
            .event(event.name())
            .json_data(data)?
            .id(self.marks.to_string());
        Ok(if std::mem::take(&mut self.first) {
            sse.retry(RETRY_HINT)
        } else {
            sse
        })
    }
}

fn follow(many: Many) -> impl Stream<Item = Result<Event, axum::Error>> {
    futures::stream::unfold(many, |mut m| async move {
        loop {
            if let Some((i, event)) = m.next() {
                let sse = m.sse(i, &event);
                return Some((sse, m));
            }
            if m.finished() {
                return None;
            }
            let waiting: Vec<_> = m
                .feeds
                .iter_mut()
                .zip(&m.open)
                .enumerate()
                .filter(|(_, (_, open))| **open)
                .map(|(i, (feed, _))| Box::pin(async move { (i, feed.changed().await.is_ok()) }))
                .collect();
            if waiting.is_empty() {
                // Every reader ended without the executions ending: the process is closing.
                return None;
            }
            let woke = tokio::select! {
                ((i, published), _, _) = futures::future::select_all(waiting) => Some((i, published)),
                () = tokio::time::sleep_until(m.deadline) => None,
                () = m.waits.closed() => None,
            };
            let (i, published) = woke?;
            if !published {
                m.open[i] = false;
            }
        }
    })
}

/// Query of `GET /v1/executions/events`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ManyParams {
    /// The executions to follow: 1 to 200 execution ids (UUIDs) separated by commas, each once.
    pub ids: Option<String>,
}

/// The events of several executions on one connection, as server-sent events
/// (docs/http-api.md#stream-of-several-executions): per execution, `status` (the execution view,
/// each time its version moves), `progress`, and `end` once it is terminal; each event's data
/// carries `execution_id`. The server closes the stream once every listed execution has ended
/// (an id that is unknown in the caller's namespace yields nothing and counts as ended). Every
/// event has an id: reconnect with the same `ids` and the last id as `Last-Event-ID` to resume
/// without loss or repetition.
#[utoipa::path(
    get, path = "/v1/executions/events", tag = "executions",
    params(
        ManyParams,
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event (the `id` of an event of a stream of the same `ids`); or one version per id, separated by commas, to skip what the caller has already read"),
    ),
    responses(
        (status = 200, description = "A `text/event-stream` of `status`, `progress` and `end` events", content_type = "text/event-stream", body = String),
        (status = 422, description = "Missing or malformed `ids`, or a malformed Last-Event-ID", body = ErrorBody),
        (status = 429, description = "`too_many_streams`: the server's `api.max_streams` streams are open", body = ErrorBody),
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn stream_many_events(
    State(state): State<ApiState>,
    Tenant(client): Tenant,
    query: Result<Query<ManyParams>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Query(params) =
        query.map_err(|_| ApiError::invalid("the query string could not be parsed"))?;
    let ids = parse_ids(params.ids.as_deref()).map_err(ApiError::invalid)?;
    let marks = match headers.get("last-event-id") {
        None => Marks(vec![Mark::START; ids.len()]),
        Some(v) => {
            let text = v.to_str().map_err(|_| {
                ApiError::invalid("Last-Event-ID must be the id of an event of this stream")
            })?;
            Marks::parse(text, ids.len()).map_err(ApiError::invalid)?
        }
    };
    let hub = state.streams();
    let permit = hub.permit()?;
    let feeds: Vec<Feed> = ids
        .iter()
        .map(|id| hub.subscribe(&client, *id, state.waits()))
        .collect();
    let stream = follow(Many {
        open: vec![true; ids.len()],
        ids,
        feeds,
        marks,
        cursor: 0,
        first: true,
        deadline: tokio::time::Instant::now() + hub.max_duration(),
        waits: state.waits().clone(),
        _permit: permit,
    });
    Ok(Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;
    use onestep_core::{ExecutionStatus, Limits, ports::ExecutionStore};
    use onestep_testkit::builders::prepared;
    use onestep_testkit::{ManualClock, MemoryStore};

    #[test]
    fn ids_are_one_to_200_distinct_uuids() {
        let a = Uuid::new_v4();
        let b = Uuid::new_v4();
        assert_eq!(parse_ids(Some(&format!("{a}, {b}"))), Ok(vec![a, b]));
        let many: Vec<String> = (0..201).map(|_| Uuid::new_v4().to_string()).collect();
        assert_eq!(
            parse_ids(Some(&many[..200].join(","))).map(|v| v.len()),
            Ok(200)
        );
        for (raw, wanted) in [
            (None, "ids is required"),
            (Some(String::new()), "ids is required"),
            (Some(" ".to_owned()), "ids is required"),
            (Some(many.join(",")), "ids lists 201 items; at most 200"),
            (Some(format!("{a},,{b}")), "ids item 2 is empty"),
            (
                Some(format!("{a},nope")),
                "ids item 2 is not an execution id (UUID): 'nope'",
            ),
            (
                Some(format!("{a},{b},{a}")),
                &format!("ids lists {a} twice"),
            ),
        ] {
            let e = parse_ids(raw.as_deref()).expect_err(wanted);
            assert!(e.contains(wanted), "{raw:?}: {e}");
        }
    }

    #[test]
    fn event_ids_hold_one_position_per_id() {
        let marks = Marks(vec![
            Mark::START,
            Mark::At {
                version: 4,
                progress_attempt: 2,
                progress_at_us: 1_800_000_000_123_456,
            },
            Mark::Ended,
            Mark::At {
                version: 7,
                progress_attempt: 0,
                progress_at_us: i64::MIN,
            },
        ]);
        let text = marks.to_string();
        assert_eq!(text, "-1,4.2.1800000000123456,e,7");
        assert_eq!(Marks::parse(&text, 4), Ok(marks));
        // A client that read the executions can start from their versions.
        assert_eq!(
            Marks::parse("3,0", 2).map(|m| m.0[0]),
            Ok(Mark::At {
                version: 3,
                progress_attempt: 0,
                progress_at_us: i64::MIN
            })
        );
        for (bad, count) in [
            ("1,2", 3),
            ("1,2,3", 2),
            ("x", 1),
            ("-2", 1),
            ("1.2", 1),
            ("1.2.3.4", 1),
            ("", 1),
            ("E", 1),
        ] {
            let e = Marks::parse(bad, count).expect_err(bad);
            assert!(e.contains("Last-Event-ID"), "{bad}: {e}");
        }
        let long = "9".repeat(60);
        assert!(Marks::parse(&long, 1).is_err());
    }

    #[tokio::test]
    async fn each_execution_shows_status_then_end_and_an_unknown_one_nothing() {
        let store = MemoryStore::new(Arc::new(ManualClock::default()), Limits::default());
        let e = store
            .submit(prepared("ns", "t", serde_json::json!(1)))
            .await
            .expect("submit");
        let mut e = store.get("ns", e.id).await.expect("get").expect("found");
        let queued = Snapshot {
            execution: Some(e.clone()),
            ..Snapshot::default()
        };
        let (event, mark) = next_of(e.id, &queued, &Mark::START).expect("status");
        assert_eq!(event.name(), "status");
        assert_eq!(
            mark,
            Mark::At {
                version: e.version,
                progress_attempt: 0,
                progress_at_us: i64::MIN
            }
        );
        assert!(next_of(e.id, &queued, &mark).is_none());
        e.status = ExecutionStatus::Cancelled;
        e.version += 1;
        let done = Snapshot {
            execution: Some(e.clone()),
            ..Snapshot::default()
        };
        let (event, mark) = next_of(e.id, &done, &mark).expect("status");
        assert_eq!(event.name(), "status");
        let (event, mark) = next_of(e.id, &done, &mark).expect("end");
        assert_eq!(event.name(), "end");
        assert_eq!(mark, Mark::Ended);
        assert!(next_of(e.id, &done, &mark).is_none());
        let data = data_of(e.id, &event).expect("json");
        assert_eq!(data["execution_id"], e.id.to_string());
        // Absent (unknown, another namespace's, purged): nothing at all.
        assert!(next_of(e.id, &Snapshot::default(), &Mark::START).is_none());
    }
}
