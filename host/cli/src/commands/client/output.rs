//! Printing and exit codes of the client commands.
//!
//! Exit codes: 0 ok; 1 not found, failed, cancelled, expired, not ready (for `result`), a
//! conflict, a `wait` timeout, or the database failing; 2 usage and validation errors.

use onestep_api::error::ApiError;
use onestep_api::text;
use onestep_api::view::{ExecutionView, PageView};
use onestep_core::{Execution, ExecutionError};
use serde::Serialize;

/// Exit code: success.
pub(crate) const OK: u8 = 0;
/// Exit code: the execution is missing or ended badly, or the operation failed.
pub(crate) const FAILED: u8 = 1;
/// Exit code: usage or validation error.
pub(crate) const USAGE: u8 = 2;

/// A command failure: an exit code and the error body to print.
#[derive(Debug)]
pub(crate) struct Failure {
    /// Process exit code.
    pub(crate) exit: u8,
    /// `{code, message}` (the same body the HTTP API would return).
    pub(crate) body: Box<onestep_api::ErrorBody>,
}

impl Failure {
    /// A usage error (exit 2).
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Failure {
            exit: USAGE,
            body: Box::new(ApiError::invalid(message).body().clone()),
        }
    }

    /// A failure with `code` (exit 1).
    pub(crate) fn failed(code: &str, message: impl Into<String>) -> Self {
        let e = ApiError::new(axum::http::StatusCode::CONFLICT, code, message);
        Failure {
            exit: FAILED,
            body: Box::new(e.body().clone()),
        }
    }

    /// Prints the failure: the message on stderr, and with `--json` the body on stdout.
    pub(crate) fn report(&self, json: bool) -> u8 {
        if json {
            print_json(&self.body);
        }
        let mut msg = self.body.message.clone();
        if let Some(err) = &self.body.error {
            msg.push_str(&format!(" ({})", text::error_summary(err)));
        }
        eprintln!("onestep: {msg}");
        self.exit
    }
}

impl From<ExecutionError> for Failure {
    fn from(e: ExecutionError) -> Self {
        let exit = match &e {
            ExecutionError::InvalidArgument(_) | ExecutionError::Encoding(_) => USAGE,
            _ => FAILED,
        };
        let mut body = Box::new(ApiError::from(e.clone()).body().clone());
        if let ExecutionError::Backend(b) = &e {
            // The CLI's user is the operator: show the (redacted) cause.
            body.message = b.to_string();
        }
        Failure { exit, body }
    }
}

/// Prints a value as pretty JSON on stdout.
pub(crate) fn print_json<T: Serialize>(value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(s) => println!("{s}"),
        Err(e) => eprintln!("onestep: cannot render JSON: {e}"),
    }
}

/// Prints one execution (detail or JSON view).
pub(crate) fn print_execution(e: &Execution, json: bool) {
    print_view(&ExecutionView::from(e), json);
}

/// Prints an execution view (with `progress` when the caller filled it in).
pub(crate) fn print_view(view: &ExecutionView, json: bool) {
    if json {
        print_json(view);
    } else {
        print!("{}", text::execution_detail(view));
    }
}

/// Prints a page (table or JSON page view).
pub(crate) fn print_page(items: &[Execution], next_cursor: Option<String>, json: bool) {
    let views: Vec<ExecutionView> = items.iter().map(ExecutionView::from).collect();
    if json {
        print_json(&PageView {
            items: views,
            next_cursor,
            // `onestep list` has no metadata or exception-type filter, so no search window.
            partial: false,
        });
    } else {
        print!("{}", text::execution_table(&views));
        if let Some(c) = next_cursor {
            eprintln!("more: --cursor {c}");
        }
    }
}
