//! What every backend's history seeder (docs/benchmarks.md#history) checks and computes before
//! its statements: the seed's size against [`MAX_HISTORY_ROWS`] and the span of creation
//! instants.

use chrono::{DateTime, Duration, Utc};

use crate::error::ExecutionError;
use crate::history::{HistorySeed, MAX_HISTORY_ROWS};

/// The number of rows to write and the creation instant of the first (row `n` is created `n`
/// milliseconds after it, the last one millisecond before `seed.before`); a seed over
/// [`MAX_HISTORY_ROWS`] is refused.
pub fn history_span(seed: &HistorySeed) -> Result<(i64, DateTime<Utc>), ExecutionError> {
    if seed.count > MAX_HISTORY_ROWS {
        return Err(ExecutionError::InvalidArgument(format!(
            "history of {} rows is over the limit of {MAX_HISTORY_ROWS}",
            seed.count
        )));
    }
    let count = i64::try_from(seed.count).unwrap_or(i64::MAX);
    Ok((count, seed.before - Duration::milliseconds(count)))
}

/// The public history methods of the backend type `$backend`: `with_attempt_ids` (sets its
/// `attempt_ids` field) and `seed_history`, over the backend's inherent
/// `write_history(&HistorySeed) -> Result<u64, ExecutionError>`, which checks the seed with
/// [`history_span`] and holds the statements.
#[macro_export]
macro_rules! impl_history_seed {
    ($backend:ty) => {
        impl $backend {
            /// A handle on the same pool whose claims make attempt ids of version `ids`
            /// (`onestep bench --ids v4`, docs/benchmarks.md#history); other handles keep
            /// making v7 ids.
            pub fn with_attempt_ids(mut self, ids: $crate::ids::IdVersion) -> Self {
                self.attempt_ids = ids;
                self
            }

            /// Writes `seed.count` finished executions and their attempts (module docs);
            /// returns the number of executions written. Not part of the execution protocol:
            /// for `onestep bench --history` only.
            pub async fn seed_history(
                &self,
                seed: &$crate::history::HistorySeed,
            ) -> ::std::result::Result<u64, $crate::ExecutionError> {
                self.write_history(seed).await
            }
        }
    };
}
