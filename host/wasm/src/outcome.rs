//! What an invocation produced ([`Outcome`]) and how traps are classified.

use std::time::Duration;

/// Result of one invocation, as the worker records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The handler returned output (JSON text, validated by the host).
    Succeeded(String),
    /// The handler returned a `handler-error`.
    HandlerError {
        /// Whether another attempt may be scheduled.
        retryable: bool,
        /// The guest's message.
        message: String,
        /// Minimum delay before the next attempt requested by the guest.
        retry_after: Option<Duration>,
    },
    /// The handler returned more output text than the sandbox's
    /// `result_limit_bytes`. The text was dropped without being parsed.
    OutputTooLarge {
        /// Length of the text the guest returned.
        bytes: u64,
        /// The limit it exceeded.
        limit: u64,
    },
    /// The guest was stopped or crashed; its store has been discarded.
    Trapped {
        /// Why.
        kind: TrapKind,
    },
    /// The host could not run the handler at all (not a handler component,
    /// instantiation failed, a preopen is missing...). Not the guest's doing.
    HostError(InvokeError),
    /// The handler slept (`sleep`/`sleep-until` of `onestep:handler@0.3.0`,
    /// docs/steps.md#sleep): its wake time is recorded as a step and the guest
    /// was stopped; the attempt is to be parked until `wake_at`.
    Parked {
        /// When the execution may run again.
        wake_at: chrono::DateTime<chrono::Utc>,
    },
}

impl Outcome {
    /// `true` for [`Outcome::Succeeded`].
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Succeeded(_))
    }
}

/// Why a guest stopped abnormally.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TrapKind {
    /// The wall-clock deadline (the `timeout` of the call, the task's `timeout_s`) passed.
    Timeout,
    /// The [`CancelHandle`](crate::CancelHandle) was triggered.
    Cancelled,
    /// The fuel budget was exhausted.
    OutOfFuel,
    /// The guest tried to grow its memory beyond `memory_limit_bytes`.
    MemoryLimit,
    /// The guest aborted after writing a message to stderr (a Rust panic, an
    /// uncaught Python exception...). The message is taken from its stderr.
    GuestPanic(String),
    /// Any other trap (e.g. an out-of-bounds access) or abnormal stop.
    Other(String),
}

/// Why the host could not run a handler.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvokeError {
    /// The sandbox settings cannot be applied (missing preopen directory,
    /// fuel requested while metering is off...).
    #[error("invalid sandbox: {0}")]
    Sandbox(String),
    /// Instantiating the component failed (e.g. an import the host does not
    /// provide, or a start function that trapped).
    #[error("instantiation failed: {0}")]
    Instantiation(String),
    /// The component does not export the `onestep:handler` world.
    #[error("component does not implement onestep:handler/handler: {0}")]
    NotAHandler(String),
}

/// Extracts the human-readable part of a guest's stderr after a crash: for
/// a Rust panic, the text after `panicked at <location>:`; otherwise the last
/// non-empty lines (bounded).
pub(crate) fn panic_message(stderr: &str) -> Option<String> {
    const MAX: usize = 2048;
    let text = stderr.trim();
    if text.is_empty() {
        return None;
    }
    let relevant = match text.rfind("panicked at ") {
        Some(pos) => {
            let after = &text[pos..];
            // "panicked at src/lib.rs:1:2:\nmessage\nnote: run with ..."
            let body = after
                .split_once('\n')
                .map(|(_, rest)| rest)
                .unwrap_or(after);
            body.lines()
                .filter(|l| !l.starts_with("note: run with"))
                .collect::<Vec<_>>()
                .join("\n")
        }
        None => text.to_string(),
    };
    let relevant = relevant.trim();
    let relevant = if relevant.is_empty() { text } else { relevant };
    // Keep the tail: the last lines of a traceback say what happened.
    let start = relevant.len().saturating_sub(MAX);
    let start = (start..relevant.len())
        .find(|i| relevant.is_char_boundary(*i))
        .unwrap_or(relevant.len());
    Some(relevant[start..].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_panic_message() {
        let stderr = "\nthread '<unnamed>' panicked at src/lib.rs:55:24:\nmisbehave: deliberate panic\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n";
        assert_eq!(
            panic_message(stderr).as_deref(),
            Some("misbehave: deliberate panic")
        );
    }

    #[test]
    fn other_stderr_is_kept() {
        assert_eq!(
            panic_message("Traceback...\nValueError: x\n").as_deref(),
            Some("Traceback...\nValueError: x")
        );
        assert_eq!(panic_message("  \n"), None);
    }
}
