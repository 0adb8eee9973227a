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
