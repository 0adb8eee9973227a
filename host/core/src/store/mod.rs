//! Support shared by the storage backends, with no SQL and no driver types: the options every
//! backend opens with and their defaults ([`options`]), redaction of DSN secrets ([`redact`]),
//! the bounded backoff for transient failures ([`backoff`]), the resolution of an ambiguous
//! commit ([`ambiguity`]), the bookkeeping of the batched completion ([`batch`]), the lease
//! arithmetic of claim and heartbeat ([`lease`]) and the worker port written once for every
//! backend ([`lease_port`]). Each backend keeps its own DSN parsing, SQL and error classification
//! and calls into these (CONTRIBUTING.md, "Adding a backend").

pub mod ambiguity;
pub mod backoff;
pub mod batch;
pub mod errors;
pub mod lease;
pub mod lease_port;
pub mod options;
pub mod redact;

pub use ambiguity::{AMBIGUOUS_ROUNDS, Attempt, Lookup, write_resolving_ambiguity};
pub use backoff::TransientBackoff;
pub use errors::{DecodeError, SetupError};
pub use options::StoreOptions;
pub use redact::{MAX_MESSAGE_CHARS, percent_decode, redact, secrets_of};
