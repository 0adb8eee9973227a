//! Support shared by the storage backends, with no SQL and no driver types: the options every
//! backend opens with and their defaults ([`options`]), redaction of DSN secrets ([`redact`]),
//! the bounded backoff for transient failures ([`backoff`]), the resolution of an ambiguous
//! commit ([`ambiguity`]), the bookkeeping of the batched completion ([`batch`]), the lease
//! arithmetic of claim and heartbeat ([`lease`]), the worker port written once for every
//! backend ([`lease_port`]), the transaction runner with its retries and error mapping ([`tx`]),
//! the schema report and open-time checks ([`schema`]), the first steps of DSN parsing
//! ([`dsn`]) and scratch database names ([`scratch`]). Each backend keeps its own DSN parsing, SQL and error classification
//! and calls into these (CONTRIBUTING.md, "Adding a backend").

pub mod ambiguity;
pub mod backoff;
pub mod batch;
pub mod dsn;
pub mod errors;
pub mod lease;
pub mod lease_port;
pub mod options;
pub mod redact;
pub mod schema;
pub mod scratch;
pub mod tx;

pub use ambiguity::{AMBIGUOUS_ROUNDS, Attempt, Lookup, write_resolving_ambiguity};
pub use backoff::TransientBackoff;
pub use dsn::{SplitDsn, split_dsn};
pub use errors::{DecodeError, SetupError};
pub use options::StoreOptions;
pub use redact::{MAX_MESSAGE_CHARS, percent_decode, redact, secrets_of};
pub use schema::{SchemaFeatureSet, SchemaReport, for_ddl, settle_at_open, upgrade_then_close};
pub use scratch::{ScratchTarget, scratch_name};
pub use tx::{Failure, Tx, TxError};
