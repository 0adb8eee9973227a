//! What a backend's schema readiness found at open, in the same shape for every backend
//! ([`SchemaReport`] over the backend's own feature flags), and what open and the DDL commands
//! (`onestep migrate`, `onestep migrate --upgrade`) do with it the same way on every backend:
//! the warnings about tables that lack something (docs/schema.md#upgrading-reference-tables,
//! docs/postgres.md#upgrading-reference-tables, docs/observability.md#attempt-diagnostics,
//! docs/observability.md#traces) and the options of a DDL command.

use crate::backend::{Backend, UpgradeReport};
use crate::error::ExecutionError;
use crate::names::TableNames;
use crate::store::options::StoreOptions;

/// What readiness did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SchemaReport<F> {
    /// Tables created by this call, executions first.
    pub created: Vec<String>,
    /// Detected schema features.
    pub features: F,
    /// When the executions table lacks a column or an index this build uses (tables created by
    /// the reference or an older onestep): the exact `onestep migrate --upgrade` command that
    /// adds them (docs/schema.md#upgrading-reference-tables,
    /// docs/postgres.md#upgrading-reference-tables), which the open warning and `onestep check
    /// --connect` print.
    pub upgrade_command: Option<String>,
}

/// The schema features every backend detects at open. Each backend's own feature set embeds
/// them and dereferences to them, so `features.diagnostics_table` reads the same everywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CommonFeatures {
    /// The executions table has the filtered-list indexes (the backend's status, status-list
    /// and task-list indexes at their full width); without them lists filtered by task or
    /// status and purges by status walk the namespace's history (tables of the reference or of
    /// an older onestep, until `onestep migrate --upgrade`).
    pub list_indexes: bool,
    /// The attempt-diagnostics table exists (docs/schema.md#attempt-diagnostics); without it the
    /// worker persists no diagnostics.
    pub diagnostics_table: bool,
    /// The trace-context table exists (docs/schema.md#trace-context); without it no submit's
    /// traceparent is stored and attempts start traces of their own.
    pub traces_table: bool,
    /// The executions table has the `priority` and `fairness_key` columns
    /// (docs/semantics.md#priority-and-fairness-key); without them (tables of the reference or
    /// of an older onestep, until `onestep migrate --upgrade`) every execution reads as priority
    /// 5 with no fairness key, claims are oldest-first, and a submit that sets either is refused.
    pub priority_columns: bool,
}

impl CommonFeatures {
    /// The select-list tail that stands in for `priority, fairness_key` on tables without the
    /// columns, given the backend's typed literals (`5`/`NULL`, or `5::smallint`/`NULL::text`).
    pub fn priority_tail(&self, prefix: &str, default_literals: &str) -> String {
        if self.priority_columns {
            format!("{prefix}priority, {prefix}fairness_key")
        } else {
            default_literals.to_owned()
        }
    }
}

/// Declares a backend's feature set `$name`: its own flags, then `common`
/// ([`CommonFeatures`], which `$name` dereferences to), and its report type
/// `$report` = [`SchemaReport<$name>`](SchemaReport).
#[macro_export]
macro_rules! schema_features {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($(#[$field_meta:meta])* pub $field:ident: bool,)*
        }
        $(#[$report_meta:meta])*
        pub type $report:ident;
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name {
            $($(#[$field_meta])* pub $field: bool,)*
            /// The features every backend detects.
            pub common: $crate::store::CommonFeatures,
        }

        $(#[$report_meta])*
        pub type $report = $crate::store::SchemaReport<$name>;

        impl ::std::ops::Deref for $name {
            type Target = $crate::store::CommonFeatures;

            fn deref(&self) -> &$crate::store::CommonFeatures {
                &self.common
            }
        }

        impl ::std::ops::DerefMut for $name {
            fn deref_mut(&mut self) -> &mut $crate::store::CommonFeatures {
                &mut self.common
            }
        }
    };
}

/// The schema features of one backend (detected once at open), as the open-time checks read
/// them: the [`CommonFeatures`] it dereferences to plus its own.
pub trait SchemaFeatureSet: std::ops::DerefMut<Target = CommonFeatures> {
    /// The open warning about the attempt-diagnostics table being absent.
    const DIAGNOSTICS_ABSENT: &'static str;

    /// When the executions table lacks something this build's queries use: the open warning
    /// (what is missing and what it costs), to which `: <upgrade command>` is appended.
    fn upgrade_warning(&self) -> Option<&'static str>;

    /// The name of the attempt-diagnostics table of `names`.
    fn diagnostics_table(names: &TableNames) -> String;

    /// The name of the trace-context table of `names`.
    fn traces_table(names: &TableNames) -> String;
}

/// Settles what readiness found against `opts` and warns about what the tables lack: records
/// the upgrade command (built by `upgrade_command`) when the executions table needs one, turns
/// diagnostics off when `opts` does, and answers whether traceparents are written and read
/// (`opts.traces` and the table exists).
pub fn settle_at_open<F: SchemaFeatureSet>(
    report: &mut SchemaReport<F>,
    opts: &StoreOptions,
    names: &TableNames,
    upgrade_command: impl FnOnce() -> String,
) -> bool {
    if let Some(warning) = report.features.upgrade_warning() {
        let command = upgrade_command();
        tracing::warn!(table = %names.executions, "{warning}: {command}");
        report.upgrade_command = Some(command);
    }
    let common: &mut CommonFeatures = &mut report.features;
    let (diagnostics, traces) = (&mut common.diagnostics_table, &mut common.traces_table);
    if !opts.diagnostics {
        *diagnostics = false;
    } else if !*diagnostics {
        // docs/observability.md#attempt-diagnostics
        tracing::warn!(table = %F::diagnostics_table(names), "{}", F::DIAGNOSTICS_ABSENT);
    }
    if opts.traces && !*traces {
        // docs/observability.md#traces
        tracing::warn!(
            table = %F::traces_table(names),
            "the trace-context table is absent: submits' traceparents are not stored and \
             attempts start traces of their own; `onestep migrate` creates it"
        );
    }
    opts.traces && *traces
}

/// `opts` for one DDL command (`onestep migrate`, `onestep migrate --upgrade`): tables created
/// when missing, over a one-connection pool.
pub fn for_ddl(mut opts: StoreOptions) -> StoreOptions {
    opts.auto_create = true;
    opts.pool_min = 0;
    opts.pool_max = 1;
    opts
}

/// `onestep migrate --upgrade` over a backend opened with [`for_ddl`] options: upgrades, then
/// closes it (the upgrade's error first, then the close's).
pub async fn upgrade_then_close(backend: &dyn Backend) -> Result<UpgradeReport, ExecutionError> {
    let report = backend.upgrade().await;
    let closed = backend.close().await;
    let report = report?;
    closed?;
    Ok(report)
}

impl<F> SchemaReport<F> {
    /// What readiness found: the tables it created and the features it detected (no upgrade
    /// command yet: [`settle_at_open`] records it).
    pub fn new(created: Vec<String>, features: F) -> Self {
        SchemaReport {
            created,
            features,
            upgrade_command: None,
        }
    }
}
