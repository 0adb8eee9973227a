//! Fleet-wide token buckets (docs/semantics.md#rate-limits): [`RateLimitStore`] over the table
//! `<T>_buckets`. One `BEGIN IMMEDIATE` transaction per call on the writer connection (the
//! database's write lock serialises every taker of every process): a missing bucket is
//! inserted full (`INSERT … ON CONFLICT DO NOTHING`), the row is read, the arithmetic of
//! [`onestep_core::rate::Bucket`] runs at the backend's clock, and the row is written back.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use onestep_core::ExecutionError;
use onestep_core::rate::{BUCKETS_TABLE_ABSENT, Bucket, BucketOp, RateLimit, RateLimitStore, Take};
use rusqlite::params;

use crate::backend::SqliteBackend;
use crate::errors::OpError;
use crate::rows::{ots, parse_time, ts};
use crate::schema::{buckets_table, q};

impl SqliteBackend {
    /// The quoted buckets table, or the refusal naming the upgrade when the tables lack it.
    fn buckets(&self) -> Result<String, ExecutionError> {
        if self.schema_report().features.buckets_table {
            Ok(q(&buckets_table(self.tables())))
        } else {
            Err(ExecutionError::invalid(BUCKETS_TABLE_ABSENT))
        }
    }

    async fn bucket_op(
        &self,
        bucket: &str,
        rate: RateLimit,
        op: BucketOp,
    ) -> Result<Take, ExecutionError> {
        BucketOp::check(bucket, rate)?;
        let table = self.buckets()?;
        let bucket = bucket.to_owned();
        self.run("rate_limit", || {
            let (table, bucket) = (table.clone(), bucket.clone());
            self.write(move |b, c| {
                let now = b.now();
                let full = Bucket::full(rate, now);
                c.prepare_cached(&format!(
                    "INSERT INTO {table} (bucket, tokens, refilled_at, paused_until) \
                     VALUES (?1, ?2, ?3, NULL) ON CONFLICT (bucket) DO NOTHING"
                ))?
                .execute(params![bucket, full.tokens, ts(full.refilled_at)])?;
                let (tokens, refilled_at, paused_until) = c
                    .prepare_cached(&format!(
                        "SELECT tokens, refilled_at, paused_until FROM {table} WHERE bucket = ?1"
                    ))?
                    .query_row(params![bucket], |r| {
                        Ok((
                            r.get::<_, f64>(0)?,
                            r.get::<_, String>(1)?,
                            r.get::<_, Option<String>>(2)?,
                        ))
                    })?;
                let mut state = Bucket {
                    tokens,
                    refilled_at: parse_time(&refilled_at, "refilled_at")
                        .map_err(|e| OpError::Domain(e.into()))?,
                    paused_until: match paused_until {
                        Some(p) => Some(
                            parse_time(&p, "paused_until")
                                .map_err(|e| OpError::Domain(e.into()))?,
                        ),
                        None => None,
                    },
                };
                let answer = op.apply(&mut state, rate, now);
                c.prepare_cached(&format!(
                    "UPDATE {table} SET tokens = ?2, refilled_at = ?3, paused_until = ?4 \
                     WHERE bucket = ?1"
                ))?
                .execute(params![
                    bucket,
                    state.tokens,
                    ts(state.refilled_at),
                    ots(state.paused_until)
                ])?;
                Ok(answer)
            })
        })
        .await
    }
}

#[async_trait]
impl RateLimitStore for SqliteBackend {
    async fn take(
        &self,
        bucket: &str,
        rate: RateLimit,
        wanted: u32,
    ) -> Result<Take, ExecutionError> {
        self.bucket_op(bucket, rate, BucketOp::Take(wanted)).await
    }

    async fn refund(&self, bucket: &str, rate: RateLimit, n: u32) -> Result<(), ExecutionError> {
        self.bucket_op(bucket, rate, BucketOp::Refund(n))
            .await
            .map(drop)
    }

    async fn pause(
        &self,
        bucket: &str,
        rate: RateLimit,
        until: DateTime<Utc>,
    ) -> Result<(), ExecutionError> {
        self.bucket_op(bucket, rate, BucketOp::Pause(until))
            .await
            .map(drop)
    }
}
