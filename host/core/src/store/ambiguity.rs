//! Resolution of an ambiguous commit (docs/semantics.md#submit-and-idempotency): when the
//! connection is lost during COMMIT the write may or may not have landed. A backend asks a
//! "did it land?" probe (re-reading through the submission's id and idempotency key); when the
//! probe finds nothing, nothing was committed and the write runs again.

use std::future::Future;

use uuid::Uuid;

use crate::error::ExecutionError;
use crate::execution::Execution;

/// Rounds of [`write_resolving_ambiguity`] before it gives up.
pub const AMBIGUOUS_ROUNDS: usize = 3;

/// What one write (a whole transaction, already retried for transient failures) did.
#[derive(Debug)]
pub enum Attempt<T> {
    /// The outcome is known: committed, or certainly not.
    Known(Result<T, ExecutionError>),
    /// The connection was lost during COMMIT: the write may or may not have landed.
    Unknown,
}

/// How a submission relates to what the table holds (the probe of a submit).
#[derive(Debug)]
pub enum Lookup {
    /// The row with this submission's id exists (it was committed).
    Inserted(Execution),
    /// Another row holds the key with the same digest (idempotent replay).
    Replay(Execution),
    /// Another row holds the key with a different digest.
    Conflict(Uuid),
    /// Neither id nor key found.
    Absent,
}

impl Lookup {
    /// What the submission returns: the execution (new or replayed) or the conflict; `None`
    /// when nothing was written.
    pub fn outcome(self) -> Option<Result<Execution, ExecutionError>> {
        match self {
            Lookup::Inserted(x) | Lookup::Replay(x) => Some(Ok(x)),
            Lookup::Conflict(existing_id) => Some(Err(ExecutionError::Conflict { existing_id })),
            Lookup::Absent => None,
        }
    }
}

/// Runs `write`; after an ambiguous commit asks `landed`: `Some` is the outcome (the write was
/// committed, or meets a conflict), `None` means nothing was committed and `write` runs again,
/// at most [`AMBIGUOUS_ROUNDS`] times in all, after which `exhausted` is the error.
pub async fn write_resolving_ambiguity<T, W, WFut, P, PFut>(
    write: W,
    landed: P,
    exhausted: impl FnOnce() -> ExecutionError,
) -> Result<T, ExecutionError>
where
    W: Fn() -> WFut,
    WFut: Future<Output = Attempt<T>>,
    P: Fn() -> PFut,
    PFut: Future<Output = Result<Option<Result<T, ExecutionError>>, ExecutionError>>,
{
    for _ in 0..AMBIGUOUS_ROUNDS {
        match write().await {
            Attempt::Known(r) => return r,
            Attempt::Unknown => {
                if let Some(outcome) = landed().await? {
                    return outcome;
                }
            }
        }
    }
    Err(exhausted())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::block_on;
    use std::cell::Cell;

    #[test]
    fn a_write_that_landed_is_not_repeated() {
        let writes = Cell::new(0);
        let r = block_on(write_resolving_ambiguity(
            || {
                writes.set(writes.get() + 1);
                async { Attempt::<u8>::Unknown }
            },
            || async { Ok(Some(Ok(5))) },
            || ExecutionError::invalid("exhausted"),
        ));
        assert_eq!((r.ok(), writes.get()), (Some(5), 1));
    }

    #[test]
    fn a_write_that_did_not_land_is_repeated_a_bounded_number_of_times() {
        let writes = Cell::new(0);
        let r = block_on(write_resolving_ambiguity(
            || {
                writes.set(writes.get() + 1);
                async { Attempt::<u8>::Unknown }
            },
            || async { Ok(None) },
            || ExecutionError::invalid("exhausted"),
        ));
        assert!(
            matches!(r, Err(ExecutionError::InvalidArgument(_))),
            "{r:?}"
        );
        assert_eq!(writes.get(), AMBIGUOUS_ROUNDS);
        let r = block_on(write_resolving_ambiguity(
            || async { Attempt::Known(Ok(1u8)) },
            || async { Ok(None) },
            || ExecutionError::invalid("exhausted"),
        ));
        assert_eq!(r.ok(), Some(1));
    }

    #[test]
    fn a_conflict_found_by_the_probe_is_the_outcome() {
        let id = Uuid::nil();
        assert!(matches!(
            Lookup::Conflict(id).outcome(),
            Some(Err(ExecutionError::Conflict { existing_id })) if existing_id == id
        ));
        assert!(Lookup::Absent.outcome().is_none());
    }
}
