//! The options every storage backend opens with (docs/semantics.md#backend-options), with one
//! named default per setting: the backends, the cli and the configuration file's defaults all
//! read these constants.

use std::sync::Arc;

use crate::error::ExecutionError;
use crate::limits::Limits;
use crate::names::TableNames;
use crate::time::{Clock, SystemClock};

/// Default of [`StoreOptions::auto_create`].
pub const DEFAULT_AUTO_CREATE: bool = true;
/// Default of [`StoreOptions::reclaim_batch_size`] (docs/semantics.md#claim-and-maintenance).
pub const DEFAULT_RECLAIM_BATCH_SIZE: u32 = 100;
/// Default of [`StoreOptions::pool_min`].
pub const DEFAULT_POOL_MIN: usize = 0;
/// Default of [`StoreOptions::pool_max`].
pub const DEFAULT_POOL_MAX: usize = 10;
/// Default of [`StoreOptions::diagnostics`].
pub const DEFAULT_DIAGNOSTICS: bool = true;
/// Default of [`StoreOptions::traces`].
pub const DEFAULT_TRACES: bool = false;

/// Construction options of a storage backend. Build with [`StoreOptions::new`] and adjust
/// fields. `Debug` never shows the DSN.
#[derive(Clone)]
pub struct StoreOptions {
    /// The backend's URL naming a database (its scheme picks the backend). Never logged.
    pub dsn: String,
    /// The executions/attempts table pair (validated names).
    pub tables: TableNames,
    /// Create missing tables at open; otherwise only check they exist.
    pub auto_create: bool,
    /// Payload/metadata/result limits in bytes of canonical JSON (docs/semantics.md#size-limits).
    pub limits: Limits,
    /// Per-claim cap of each maintenance step (≥ 1; docs/semantics.md#claim-and-maintenance).
    pub reclaim_batch_size: u32,
    /// The single source of "now" (docs/semantics.md#time); read once per transaction.
    pub clock: Arc<dyn Clock>,
    /// Minimum idle connections kept by the pool (a backend whose pool opens connections on
    /// demand ignores it).
    pub pool_min: usize,
    /// Maximum connections of the pool.
    pub pool_max: usize,
    /// Persist attempt diagnostics when their table exists (`false` behaves as if the table
    /// were absent, without the start-up warning — `onestep bench --no-diagnostics`).
    pub diagnostics: bool,
    /// Store each new submission's traceparent and read it back with the claim, when the
    /// trace-context table exists (the CLI sets it when traces are on,
    /// docs/observability.md#traces).
    pub traces: bool,
}

impl std::fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreOptions")
            .field("dsn", &"<redacted>")
            .field("tables", &self.tables)
            .field("auto_create", &self.auto_create)
            .field("limits", &self.limits)
            .field("reclaim_batch_size", &self.reclaim_batch_size)
            .field("clock", &self.clock)
            .field("pool_min", &self.pool_min)
            .field("pool_max", &self.pool_max)
            .field("diagnostics", &self.diagnostics)
            .field("traces", &self.traces)
            .finish()
    }
}

impl StoreOptions {
    /// The defaults above for `dsn`: default table names and limits, the system clock.
    pub fn new(dsn: impl Into<String>) -> Self {
        StoreOptions {
            dsn: dsn.into(),
            tables: TableNames::default(),
            auto_create: DEFAULT_AUTO_CREATE,
            limits: Limits::default(),
            reclaim_batch_size: DEFAULT_RECLAIM_BATCH_SIZE,
            clock: Arc::new(SystemClock),
            pool_min: DEFAULT_POOL_MIN,
            pool_max: DEFAULT_POOL_MAX,
            diagnostics: DEFAULT_DIAGNOSTICS,
            traces: DEFAULT_TRACES,
        }
    }

    /// Checks the options every backend checks before it connects (the limits, a positive
    /// `reclaim_batch_size`, valid table names) and returns the validated table pair.
    pub fn validate(&self) -> Result<TableNames, ExecutionError> {
        self.limits.validate()?;
        if self.reclaim_batch_size == 0 {
            return Err(ExecutionError::invalid(
                "reclaim_batch_size must be a positive integer",
            ));
        }
        TableNames::new(self.tables.executions.clone(), self.tables.attempts.clone())
    }

    /// The scheme of the DSN (`mysql+asyncmy`, `postgresql`, …), empty when it has none.
    pub fn scheme(&self) -> &str {
        self.dsn.trim().split_once("://").map_or("", |(s, _)| s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_dsn() {
        let o = StoreOptions::new("mysql://u:hunter2@h/db");
        let shown = format!("{o:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("reclaim_batch_size: 100"), "{shown}");
        assert_eq!(o.scheme(), "mysql");
        assert!(o.validate().is_ok());
        let zero = StoreOptions {
            reclaim_batch_size: 0,
            ..o
        };
        assert!(matches!(
            zero.validate(),
            Err(ExecutionError::InvalidArgument(_))
        ));
    }
}
