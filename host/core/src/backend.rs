//! The backend handle: what one opened storage backend hands out (CONTRIBUTING.md, "Adding a
//! backend"). Opening a backend (MySQL/MariaDB, PostgreSQL, …) yields one value implementing
//! [`Backend`]; commands, the worker's wiring, the API and the benchmarks use only this trait and
//! the ports it hands out, never the concrete backend type. Every backend serves every port;
//! what differs between backends is answered by [`BackendCapabilities`], as plain booleans.
//!
//! The model is River's driver: a backend is a bundle of ports plus capability answers, and the
//! one place that knows concrete backends (the cli's wiring) picks one by the DSN's scheme.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::ExecutionError;
use crate::ports::{
    ExecutionInsights, ExecutionStore, LeaseStore, Readiness, Retention, StoreStats,
};

/// What an opened backend can do beyond the ports every backend serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BackendCapabilities {
    /// Attempt diagnostics are persisted: their table exists and they are not turned off
    /// (docs/observability.md#attempt-diagnostics).
    pub diagnostics_persisted: bool,
    /// The tables carry every column and index this build uses, so no `migrate --upgrade` is
    /// pending (docs/schema.md).
    pub schema_current: bool,
}

/// One DDL step of [`Backend::upgrade`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpgradeStep {
    /// What was added (`column claimable`, `index ix_…`).
    pub added: String,
    /// How the server ran it (`ALGORITHM=INSTANT`, `CONCURRENTLY`, …, or `default`).
    pub form: String,
}

/// What [`Backend::upgrade`] did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpgradeReport {
    /// Tables created first because they were missing (as `onestep migrate` does).
    pub created: Vec<String>,
    /// The steps taken, in order; empty when the tables were already upgraded.
    pub steps: Vec<UpgradeStep>,
}

/// The pinned session state of a pooled connection (docs/semantics.md#sessions), as
/// `onestep check` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSummary {
    /// The session time zone as the server names it (`+00:00`, `UTC`).
    pub time_zone: String,
    /// The transaction isolation as the server names it (`READ-COMMITTED`, `read committed`).
    pub isolation: String,
}

/// One opened storage backend: a bundle of ports over one connection pool and one table pair.
/// Cloning the ports is cheap (they share the pool); [`Backend::close`] closes the pool for all.
#[async_trait]
pub trait Backend: Send + Sync + Debug {
    /// A short stable name of the backend kind (`mysql`, `postgres`), for logs and reports.
    fn kind(&self) -> &'static str;

    /// The server's version text as the server reports it, prefixed so that a reader knows the
    /// product (e.g. `10.11.19-MariaDB`, `PostgreSQL 15.20`).
    fn server_version(&self) -> String;

    /// What this backend can do beyond the ports.
    fn capabilities(&self) -> BackendCapabilities;

    /// The client-side port (submit, get, list, cancel, attempts).
    fn executions(&self) -> Arc<dyn ExecutionStore>;

    /// The worker-side port (claim, heartbeat, complete, release).
    fn leases(&self) -> Arc<dyn LeaseStore>;

    /// The readiness probe (`GET /readyz`).
    fn readiness(&self) -> Arc<dyn Readiness>;

    /// The dashboard's and the API gauge's aggregates.
    fn insights(&self) -> Arc<dyn ExecutionInsights>;

    /// Removal of old finished executions (`onestep purge`).
    fn retention(&self) -> Arc<dyn Retention>;

    /// Read-only figures for benchmarks and diagnostics.
    fn stats(&self) -> Arc<dyn StoreStats>;

    /// Raw rows in and out, for `onestep copy` ([`crate::transfer`]).
    fn transfer(&self) -> Arc<dyn crate::transfer::Transfer>;

    /// The fleet-wide token buckets kept in this backend's tables
    /// (docs/semantics.md#rate-limits).
    fn rate_limits(&self) -> Arc<dyn crate::rate::RateLimitStore>;

    /// The completion-webhook outbox (docs/semantics.md#completion-webhooks), when this
    /// backend keeps one.
    fn callbacks(&self) -> Option<Arc<dyn crate::callback::CallbackStore>>;

    /// Pushed change notifications (docs/http-api.md#waiting), when this backend has them
    /// (PostgreSQL with the notify trigger).
    fn changes(&self) -> Option<Arc<dyn crate::changes::ChangeListener>>;
    /// The content-addressed component store kept in this backend's tables
    /// (docs/semantics.md#component-store).
    fn components(&self) -> Arc<dyn crate::components::ComponentStore>;

    /// The task deployments kept in this backend's tables (docs/deployments.md#data-model).
    fn deployments(&self) -> Arc<dyn crate::deployments::DeploymentStore>;

    /// The durable steps of executions kept in this backend's tables (docs/steps.md).
    fn steps(&self) -> Arc<dyn crate::steps::StepStore>;

    /// The tables this backend created when it was opened (`auto_create`; `onestep migrate`).
    fn tables_created(&self) -> Vec<String>;

    /// `onestep migrate --upgrade` (docs/schema.md#upgrading-reference-tables): adds, online,
    /// what the executions table lacks of the columns and indexes this build uses. Idempotent;
    /// `created` repeats [`Self::tables_created`].
    async fn upgrade(&self) -> Result<UpgradeReport, ExecutionError>;

    /// The `onestep migrate --upgrade` command line (password elided) that brings the tables up
    /// to date, when [`BackendCapabilities::schema_current`] is false.
    fn upgrade_command(&self) -> Option<String>;

    /// The session state of a pooled connection (time zone and isolation).
    async fn session(&self) -> Result<SessionSummary, ExecutionError>;

    /// Closes the connection pool; the ports handed out fail afterwards.
    async fn close(&self) -> Result<(), ExecutionError>;
}

/// The twelve port methods of [`Backend`] for a backend type that is cheap to clone and
/// implements every port itself: each hands out a clone behind an `Arc`. Use inside
/// `impl Backend for T { … }`.
#[macro_export]
macro_rules! backend_ports {
    () => {
        fn executions(&self) -> ::std::sync::Arc<dyn $crate::ports::ExecutionStore> {
            ::std::sync::Arc::new(::std::clone::Clone::clone(self))
        }
        fn leases(&self) -> ::std::sync::Arc<dyn $crate::ports::LeaseStore> {
            ::std::sync::Arc::new(::std::clone::Clone::clone(self))
        }
        fn readiness(&self) -> ::std::sync::Arc<dyn $crate::ports::Readiness> {
            ::std::sync::Arc::new(::std::clone::Clone::clone(self))
        }
        fn insights(&self) -> ::std::sync::Arc<dyn $crate::ports::ExecutionInsights> {
            ::std::sync::Arc::new(::std::clone::Clone::clone(self))
        }
        fn retention(&self) -> ::std::sync::Arc<dyn $crate::ports::Retention> {
            ::std::sync::Arc::new(::std::clone::Clone::clone(self))
        }
        fn stats(&self) -> ::std::sync::Arc<dyn $crate::ports::StoreStats> {
            ::std::sync::Arc::new(::std::clone::Clone::clone(self))
        }
        fn transfer(&self) -> ::std::sync::Arc<dyn $crate::transfer::Transfer> {
            ::std::sync::Arc::new(::std::clone::Clone::clone(self))
        }
        fn rate_limits(&self) -> ::std::sync::Arc<dyn $crate::rate::RateLimitStore> {
            ::std::sync::Arc::new(::std::clone::Clone::clone(self))
        }
        fn callbacks(
            &self,
        ) -> ::std::option::Option<::std::sync::Arc<dyn $crate::callback::CallbackStore>> {
            $crate::callback::CallbackPort::callback_port(self)
        }
        fn changes(
            &self,
        ) -> ::std::option::Option<::std::sync::Arc<dyn $crate::changes::ChangeListener>> {
            $crate::changes::ChangePort::change_port(self)
        }
        fn components(&self) -> ::std::sync::Arc<dyn $crate::components::ComponentStore> {
            ::std::sync::Arc::new(::std::clone::Clone::clone(self))
        }
        fn deployments(&self) -> ::std::sync::Arc<dyn $crate::deployments::DeploymentStore> {
            ::std::sync::Arc::new(::std::clone::Clone::clone(self))
        }
        fn steps(&self) -> ::std::sync::Arc<dyn $crate::steps::StepStore> {
            ::std::sync::Arc::new(::std::clone::Clone::clone(self))
        }
    };
}

#[doc(hidden)]
pub use async_trait::async_trait as __async_trait;

/// `impl Backend for $t`, written once for every backend: `$t` is cheap to clone, implements
/// every port itself ([`backend_ports!`](crate::backend_ports)) and has the inherent methods
/// `schema_report()` (a [`SchemaReport`](crate::store::SchemaReport) whose features have a
/// `diagnostics_table` flag), `upgrade_tables()`, `session_state()` (with `time_zone` and
/// `isolation`) and `close()`. `$kind` is [`Backend::kind`]; `|$b| $version` gives
/// [`Backend::server_version`] of `$b: &$t`.
#[macro_export]
macro_rules! impl_backend {
    ($t:ty, $kind:literal, |$b:ident| $version:expr) => {
        #[$crate::backend::__async_trait]
        impl $crate::backend::Backend for $t {
            fn kind(&self) -> &'static str {
                $kind
            }

            fn server_version(&self) -> ::std::string::String {
                let $b = self;
                $version
            }

            fn capabilities(&self) -> $crate::backend::BackendCapabilities {
                let report = self.schema_report();
                $crate::backend::BackendCapabilities {
                    diagnostics_persisted: report.features.diagnostics_table,
                    schema_current: report.upgrade_command.is_none(),
                }
            }

            $crate::backend_ports!();

            fn tables_created(&self) -> ::std::vec::Vec<::std::string::String> {
                self.schema_report().created.clone()
            }

            async fn upgrade(
                &self,
            ) -> ::std::result::Result<$crate::backend::UpgradeReport, $crate::ExecutionError> {
                self.upgrade_tables().await
            }

            fn upgrade_command(&self) -> ::std::option::Option<::std::string::String> {
                self.schema_report().upgrade_command.clone()
            }

            async fn session(
                &self,
            ) -> ::std::result::Result<$crate::backend::SessionSummary, $crate::ExecutionError>
            {
                let s = self.session_state().await?;
                Ok($crate::backend::SessionSummary {
                    time_zone: s.time_zone,
                    isolation: s.isolation,
                })
            }

            async fn close(&self) -> ::std::result::Result<(), $crate::ExecutionError> {
                <$t>::close(self).await
            }
        }
    };
}
