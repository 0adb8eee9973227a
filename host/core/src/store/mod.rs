//! Support shared by the storage backends, with no SQL and no driver types: the options every
//! backend opens with and their defaults ([`options`]), redaction of DSN secrets ([`redact`]),
//! the bounded backoff for transient failures ([`backoff`]) and the resolution of an ambiguous
//! commit ([`ambiguity`]); the conversion of stored rows into executions ([`rows`]), the
//! decisions of the client operations ([`submit`]), attempt diagnostics ([`diagnostics`]),
//! purge ([`purge`]) and history seeding ([`history`]). Each backend keeps its own DSN parsing,
//! SQL, driver decoding and error classification and calls into these (CONTRIBUTING.md,
//! "Adding a backend").

pub mod ambiguity;
pub mod backoff;
pub mod diagnostics;
pub mod errors;
pub mod history;
pub mod insights;
pub mod options;
pub mod purge;
pub mod redact;
pub mod rows;
pub mod submit;

pub use ambiguity::{AMBIGUOUS_ROUNDS, Attempt, Lookup, write_resolving_ambiguity};
pub use backoff::TransientBackoff;
pub use errors::{DecodeError, SetupError};
pub use options::StoreOptions;
pub use redact::{MAX_MESSAGE_CHARS, percent_decode, redact, secrets_of};
pub use rows::{
    EXECUTION_COLUMN_COUNT, StoredExecution, WindowMark, error_object, undecodable_execution,
    window_page,
};
