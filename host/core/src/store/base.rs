//! The state every opened backend keeps, written once for every backend: its pool, table
//! names, limits, clock, server identity, secrets, schema report and traces flag
//! ([`StoreCore`]), plus the backend's own state, which the core dereferences to. The
//! [`store_handle!`](crate::store_handle) macro declares a backend's public handle over it, with
//! its `Debug` and the accessors every backend has.

use std::ops::Deref;
use std::sync::Arc;

use crate::limits::Limits;
use crate::names::TableNames;
use crate::store::options::StoreOptions;
use crate::store::schema::{SchemaFeatureSet, SchemaReport, settle_at_open};
use crate::time::Clock;

/// What one opened backend shares between its clones: the pool `P`, the server identity `S`,
/// the schema report over the backend's features `F`, and the backend's own state `X`
/// (reached through `Deref`).
pub struct StoreCore<P, S, F, X> {
    /// The connection pool.
    pub pool: P,
    /// The table pair.
    pub names: TableNames,
    /// The size limits (docs/semantics.md#size-limits).
    pub limits: Limits,
    /// The per-claim cap of each maintenance step.
    pub reclaim_batch_size: u32,
    /// The injected clock (docs/semantics.md#time).
    pub clock: Arc<dyn Clock>,
    /// The server identity read at open.
    pub server: S,
    /// The DSN's secrets, redacted from every error message.
    pub secrets: Vec<String>,
    /// The schema features detected at open and the tables created by it.
    pub report: SchemaReport<F>,
    /// Traceparents are written and read (`StoreOptions::traces` and the table exists).
    pub traces: bool,
    /// The backend's own state.
    pub own: X,
}

impl<P, S, F: SchemaFeatureSet, X> StoreCore<P, S, F, X> {
    /// The state of a backend opened with `opts` over `pool`, whose readiness found `server`
    /// and `report`: settles the report against `opts` ([`settle_at_open`], with the upgrade
    /// command built by `upgrade_command`), then builds the backend's own state from the
    /// settled features with `own`.
    pub fn settle(
        opts: StoreOptions,
        names: TableNames,
        pool: P,
        secrets: Vec<String>,
        (server, mut report): (S, SchemaReport<F>),
        upgrade_command: impl FnOnce(&TableNames) -> String,
        own: impl FnOnce(&F) -> X,
    ) -> Self {
        let traces = settle_at_open(&mut report, &opts, &names, || upgrade_command(&names));
        StoreCore {
            own: own(&report.features),
            pool,
            names,
            limits: opts.limits,
            reclaim_batch_size: opts.reclaim_batch_size,
            clock: opts.clock,
            server,
            secrets,
            report,
            traces,
        }
    }
}

impl<P, S, F: SchemaFeatureSet, X> StoreCore<P, S, F, X> {
    /// The attempt-diagnostics table (unquoted), when it exists and diagnostics are kept.
    pub fn diagnostics_table(&self) -> Option<String> {
        self.report
            .features
            .diagnostics_table
            .then(|| F::diagnostics_table(&self.names))
    }

    /// The trace-context table (unquoted), when traceparents are written and read.
    pub fn traces_table(&self) -> Option<String> {
        self.traces.then(|| F::traces_table(&self.names))
    }

    /// The trace-context table (unquoted) when it exists, whether or not traces are on (purge
    /// and copy move its rows).
    pub fn existing_traces_table(&self) -> Option<String> {
        self.report
            .features
            .traces_table
            .then(|| F::traces_table(&self.names))
    }
}

impl<P, S, F, X> Deref for StoreCore<P, S, F, X> {
    type Target = X;

    fn deref(&self) -> &X {
        &self.own
    }
}

/// Declares a backend's public handle `$name` over `Arc<$inner>` (a [`StoreCore`]), cheap to
/// clone, with its `Debug` (tables, server version, then the fields `$debug` of the inner
/// state) and the accessors every backend has: `server()` (`&$server`), `schema_report()`
/// (`&$report`), `tables()` and the crate's `now()`.
#[macro_export]
macro_rules! store_handle {
    (
        $(#[$meta:meta])*
        pub struct $name:ident(Arc<$inner:ty>);
        server: $server:ty,
        report: $report:ty,
        debug: [$($debug:ident),* $(,)?] $(,)?
    ) => {
        $(#[$meta])*
        #[derive(Clone)]
        pub struct $name {
            pub(crate) inner: ::std::sync::Arc<$inner>,
            /// The version of the attempt ids this handle's claims make: v7 except on a
            /// benchmark's handle (`with_attempt_ids`, feature `bench-support`;
            /// docs/semantics.md#time-ordered-ids).
            pub(crate) attempt_ids: $crate::ids::IdVersion,
        }

        impl ::std::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct(stringify!($name))
                    .field("tables", &self.inner.names)
                    .field("server", &self.inner.server.version_string)
                    $(.field(stringify!($debug), &self.inner.$debug))*
                    .finish_non_exhaustive()
            }
        }

        impl $name {
            /// The server identity read at open.
            pub fn server(&self) -> &$server {
                &self.inner.server
            }

            /// The schema features detected at open and the tables created by it.
            pub fn schema_report(&self) -> &$report {
                &self.inner.report
            }

            /// The table pair.
            pub fn tables(&self) -> &$crate::names::TableNames {
                &self.inner.names
            }

            /// "Now" for one transaction (docs/semantics.md#time), truncated to microseconds.
            pub(crate) fn now(&self) -> ::chrono::DateTime<::chrono::Utc> {
                $crate::time::truncate_micros(self.inner.clock.now())
            }
        }
    };
}
