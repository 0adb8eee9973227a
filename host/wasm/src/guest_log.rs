//! The one way guest-provided text reaches `tracing`: the text of `log` and
//! `progress` calls, captured stdout/stderr lines and the handler-error
//! message all pass through [`escape`] first and are then recorded as a
//! *field value* (never as a format string), so a guest can neither start a
//! new log line (and forge one attributed to another execution) nor send
//! terminal escape sequences to whoever reads the log.
//!
//! [`escape`] turns every control character (C0 including `\n`, `\r` and
//! `\t`, DEL, C1), the Unicode line and paragraph separators and the
//! bidirectional-text controls into visible escapes (`\n`, `\r`, `\t`,
//! `\u{1b}`, …). The text and the JSON formatter of `tracing-subscriber` then
//! write the value as it is (text) or as one JSON string (JSON). See
//! `docs/security.md#logs`.

use std::borrow::Cow;

use crate::bindings::Level;
use crate::context::LogIds;

/// Tracing target of every event that carries guest-provided text.
pub(crate) const TARGET: &str = "onestep_wasm::guest";

/// Whether `c` must not reach a log verbatim ([`onestep_core::text::needs_visible_escape`]).
#[cfg(test)]
fn needs_escape(c: char) -> bool {
    onestep_core::text::needs_visible_escape(c)
}

/// `text` with every character that could break a log line, drive a terminal or reorder what a
/// reader sees replaced by a visible escape ([`onestep_core::text::visible`], the one place of
/// this rule, shared with the dashboard). Backslashes are left as they are.
pub(crate) fn escape(text: &str) -> Cow<'_, str> {
    onestep_core::text::visible(text)
}

/// Whether an event of guest text at `level` would be written by the
/// current subscriber (a line it would discard is not charged to the
/// attempt's log budget).
pub(crate) fn enabled(level: tracing::Level) -> bool {
    use tracing::Level as L;
    if level == L::ERROR {
        tracing::enabled!(target: TARGET, L::ERROR)
    } else if level == L::WARN {
        tracing::enabled!(target: TARGET, L::WARN)
    } else if level == L::INFO {
        tracing::enabled!(target: TARGET, L::INFO)
    } else if level == L::DEBUG {
        tracing::enabled!(target: TARGET, L::DEBUG)
    } else {
        tracing::enabled!(target: TARGET, L::TRACE)
    }
}

/// The `tracing` level of a guest `log` call's level.
pub(crate) fn level_of(level: Level) -> tracing::Level {
    match level {
        Level::Trace => tracing::Level::TRACE,
        Level::Debug => tracing::Level::DEBUG,
        Level::Info => tracing::Level::INFO,
        Level::Warn => tracing::Level::WARN,
        Level::Error => tracing::Level::ERROR,
    }
}

/// The lower-case name of a guest log level, as attempt diagnostics store it.
pub(crate) fn level_name(level: Level) -> &'static str {
    match level {
        Level::Trace => "trace",
        Level::Debug => "debug",
        Level::Info => "info",
        Level::Warn => "warn",
        Level::Error => "error",
    }
}

/// A guest `log` call (the message already admitted by the attempt's
/// [`LogBudget`](crate::log_budget::LogBudget), so cut to its limit).
pub(crate) fn log(ids: &LogIds, level: Level, message: &str) {
    let message = escape(message);
    macro_rules! emit {
        ($lvl:ident) => {
            tracing::$lvl!(
                target: TARGET,
                // First, as the message of a `"{}"` event would be.
                message = %message,
                execution_id = %ids.execution_id,
                attempt_id = %ids.attempt_id,
                task = %ids.task_name,
                namespace = %ids.namespace,
            )
        };
    }
    match level {
        Level::Trace => emit!(trace),
        Level::Debug => emit!(debug),
        Level::Info => emit!(info),
        Level::Warn => emit!(warn),
        Level::Error => emit!(error),
    }
}

/// A guest `progress` call (the note already admitted by the budget).
pub(crate) fn progress(ids: &LogIds, done: u64, total: u64, note: &str) {
    let note = escape(note);
    tracing::debug!(
        target: TARGET,
        execution_id = %ids.execution_id,
        attempt_id = %ids.attempt_id,
        done,
        total,
        note = %note,
        "progress"
    );
}

/// One line of captured output (without its line terminator, admitted by the
/// budget); stdout lines are logged at INFO, stderr lines at WARN.
pub(crate) fn output_line(ids: &LogIds, stream: &'static str, stderr: bool, line: &str) {
    let line = escape(line);
    let (exec, attempt) = (&ids.execution_id, &ids.attempt_id);
    if stderr {
        tracing::warn!(
            target: TARGET,
            message = %line, execution_id = %exec, attempt_id = %attempt, stream,
        );
    } else {
        tracing::info!(
            target: TARGET,
            message = %line, execution_id = %exec, attempt_id = %attempt, stream,
        );
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::fmt::MakeWriter;

    /// What the formatter wrote, shared with the test.
    #[derive(Clone, Default)]
    pub(crate) struct Buf(Arc<Mutex<Vec<u8>>>);

    impl Buf {
        pub(crate) fn text(&self) -> String {
            let bytes = self.0.lock().unwrap_or_else(|e| e.into_inner());
            String::from_utf8(bytes.clone()).expect("formatter output is UTF-8")
        }
    }

    impl Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buf {
        type Writer = Buf;
        fn make_writer(&'a self) -> Buf {
            self.clone()
        }
    }

    /// Runs `f` under the CLI's text (`json = false`) or JSON subscriber
    /// writing into a buffer; returns what was written.
    pub(crate) fn logged(json: bool, f: impl FnOnce()) -> String {
        let buf = Buf::default();
        let builder = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(buf.clone())
            .with_ansi(false);
        if json {
            tracing::subscriber::with_default(builder.json().finish(), f);
        } else {
            tracing::subscriber::with_default(builder.finish(), f);
        }
        buf.text()
    }

    pub(crate) fn ids() -> LogIds {
        LogIds {
            execution_id: "mine".into(),
            attempt_id: "mine-1".into(),
            task_name: "t".into(),
            namespace: "ns".into(),
            journal: None,
        }
    }

    /// A message that, unescaped, would end the guest's line and print a
    /// complete line for another execution, in red.
    pub(crate) const FORGED: &str = "ok\n2026-01-01T00:00:00.000000Z  INFO onestep_wasm::guest: \
        execution_id=other attempt_id=other-1 \u{1b}[31mforged\u{1b}[0m\r\n";

    #[test]
    fn escapes_control_characters_and_keeps_the_rest() {
        assert!(matches!(
            escape("plain text, ünïcødé \\ ok"),
            Cow::Borrowed(_)
        ));
        assert_eq!(escape("a\nb\r\nc\td"), "a\\nb\\r\\nc\\td");
        assert_eq!(escape("\u{1b}[31mred\u{1b}[0m"), "\\u{1b}[31mred\\u{1b}[0m");
        assert_eq!(
            escape("\0\u{7f}\u{85}\u{9b}"),
            "\\u{0}\\u{7f}\\u{85}\\u{9b}"
        );
        assert_eq!(escape("x\u{2028}y\u{2029}z"), "x\\u{2028}y\\u{2029}z");
        assert_eq!(escape("\u{202e}evil\u{2066}"), "\\u{202e}evil\\u{2066}");
        assert_eq!(escape("é\nà"), "é\\nà");
        let forged = escape(FORGED);
        assert!(!forged.chars().any(needs_escape), "{forged}");
    }

    fn assert_one_text_line(out: &str, needle: &str) {
        assert_eq!(out.matches('\n').count(), 1, "one line expected: {out:?}");
        assert!(out.ends_with('\n'), "{out:?}");
        assert!(!out.contains('\r') && !out.contains('\u{1b}'), "{out:?}");
        assert!(out.contains("execution_id=mine"), "{out:?}");
        assert!(out.contains(needle), "{out:?}");
    }

    fn assert_one_json_object(out: &str, field: &str) {
        assert_eq!(out.matches('\n').count(), 1, "one line expected: {out:?}");
        let v: serde_json::Value = serde_json::from_str(out).expect("one JSON object");
        assert_eq!(v["target"], TARGET, "{v}");
        assert_eq!(v["fields"][field], *escape(FORGED), "{v}");
        assert_eq!(v["fields"]["execution_id"], "mine", "{v}");
    }

    #[test]
    fn a_forged_log_message_stays_on_its_own_line() {
        let ids = ids();
        for level in [Level::Trace, Level::Info, Level::Error] {
            let out = logged(false, || log(&ids, level, FORGED));
            assert_one_text_line(&out, "execution_id=other attempt_id=other-1 \\u{1b}[31m");
            let out = logged(true, || log(&ids, level, FORGED));
            assert_one_json_object(&out, "message");
        }
    }

    #[test]
    fn a_forged_progress_note_stays_on_its_own_line() {
        let ids = ids();
        let out = logged(false, || progress(&ids, 1, 2, FORGED));
        assert_one_text_line(&out, "note=ok\\n2026-01-01");
        let out = logged(true, || progress(&ids, 1, 2, FORGED));
        assert_one_json_object(&out, "note");
    }

    #[test]
    fn a_forged_output_line_stays_on_its_own_line() {
        let ids = ids();
        for stderr in [false, true] {
            let out = logged(false, || output_line(&ids, "stdout", stderr, FORGED));
            assert_one_text_line(&out, "\\r\\n");
            let out = logged(true, || output_line(&ids, "stdout", stderr, FORGED));
            assert_one_json_object(&out, "message");
        }
    }
}
