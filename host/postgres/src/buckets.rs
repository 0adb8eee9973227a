//! Fleet-wide token buckets (docs/semantics.md#rate-limits): [`RateLimitStore`] over the table
//! `<T>_buckets`. One short transaction per call: the bucket's row is locked (`SELECT … FOR
//! UPDATE`; a missing bucket is first inserted full, `ON CONFLICT DO NOTHING`, so concurrent
//! creators agree on one row), the arithmetic of [`onestep_core::rate::Bucket`] runs at the
//! backend's clock, and the row is written back before the lock is released. Concurrent takers
//! queue on the row lock, so the tokens handed out never exceed what the bucket refilled.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use onestep_core::ExecutionError;
use onestep_core::rate::{BUCKETS_TABLE_ABSENT, Bucket, BucketOp, RateLimit, RateLimitStore, Take};

use crate::backend::PgBackend;
use crate::errors::{OpError, OpResult};
use crate::schema::{buckets_table, q};
use crate::worker_ops::finish;

impl PgBackend {
    /// The quoted buckets table, or the refusal naming the upgrade when the tables lack it.
    fn buckets(&self) -> Result<String, ExecutionError> {
        if self.schema_report().features.buckets_table {
            Ok(q(&buckets_table(self.tables())))
        } else {
            Err(ExecutionError::invalid(BUCKETS_TABLE_ABSENT))
        }
    }

    async fn bucket_once(
        &self,
        table: &str,
        bucket: &str,
        rate: RateLimit,
        op: BucketOp,
    ) -> OpResult<Take> {
        let now = self.now();
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        let outcome = bucket_in(&tx, table, bucket, rate, op, now).await;
        finish(tx, outcome).await
    }

    async fn bucket_op(
        &self,
        bucket: &str,
        rate: RateLimit,
        op: BucketOp,
    ) -> Result<Take, ExecutionError> {
        BucketOp::check(bucket, rate)?;
        let table = self.buckets()?;
        self.run("rate_limit", || self.bucket_once(&table, bucket, rate, op))
            .await
    }
}

async fn lock_row<C: GenericClient>(tx: &C, table: &str, bucket: &str) -> OpResult<Option<Bucket>> {
    let st = tx
        .prepare_cached(&format!(
            "SELECT tokens, refilled_at, paused_until FROM {table} WHERE bucket = $1 FOR UPDATE"
        ))
        .await?;
    let Some(row) = tx.query_opt(&st, &[&bucket]).await? else {
        return Ok(None);
    };
    Ok(Some(Bucket {
        tokens: row.try_get(0)?,
        refilled_at: row.try_get(1)?,
        paused_until: row.try_get(2)?,
    }))
}

async fn bucket_in<C: GenericClient>(
    tx: &C,
    table: &str,
    bucket: &str,
    rate: RateLimit,
    op: BucketOp,
    now: DateTime<Utc>,
) -> OpResult<Take> {
    let mut b = match lock_row(tx, table, bucket).await? {
        Some(b) => b,
        None => {
            let full = Bucket::full(rate, now);
            let st = tx
                .prepare_cached(&format!(
                    "INSERT INTO {table} (bucket, tokens, refilled_at, paused_until) \
                     VALUES ($1, $2, $3, NULL) ON CONFLICT (bucket) DO NOTHING"
                ))
                .await?;
            tx.execute(&st, &[&bucket, &full.tokens, &full.refilled_at])
                .await?;
            lock_row(tx, table, bucket).await?.ok_or_else(|| {
                OpError::Domain(ExecutionError::Encoding(format!(
                    "rate-limit bucket '{bucket}' vanished after its insert"
                )))
            })?
        }
    };
    let answer = op.apply(&mut b, rate, now);
    let st = tx
        .prepare_cached(&format!(
            "UPDATE {table} SET tokens = $2, refilled_at = $3, paused_until = $4 \
             WHERE bucket = $1"
        ))
        .await?;
    tx.execute(&st, &[&bucket, &b.tokens, &b.refilled_at, &b.paused_until])
        .await?;
    Ok(answer)
}

#[async_trait]
impl RateLimitStore for PgBackend {
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
