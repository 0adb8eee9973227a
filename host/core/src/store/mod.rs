//! Support shared by the storage backends, with no SQL and no driver types (CONTRIBUTING.md,
//! "Adding a backend"). Each backend keeps its own DSN parsing, SQL, driver decoding and error
//! classification and calls into these:
//!
//! - opening: the state every backend handle holds ([`base`]), the options every backend opens
//!   with and their defaults ([`options`]), the first
//!   steps of DSN parsing ([`dsn`]), redaction of DSN secrets ([`redact`]), the schema report
//!   and open-time checks ([`schema`]), scratch database names ([`scratch`]);
//! - transactions: the runner with its retries and error mapping ([`tx`]), the bounded backoff
//!   for transient failures ([`backoff`]), the resolution of an ambiguous commit
//!   ([`ambiguity`]);
//! - the client side: stored rows into executions ([`rows`]), the decisions of submit and
//!   cancel ([`submit`]), attempt diagnostics ([`diagnostics`]), the dashboard's figures
//!   ([`insights`]), purge ([`purge`]), history seeding ([`history`]) and the client port
//!   written once for every backend ([`client_port`]);
//! - the worker side: the batched completion ([`batch`], [`completion`]), the lease arithmetic of claim and
//!   heartbeat ([`lease`]) and the worker port written once for every backend ([`lease_port`]).

pub mod ambiguity;
pub mod backoff;
pub mod base;
pub mod batch;
pub mod cap;
pub mod client_port;
pub mod completion;
pub mod diagnostics;
pub mod dsn;
pub mod errors;
pub mod fair;
pub mod history;
pub mod insights;
pub mod lease;
pub mod lease_port;
pub mod options;
pub mod purge;
pub mod quota;
pub mod redact;
pub mod rows;
pub mod schema;
pub mod scratch;
pub mod submit;
pub mod tx;

pub use ambiguity::{AMBIGUOUS_ROUNDS, Attempt, Lookup, write_resolving_ambiguity};
pub use backoff::TransientBackoff;
pub use base::StoreCore;
pub use dsn::{SplitDsn, split_dsn};
pub use errors::{DecodeError, SetupError};
pub use options::StoreOptions;
pub use redact::{MAX_MESSAGE_CHARS, percent_decode, redact, secrets_of};
pub use rows::{
    EXECUTION_COLUMN_COUNT, StoredExecution, WindowMark, error_object, undecodable_execution,
    window_page,
};
pub use schema::{
    CommonFeatures, SchemaFeatureSet, SchemaReport, for_ddl, settle_at_open, upgrade_then_close,
};
pub use scratch::{ScratchTarget, scratch_name};
pub use tx::{Failure, Tx, TxError};

/// Helpers of this module's unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    /// Polls `f` to completion on this thread (the futures under test never wait on I/O).
    pub(crate) fn block_on<F: Future>(f: F) -> F::Output {
        let mut f = pin!(f);
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
        }
    }
}
