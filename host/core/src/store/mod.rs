//! Support shared by the storage backends, with no SQL and no driver types: the options every
//! backend opens with and their defaults ([`options`]), redaction of DSN secrets ([`redact`]),
//! the bounded backoff for transient failures ([`backoff`]) and the resolution of an ambiguous
//! commit ([`ambiguity`]). Each backend keeps its own DSN parsing, SQL and error classification
//! and calls into these (CONTRIBUTING.md, "Adding a backend").

pub mod ambiguity;
pub mod backoff;
pub mod dsn;
pub mod errors;
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
