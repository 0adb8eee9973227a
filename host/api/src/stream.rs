//! The event stream of one execution (docs/http-api.md#stream): `GET /v1/executions/{id}/events`
//! as server-sent events — its status changes, its attempts starting and ending, their progress
//! and log lines — resumable with `Last-Event-ID`, ending with an `end` event once the execution
//! is terminal.
//!
//! **Reads.** One [`StreamHub`] per API process. Every stream of one execution shares one *feed*:
//! a task that reads the execution, its attempts and the log tails that grew, publishes that
//! [`Snapshot`], and sleeps on the process's [`WaitHub`] until the execution's version moves
//! (one `versions` statement per tick for every waited execution, however many streams). A
//! heartbeat persists a running attempt's progress and log lines without moving the version, so
//! while the execution holds a lease the feed also re-reads every [`LIVE_POLL`]. The database
//! work grows with the number of streamed executions, not with the number of streams.
//!
//! **Events and their ids.** A stream turns each snapshot into events by comparing it with its
//! [`Position`]: how far it has shown the execution's version, the attempts' starts and ends,
//! the log lines (attempt, `seq`) and the progress reports (attempt, report time). The next event
//! is always computed from the snapshot and the position alone ([`next_event`]), so a stream
//! buffers one event, and every event's id is the position after it. A client reconnecting with
//! `Last-Event-ID` resumes at exactly that position: no event it saw comes again, none it did
//! not see is skipped (a log line the 64 KiB tail no longer keeps is reported as `skipped`).
//!
//! **Bounds.** At most `api.max_streams` streams per process (429 `too_many_streams` above), each
//! closed after `api.max_stream_s` (the client resumes), a keep-alive comment every
//! [`KEEP_ALIVE`], and every stream closed when the process starts shutting down.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use onestep_core::diagnostics::{AttemptRecord, LogTail};
use onestep_core::timefmt::utc_isoformat;
use onestep_core::{Execution, ExecutionClient, ExecutionStatus};
use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::attempts::ProgressView;
use crate::error::{ApiError, ErrorBody, code};
use crate::extract::{ExecutionId, Tenant};
use crate::openapi::{NotFoundErrors, V1Errors};
use crate::state::ApiState;
use crate::view::{ErrorObjectView, ExecutionView};
use crate::wait::WaitHub;

/// The interval of the keep-alive comment a quiet stream sends.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How often a feed re-reads an execution that holds a lease (its progress and log lines are
/// persisted by heartbeats, which do not move the version).
pub const LIVE_POLL: Duration = Duration::from_secs(1);
/// How long a feed sleeps on an execution without a lease before reading it again anyway.
const IDLE_POLL: Duration = Duration::from_secs(30);
/// The pause after a failed read before the feed reads again.
const READ_RETRY: Duration = Duration::from_secs(1);
/// The reconnection delay the stream's first event suggests to clients (`retry:`).
pub const RETRY_HINT: Duration = Duration::from_secs(1);
/// The longest `Last-Event-ID` accepted (an id this server sent is under 100 bytes).
pub const MAX_EVENT_ID_BYTES: usize = 128;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What one read of an execution found.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// The execution; `None` once it no longer exists (purged).
    pub execution: Option<Execution>,
    /// Its attempts, oldest first, with their diagnostics.
    pub attempts: Vec<AttemptRecord>,
    /// The kept log lines of each attempt, in the order of `attempts` (`None`: none stored).
    pub logs: Vec<Option<LogTail>>,
}

impl Snapshot {
    /// Whether no event can follow the ones this snapshot gives: the execution is terminal or
    /// gone.
    fn finished(&self) -> bool {
        self.execution.as_ref().is_none_or(Execution::terminal)
    }

    /// Whether a worker holds the execution's lease (its diagnostics can change without a new
    /// version).
    fn leased(&self) -> bool {
        self.execution.as_ref().is_some_and(|e| {
            matches!(
                e.status,
                ExecutionStatus::Running | ExecutionStatus::CancelRequested
            )
        })
    }
}

/// How far a stream has shown an execution; every event's id is the position after it
/// (`VERSION.ATTEMPT_STEP.LOG_ATTEMPT.LOG_SEQ.PROGRESS_ATTEMPT.PROGRESS_AT_US`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// The execution version of the last `status` event (-1: none yet).
    pub version: i64,
    /// The last `attempt` event: `2n - 1` when attempt `n` started, `2n` when it ended (0: none).
    pub attempt_step: u64,
    /// The attempt of the last `log` event (0: none).
    pub log_attempt: u32,
    /// The `seq` of the last `log` event within `log_attempt`.
    pub log_seq: u64,
    /// The attempt of the last `progress` event (0: none).
    pub progress_attempt: u32,
    /// When that report was made, in microseconds since the Unix epoch.
    pub progress_at_us: i64,
}

impl Position {
    /// The position of a new stream: nothing shown.
    pub const START: Position = Position {
        version: -1,
        attempt_step: 0,
        log_attempt: 0,
        log_seq: 0,
        progress_attempt: 0,
        progress_at_us: i64::MIN,
    };
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}.{}.{}.{}.{}.{}",
            self.version,
            self.attempt_step,
            self.log_attempt,
            self.log_seq,
            self.progress_attempt,
            self.progress_at_us
        )
    }
}

impl std::str::FromStr for Position {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let refused = || {
            let shown: String = text.chars().take(MAX_EVENT_ID_BYTES).collect();
            format!(
                "Last-Event-ID must be the id of an event of this stream (six integers separated \
                 by dots), got '{shown}'"
            )
        };
        if text.len() > MAX_EVENT_ID_BYTES {
            return Err(refused());
        }
        let parts: Vec<&str> = text.trim().split('.').collect();
        let [v, a, la, ls, pa, pt] = parts.as_slice() else {
            return Err(refused());
        };
        let p = Position {
            version: v.parse().map_err(|_| refused())?,
            attempt_step: a.parse().map_err(|_| refused())?,
            log_attempt: la.parse().map_err(|_| refused())?,
            log_seq: ls.parse().map_err(|_| refused())?,
            progress_attempt: pa.parse().map_err(|_| refused())?,
            progress_at_us: pt.parse().map_err(|_| refused())?,
        };
        if p.version < -1 {
            return Err(refused());
        }
        Ok(p)
    }
}

/// `attempt` event: an attempt started (`status: running`) or ended (its final status).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AttemptEventView {
    /// 1-based attempt number.
    pub attempt: u32,
    /// `running` when it started; else `succeeded`, `retrying`, `failed`, `cancelled` or
    /// `lease_lost`.
    pub status: String,
    /// When it started or ended (UTC, ISO 8601).
    pub at: String,
    /// The worker that held the lease.
    pub worker_id: String,
    /// The attempt's error object (an ended attempt).
    pub error: Option<ErrorObjectView>,
    /// The handler's error message (an ended attempt; at most 8 KiB).
    pub message: Option<String>,
    /// The trap kind (an ended attempt).
    pub trap_kind: Option<String>,
}

/// `progress` event: a new progress report of an attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProgressEventView {
    /// The attempt that reported it.
    pub attempt: u32,
    /// The report.
    #[serde(flatten)]
    pub progress: ProgressView,
}

/// `log` event: one log line of an attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LogEventView {
    /// The attempt that wrote it.
    pub attempt: u32,
    /// Position among all lines of the attempt (1-based).
    pub seq: u64,
    /// When the handler wrote it.
    pub at: String,
    /// `error`, `warn`, `info`, `debug`, `trace`, `stdout` or `stderr`.
    pub level: String,
    /// The text (at most 4 KiB).
    pub message: String,
    /// Lines of this attempt just before this one that the stream never showed because the
    /// 64 KiB tail no longer keeps them (usually 0).
    pub skipped: u64,
}

/// `end` event: nothing follows; the server closes the stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct EndView {
    /// The execution id.
    pub execution_id: Uuid,
    /// `terminal` (the execution reached `status`) or `not_found` (it no longer exists).
    pub reason: String,
    /// The terminal status (`null` for `not_found`).
    pub status: Option<String>,
}

/// One event of the stream.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// The execution as read after its version moved.
    Status(Box<ExecutionView>),
    /// An attempt started or ended.
    Attempt(AttemptEventView),
    /// A new progress report.
    Progress(ProgressEventView),
    /// A log line.
    Log(LogEventView),
    /// The last event.
    End(EndView),
}

impl StreamEvent {
    /// The SSE `event:` name.
    pub fn name(&self) -> &'static str {
        match self {
            StreamEvent::Status(_) => "status",
            StreamEvent::Attempt(_) => "attempt",
            StreamEvent::Progress(_) => "progress",
            StreamEvent::Log(_) => "log",
            StreamEvent::End(_) => "end",
        }
    }

    fn to_sse(&self, id: Option<Position>, first: bool) -> Result<Event, axum::Error> {
        let event = Event::default().event(self.name());
        let event = match self {
            StreamEvent::Status(v) => event.json_data(v),
            StreamEvent::Attempt(v) => event.json_data(v),
            StreamEvent::Progress(v) => event.json_data(v),
            StreamEvent::Log(v) => event.json_data(v),
            StreamEvent::End(v) => event.json_data(v),
        }?;
        let event = match id {
            Some(id) => event.id(id.to_string()),
            None => event,
        };
        Ok(if first {
            event.retry(RETRY_HINT)
        } else {
            event
        })
    }
}

fn started_step(n: u32) -> u64 {
    (2 * u64::from(n)).saturating_sub(1)
}

fn ended_step(n: u32) -> u64 {
    2 * u64::from(n)
}

fn attempt_event(a: &AttemptRecord, ended: bool) -> AttemptEventView {
    let d = a.diagnostics.as_ref().filter(|_| ended);
    AttemptEventView {
        attempt: a.attempt_no,
        status: if ended {
            a.status.clone()
        } else {
            "running".into()
        },
        at: utc_isoformat(if ended {
            a.finished_at.as_ref().unwrap_or(&a.heartbeat_at)
        } else {
            &a.started_at
        }),
        worker_id: a.worker_id.clone(),
        error: a
            .error
            .as_ref()
            .filter(|_| ended)
            .map(ErrorObjectView::from),
        message: d.and_then(|d| d.message.clone()),
        trap_kind: d.and_then(|d| d.facts.trap_kind.clone()),
    }
}

/// The execution view a `status` event carries: `GET /v1/executions/{id}`'s, with the newest
/// attempt's progress while a worker holds the lease.
fn status_view(s: &Snapshot, e: &Execution) -> ExecutionView {
    let mut view = ExecutionView::from(e);
    if s.leased() {
        view.progress = s
            .attempts
            .last()
            .and_then(|a| a.diagnostics.as_ref())
            .and_then(|d| d.progress.as_ref())
            .map(ProgressView::from);
    }
    view
}

/// The event after `p` in snapshot `s` and the position after it; `None` when `s` holds nothing
/// past `p`. Per attempt, oldest first: its start, its log lines, its progress, its end; then
/// the execution's status when its version moved.
pub fn next_event(s: &Snapshot, p: &Position) -> Option<(StreamEvent, Position)> {
    for (a, tail) in s.attempts.iter().zip(&s.logs) {
        let n = a.attempt_no;
        if p.attempt_step < started_step(n) {
            let next = Position {
                attempt_step: started_step(n),
                ..*p
            };
            return Some((StreamEvent::Attempt(attempt_event(a, false)), next));
        }
        if (n, u64::MAX) > (p.log_attempt, p.log_seq) {
            let after = if n == p.log_attempt { p.log_seq } else { 0 };
            if let Some(line) = tail
                .as_ref()
                .and_then(|t| t.lines.iter().find(|l| l.seq > after))
            {
                let next = Position {
                    log_attempt: n,
                    log_seq: line.seq,
                    ..*p
                };
                let event = LogEventView {
                    attempt: n,
                    seq: line.seq,
                    at: utc_isoformat(&line.at),
                    level: line.level.clone(),
                    message: line.message.clone(),
                    skipped: line.seq.saturating_sub(after).saturating_sub(1),
                };
                return Some((StreamEvent::Log(event), next));
            }
        }
        if let Some(progress) = a.diagnostics.as_ref().and_then(|d| d.progress.as_ref()) {
            let at = progress.at.timestamp_micros();
            if (n, at) > (p.progress_attempt, p.progress_at_us) {
                let next = Position {
                    progress_attempt: n,
                    progress_at_us: at,
                    ..*p
                };
                let event = ProgressEventView {
                    attempt: n,
                    progress: ProgressView::from(progress),
                };
                return Some((StreamEvent::Progress(event), next));
            }
        }
        if a.status != "running" && p.attempt_step < ended_step(n) {
            let next = Position {
                attempt_step: ended_step(n),
                ..*p
            };
            return Some((StreamEvent::Attempt(attempt_event(a, true)), next));
        }
    }
    let e = s.execution.as_ref()?;
    (e.version > p.version).then(|| {
        let next = Position {
            version: e.version,
            ..*p
        };
        (StreamEvent::Status(Box::new(status_view(s, e))), next)
    })
}

/// The `end` event once `s` is terminal or gone (after every [`next_event`]).
pub fn end_event(id: Uuid, s: &Snapshot) -> Option<StreamEvent> {
    if !s.finished() {
        return None;
    }
    let status = s.execution.as_ref().map(|e| e.status.as_str().to_owned());
    Some(StreamEvent::End(EndView {
        execution_id: id,
        reason: if status.is_some() {
            "terminal".into()
        } else {
            "not_found".into()
        },
        status,
    }))
}

type Feed = watch::Sender<Option<Arc<Snapshot>>>;

/// The streams of one API process: their permits and the shared feeds.
#[derive(Clone)]
pub struct StreamHub {
    inner: Arc<HubInner>,
}

struct HubInner {
    /// One feed per streamed execution (keyed by namespace and id), with its generation.
    feeds: Mutex<HashMap<(String, Uuid), (u64, Feed)>>,
    generation: AtomicU64,
    permits: Arc<Semaphore>,
    max_streams: usize,
    max_duration: Duration,
    live_poll: Duration,
}

impl std::fmt::Debug for StreamHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamHub")
            .field("streams", &self.streams())
            .field("feeds", &self.feeds())
            .field("max_streams", &self.inner.max_streams)
            .finish_non_exhaustive()
    }
}

impl StreamHub {
    /// A hub allowing `max_streams` open streams, each for at most `max_duration`, re-reading
    /// leased executions every `live_poll`.
    pub fn new(max_streams: usize, max_duration: Duration, live_poll: Duration) -> Self {
        StreamHub {
            inner: Arc::new(HubInner {
                feeds: Mutex::new(HashMap::new()),
                generation: AtomicU64::new(0),
                permits: Arc::new(Semaphore::new(max_streams.min(Semaphore::MAX_PERMITS))),
                max_streams,
                max_duration,
                live_poll: live_poll.max(Duration::from_millis(1)),
            }),
        }
    }

    /// Streams open now.
    pub fn streams(&self) -> usize {
        self.inner
            .max_streams
            .min(Semaphore::MAX_PERMITS)
            .saturating_sub(self.inner.permits.available_permits())
    }

    /// Executions being read for streams now.
    pub fn feeds(&self) -> usize {
        lock(&self.inner.feeds).len()
    }

    /// How long a stream stays open at most (`api.max_stream_s`).
    pub(crate) fn max_duration(&self) -> Duration {
        self.inner.max_duration
    }

    /// A permit for one more stream, or 429 `too_many_streams`.
    pub(crate) fn permit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        Arc::clone(&self.inner.permits)
            .try_acquire_owned()
            .map_err(|_| {
                let message = if self.inner.max_streams == 0 {
                    "event streams are turned off on this server (api.max_streams: 0)".to_owned()
                } else {
                    format!(
                        "this server already has {} event streams open (api.max_streams); \
                         retry later",
                        self.inner.max_streams
                    )
                };
                ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    code::TOO_MANY_STREAMS,
                    message,
                )
            })
    }

    /// The snapshots of execution `id` as `client` reads it: the feed's, started when it is
    /// the first stream of that execution.
    pub(crate) fn subscribe(
        &self,
        client: &ExecutionClient,
        id: Uuid,
        waits: &WaitHub,
    ) -> watch::Receiver<Option<Arc<Snapshot>>> {
        let key = (client.namespace().to_owned(), id);
        let mut feeds = lock(&self.inner.feeds);
        if let Some((_, feed)) = feeds.get(&key) {
            return feed.subscribe();
        }
        let (tx, rx) = watch::channel(None);
        let generation = self.inner.generation.fetch_add(1, Ordering::Relaxed);
        feeds.insert(key.clone(), (generation, tx.clone()));
        tokio::spawn(feed(
            Arc::downgrade(&self.inner),
            key,
            generation,
            tx,
            client.clone(),
            waits.clone(),
        ));
        rx
    }
}

/// One execution's feed: reads, publishes and sleeps until the execution is terminal or gone,
/// no stream follows it any more, or the process shuts down.
async fn feed(
    hub: Weak<HubInner>,
    key: (String, Uuid),
    generation: u64,
    tx: Feed,
    client: ExecutionClient,
    waits: WaitHub,
) {
    let id = key.1;
    let live_poll = hub.upgrade().map_or(LIVE_POLL, |h| h.live_poll);
    let mut tails: HashMap<u32, (u64, Option<LogTail>)> = HashMap::new();
    while !waits.is_closed() && !tx.is_closed() {
        match read(&client, id, &mut tails).await {
            Ok(snapshot) => {
                let version = snapshot.execution.as_ref().map_or(i64::MIN, |e| e.version);
                let finished = snapshot.finished();
                let pause = if snapshot.leased() {
                    live_poll
                } else {
                    IDLE_POLL
                };
                tx.send_replace(Some(Arc::new(snapshot)));
                if finished {
                    break;
                }
                tokio::select! {
                    _ = waits.changed(id, version, pause) => {}
                    () = tx.closed() => break,
                }
            }
            Err(e) => {
                tracing::warn!(execution_id = %id, error = %e, "cannot read a streamed execution; retrying");
                tokio::select! {
                    () = tokio::time::sleep(READ_RETRY) => {}
                    () = tx.closed() => break,
                }
            }
        }
    }
    if let Some(hub) = hub.upgrade() {
        let mut feeds = lock(&hub.feeds);
        if feeds.get(&key).is_some_and(|(g, _)| *g == generation) {
            feeds.remove(&key);
        }
    }
}

/// Reads the execution, its attempts and the log tails that grew since the last read.
async fn read(
    client: &ExecutionClient,
    id: Uuid,
    tails: &mut HashMap<u32, (u64, Option<LogTail>)>,
) -> Result<Snapshot, onestep_core::ExecutionError> {
    let Some(execution) = client.get(id).await? else {
        return Ok(Snapshot::default());
    };
    let attempts = client.attempts(id).await?.unwrap_or_default();
    let mut logs = Vec::with_capacity(attempts.len());
    for a in &attempts {
        let total = a
            .diagnostics
            .as_ref()
            .and_then(|d| d.log.as_ref())
            .map_or(0, |t| t.total_lines);
        let known = tails.get(&a.attempt_no).map(|(t, _)| *t);
        if total > 0 && known != Some(total) {
            let tail = client.attempt_log(id, a.attempt_no).await?.flatten();
            let read_total = tail.as_ref().map_or(0, |t| t.total_lines);
            tails.insert(a.attempt_no, (read_total, tail));
        }
        logs.push(tails.get(&a.attempt_no).and_then(|(_, t)| t.clone()));
    }
    Ok(Snapshot {
        execution: Some(execution),
        attempts,
        logs,
    })
}

/// What one open stream holds.
struct Follow {
    id: Uuid,
    rx: watch::Receiver<Option<Arc<Snapshot>>>,
    snapshot: Option<Arc<Snapshot>>,
    position: Position,
    first: bool,
    ended: bool,
    deadline: tokio::time::Instant,
    waits: WaitHub,
    _permit: OwnedSemaphorePermit,
}

fn follow(mut f: Follow) -> impl Stream<Item = Result<Event, axum::Error>> {
    f.snapshot = f.rx.borrow_and_update().clone();
    futures::stream::unfold(f, |mut f| async move {
        loop {
            if f.ended {
                return None;
            }
            if let Some(snapshot) = f.snapshot.clone() {
                if let Some((event, position)) = next_event(&snapshot, &f.position) {
                    f.position = position;
                    let sse = event.to_sse(Some(position), f.first);
                    f.first = false;
                    return Some((sse, f));
                }
                if let Some(end) = end_event(f.id, &snapshot) {
                    f.ended = true;
                    let sse = end.to_sse(None, f.first);
                    return Some((sse, f));
                }
            }
            tokio::select! {
                changed = f.rx.changed() => {
                    if changed.is_err() {
                        return None;
                    }
                    f.snapshot = f.rx.borrow_and_update().clone();
                }
                () = tokio::time::sleep_until(f.deadline) => return None,
                () = f.waits.closed() => return None,
            }
        }
    })
}

/// The events of one execution as server-sent events (docs/http-api.md#stream): `status` (the
/// execution view, each time its version moves), `attempt` (an attempt started or ended),
/// `progress`, `log`, and `end` once it is terminal, after which the server closes the stream.
/// Every event but `end` has an id; reconnect with it as `Last-Event-ID` to resume without loss
/// or repetition. A stream is closed after the server's `api.max_stream_s` (resume it).
#[utoipa::path(
    get, path = "/v1/executions/{id}/events", tag = "executions",
    params(
        ("id" = String, Path, description = "Execution id (UUID)"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event (the `id` of an event of this execution's stream)"),
    ),
    responses(
        (status = 200, description = "A `text/event-stream` of `status`, `attempt`, `progress`, `log` and `end` events", content_type = "text/event-stream", body = String),
        (status = 422, description = "Malformed id or Last-Event-ID", body = ErrorBody),
        (status = 429, description = "`too_many_streams`: the server's `api.max_streams` streams are open", body = ErrorBody),
        NotFoundErrors,
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn stream_events(
    State(state): State<ApiState>,
    Tenant(client): Tenant,
    ExecutionId(id): ExecutionId,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let position = match headers.get("last-event-id") {
        None => Position::START,
        Some(v) => v
            .to_str()
            .map_err(|_| {
                ApiError::invalid("Last-Event-ID must be the id of an event of this stream")
            })?
            .parse::<Position>()
            .map_err(ApiError::invalid)?,
    };
    client.get(id).await?.ok_or(ApiError::not_found(id))?;
    let hub = state.streams();
    let permit = hub.permit()?;
    let rx = hub.subscribe(&client, id, state.waits());
    let stream = follow(Follow {
        id,
        rx,
        snapshot: None,
        position,
        first: true,
        ended: false,
        deadline: tokio::time::Instant::now() + hub.inner.max_duration,
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
    use chrono::{TimeZone, Utc};
    use onestep_core::diagnostics::{AttemptDiagnostics, AttemptProgress, LogLine};
    use onestep_core::{Limits, ports::ExecutionStore};
    use onestep_testkit::builders::prepared;
    use onestep_testkit::{ManualClock, MemoryStore};

    fn at(s: i64) -> chrono::DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + s, 0)
            .single()
            .expect("instant")
    }

    fn attempt(n: u32, status: &str, lines: u64, progress: Option<u64>) -> AttemptRecord {
        AttemptRecord {
            id: Uuid::new_v4(),
            attempt_no: n,
            status: status.into(),
            worker_id: "w".into(),
            started_at: at(i64::from(n) * 100),
            heartbeat_at: at(i64::from(n) * 100),
            finished_at: (status != "running").then(|| at(i64::from(n) * 100 + 50)),
            error: None,
            diagnostics: Some(AttemptDiagnostics {
                progress: progress.map(|d| AttemptProgress {
                    done: d,
                    total: 10,
                    note: String::new(),
                    at: at(i64::from(n) * 100 + i64::try_from(d).expect("small")),
                }),
                log: (lines > 0).then(|| LogTail {
                    total_lines: lines,
                    lines: Vec::new(),
                }),
                ..AttemptDiagnostics::default()
            }),
        }
    }

    fn tail(first: u64, last: u64) -> Option<LogTail> {
        (last > 0).then(|| LogTail {
            total_lines: last,
            lines: (first..=last)
                .map(|seq| LogLine {
                    seq,
                    at: at(i64::try_from(seq).expect("small")),
                    level: "info".into(),
                    message: format!("line {seq}"),
                })
                .collect(),
        })
    }

    async fn execution_with_version(version_bumps: usize) -> Execution {
        let store = MemoryStore::new(Arc::new(ManualClock::default()), Limits::default());
        let e = store
            .submit(prepared("ns", "t", serde_json::json!(1)))
            .await
            .expect("submit");
        let mut e = store.get("ns", e.id).await.expect("get").expect("found");
        e.version += i64::try_from(version_bumps).expect("small");
        e
    }

    fn drain(s: &Snapshot, mut p: Position, out: &mut Vec<(String, Position)>) -> Position {
        while let Some((event, next)) = next_event(s, &p) {
            let what = match &event {
                StreamEvent::Status(v) => format!("status {} v{}", v.status, v.version),
                StreamEvent::Attempt(a) => format!("attempt {} {}", a.attempt, a.status),
                StreamEvent::Progress(pr) => {
                    format!("progress {} {}", pr.attempt, pr.progress.done)
                }
                StreamEvent::Log(l) => format!("log {} {} skipped {}", l.attempt, l.seq, l.skipped),
                StreamEvent::End(_) => "end".into(),
            };
            assert_ne!(next, p, "every event moves the position");
            out.push((what, next));
            p = next;
        }
        p
    }

    #[tokio::test]
    async fn events_follow_snapshots_in_order_and_resume_exactly_from_any_id() {
        let mut e = execution_with_version(0).await;
        let queued = Snapshot {
            execution: Some(e.clone()),
            ..Snapshot::default()
        };
        e.status = ExecutionStatus::Running;
        e.version += 1;
        let running = Snapshot {
            execution: Some(e.clone()),
            attempts: vec![attempt(1, "running", 2, Some(3))],
            logs: vec![tail(1, 2)],
        };
        e.status = ExecutionStatus::Retrying;
        e.version += 1;
        let retrying = Snapshot {
            execution: Some(e.clone()),
            attempts: vec![attempt(1, "retrying", 3, Some(4))],
            logs: vec![tail(1, 3)],
        };
        e.status = ExecutionStatus::Succeeded;
        e.version += 2;
        // Attempt 2 ran between two reads: its start, lines and end are all shown.
        let done = Snapshot {
            execution: Some(e.clone()),
            attempts: vec![
                attempt(1, "retrying", 3, Some(4)),
                attempt(2, "succeeded", 1, None),
            ],
            logs: vec![tail(1, 3), tail(1, 1)],
        };
        let mut events = Vec::new();
        let mut p = Position::START;
        for s in [&queued, &running, &running, &retrying, &done] {
            p = drain(s, p, &mut events);
        }
        let names: Vec<&str> = events.iter().map(|(w, _)| w.as_str()).collect();
        assert_eq!(
            names,
            [
                "status queued v0",
                "attempt 1 running",
                "log 1 1 skipped 0",
                "log 1 2 skipped 0",
                "progress 1 3",
                "status running v1",
                "log 1 3 skipped 0",
                "progress 1 4",
                "attempt 1 retrying",
                "status retrying v2",
                "attempt 2 running",
                "log 2 1 skipped 0",
                "attempt 2 succeeded",
                "status succeeded v4",
            ]
        );
        assert!(end_event(e.id, &done).is_some());
        assert!(end_event(e.id, &retrying).is_none());

        // Resuming from any event's id (sent as text) against the last snapshot gives exactly
        // the events after it that the last snapshot still holds: nothing twice, nothing lost.
        for (i, (_, id)) in events.iter().enumerate() {
            let resumed: Position = id.to_string().parse().expect("own id parses");
            assert_eq!(resumed, *id);
            let mut rest = Vec::new();
            drain(&done, resumed, &mut rest);
            let rest: Vec<&str> = rest.iter().map(|(w, _)| w.as_str()).collect();
            let expected: Vec<&str> = names[i + 1..]
                .iter()
                .copied()
                .filter(|w| !w.starts_with("status") || *w == "status succeeded v4")
                .filter(|w| !w.starts_with("progress 1 3"))
                .collect();
            assert_eq!(rest, expected, "resumed after event {i}");
        }
    }

    #[tokio::test]
    async fn lines_the_tail_dropped_are_counted_as_skipped() {
        let e = execution_with_version(1).await;
        let s = Snapshot {
            execution: Some(e),
            attempts: vec![attempt(1, "running", 10, None)],
            logs: vec![tail(7, 10)],
        };
        let after_two = Position {
            attempt_step: 1,
            log_attempt: 1,
            log_seq: 2,
            ..Position::START
        };
        let mut events = Vec::new();
        drain(&s, after_two, &mut events);
        assert_eq!(events[0].0, "log 1 7 skipped 4");
        assert_eq!(events[1].0, "log 1 8 skipped 0");
    }

    #[tokio::test]
    async fn every_stream_of_one_execution_shares_one_feed_which_ends_with_the_last() {
        let store = Arc::new(MemoryStore::new(
            Arc::new(ManualClock::default()),
            Limits::default(),
        ));
        let e = store
            .submit(prepared("ns", "t", serde_json::json!(1)))
            .await
            .expect("submit");
        let client = ExecutionClient::new(store.clone(), "ns", Limits::default()).expect("client");
        let waits = WaitHub::new(store.clone(), Duration::from_millis(5));
        let hub = StreamHub::new(8, Duration::from_secs(60), Duration::from_millis(20));
        let mut streams: Vec<_> = (0..100)
            .map(|_| hub.subscribe(&client, e.id, &waits))
            .collect();
        assert_eq!(hub.feeds(), 1, "100 streams, one reader");
        for rx in &mut streams {
            let snapshot = rx
                .wait_for(Option::is_some)
                .await
                .expect("a snapshot")
                .clone()
                .expect("some");
            assert_eq!(
                snapshot.execution.as_ref().map(|e| e.status),
                Some(ExecutionStatus::Queued)
            );
        }
        // A cancel reaches every stream through the one feed, which then ends (terminal).
        store.cancel("ns", e.id, None).await.expect("cancel");
        for rx in &mut streams {
            let snapshot = rx
                .wait_for(|s| s.as_ref().is_some_and(|s| s.finished()))
                .await
                .expect("the terminal snapshot")
                .clone()
                .expect("some");
            assert!(end_event(e.id, &snapshot).is_some());
        }
        tokio::time::timeout(Duration::from_secs(5), async {
            while hub.feeds() > 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the feed ended with its execution");

        // A feed of a live execution ends when its last stream goes.
        let live = store
            .submit(prepared("ns", "t", serde_json::json!(2)))
            .await
            .expect("submit");
        let rx = hub.subscribe(&client, live.id, &waits);
        assert_eq!(hub.feeds(), 1);
        drop(rx);
        tokio::time::timeout(Duration::from_secs(5), async {
            while hub.feeds() > 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the feed ended with its last stream");
    }

    #[test]
    fn event_ids_are_six_integers() {
        let p: Position = "3.4.2.17.2.1800000000123456".parse().expect("parses");
        assert_eq!(p.version, 3);
        assert_eq!(p.log_seq, 17);
        assert_eq!(p.to_string(), "3.4.2.17.2.1800000000123456");
        let start = Position::START.to_string();
        assert_eq!(start.parse::<Position>(), Ok(Position::START));
        for bad in [
            "",
            "1.2.3",
            "1.2.3.4.5.6.7",
            "a.0.0.0.0.0",
            "-2.0.0.0.0.0",
            "1.-1.0.0.0.0",
            &"9".repeat(200),
        ] {
            let e = bad.parse::<Position>().expect_err(bad);
            assert!(e.contains("Last-Event-ID"), "{e}");
        }
    }
}
