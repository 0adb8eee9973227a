//! Fleet-wide token buckets (docs/semantics.md#rate-limits): [`RateLimitStore`] over the table
//! `<T>_buckets`. One short transaction per call: the bucket's row is locked (`SELECT … FOR
//! UPDATE`; a missing bucket is first inserted full with `INSERT IGNORE`, so concurrent creators
//! agree on one row), the arithmetic of [`onestep_core::rate::Bucket`] runs at the backend's
//! clock, and the row is written back before the lock is released. Concurrent takers queue on
//! the row lock (a deadlock between two creators is retried), so the tokens handed out never
//! exceed what the bucket refilled.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use mysql_async::prelude::Queryable;
use mysql_async::{Row, Transaction, Value as DbValue, from_value_opt};
use onestep_core::ExecutionError;
use onestep_core::rate::{
    BUCKETS_TABLE_ABSENT, Bucket, BucketOp, BucketRow, RateLimit, RateLimitStore, Take,
};
use onestep_core::store::DecodeError;

use crate::backend::{MySqlBackend, begin};
use crate::errors::{OpError, OpResult};
use crate::rows::{bind_opt_time, bind_time, instant, opt_instant};

impl MySqlBackend {
    /// The buckets table, or the refusal naming the upgrade when the tables lack it.
    fn buckets(&self) -> Result<String, ExecutionError> {
        if self.schema_report().features.buckets_table {
            Ok(crate::schema::buckets_table(self.tables()))
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
        let mut tx = begin(&mut conn).await?;
        let outcome = bucket_in(&mut tx, table, bucket, rate, op, now).await;
        self.finish(tx, outcome).await
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

impl MySqlBackend {
    /// The listed buckets (task and origin rate limits), latest pause first, then fewest
    /// tokens, then by name; `None` when the tables lack the buckets table.
    pub(crate) async fn bucket_rows(
        &self,
        limit: u64,
    ) -> Result<Option<Vec<BucketRow>>, ExecutionError> {
        if !self.schema_report().features.buckets_table {
            return Ok(None);
        }
        let table = crate::schema::buckets_table(self.tables());
        let sql = format!(
            "SELECT tokens, refilled_at, paused_until, bucket FROM `{table}` \
             WHERE bucket LIKE 'task:%' OR bucket LIKE 'origin:%' \
             ORDER BY paused_until DESC, tokens, bucket LIMIT {limit}"
        );
        let rows: Vec<Row> = async {
            let mut conn = self.conn().await?;
            Ok::<_, OpError>(conn.query(sql).await?)
        }
        .await
        .map_err(|e| self.error(e, "stats"))?;
        rows.into_iter()
            .map(|mut r| {
                let name =
                    from_value_opt::<Vec<u8>>(r.take::<DbValue, _>(3).unwrap_or(DbValue::NULL))
                        .map_err(|e| DecodeError(format!("bucket: {e}")))?;
                let name = String::from_utf8(name)
                    .map_err(|e| DecodeError(format!("bucket: not UTF-8: {e}")))?;
                let b = decode(r)?;
                Ok((name, b.tokens, b.refilled_at, b.paused_until))
            })
            .collect::<Result<_, DecodeError>>()
            .map(Some)
            .map_err(ExecutionError::from)
    }
}

fn decode(mut row: Row) -> Result<Bucket, DecodeError> {
    let tokens = from_value_opt::<f64>(row.take::<DbValue, _>(0).unwrap_or(DbValue::NULL))
        .map_err(|e| DecodeError(format!("tokens: {e}")))?;
    Ok(Bucket {
        tokens,
        refilled_at: instant(row.take(1).unwrap_or(DbValue::NULL), "refilled_at")?,
        paused_until: opt_instant(row.take(2).unwrap_or(DbValue::NULL), "paused_until")?,
    })
}

async fn lock_row(tx: &mut Transaction<'_>, table: &str, bucket: &str) -> OpResult<Option<Bucket>> {
    let row: Option<Row> = tx
        .exec_first(
            format!(
                "SELECT tokens, refilled_at, paused_until FROM `{table}` WHERE bucket = ? \
                 FOR UPDATE"
            ),
            (bucket.as_bytes(),),
        )
        .await?;
    match row {
        Some(r) => Ok(Some(decode(r).map_err(ExecutionError::from)?)),
        None => Ok(None),
    }
}

async fn bucket_in(
    tx: &mut Transaction<'_>,
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
            // IGNORE: a bucket another caller created meanwhile stays as it is.
            tx.exec_drop(
                format!(
                    "INSERT IGNORE INTO `{table}` (bucket, tokens, refilled_at, paused_until) \
                     VALUES (?, ?, ?, NULL)"
                ),
                (bucket.as_bytes(), full.tokens, bind_time(full.refilled_at)),
            )
            .await?;
            lock_row(tx, table, bucket).await?.ok_or_else(|| {
                OpError::Domain(ExecutionError::Undecodable(format!(
                    "rate-limit bucket '{bucket}' is missing right after its insert"
                )))
            })?
        }
    };
    let answer = op.apply(&mut b, rate, now);
    tx.exec_drop(
        format!(
            "UPDATE `{table}` SET tokens = ?, refilled_at = ?, paused_until = ? WHERE bucket = ?"
        ),
        (
            b.tokens,
            bind_time(b.refilled_at),
            bind_opt_time(b.paused_until),
            bucket.as_bytes(),
        ),
    )
    .await?;
    Ok(answer)
}

#[async_trait]
impl RateLimitStore for MySqlBackend {
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
