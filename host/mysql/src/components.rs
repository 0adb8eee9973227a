//! The component store (docs/semantics.md#component-store): [`ComponentStore`] over the tables
//! `<T>_components` (one header row per component) and `<T>_component_chunks` (its 1 MiB
//! chunks, `LONGBLOB`). A put is one transaction: the chunks, then the header, each `INSERT … ON
//! DUPLICATE KEY UPDATE` as a no-op, so a failed put leaves nothing readable, a retry succeeds,
//! and concurrent puts of the same bytes agree on one stored copy (a deadlock between them is
//! retried). A read needs the header and verifies the whole
//! ([`onestep_core::components::assemble`]).

use async_trait::async_trait;
use mysql_async::prelude::Queryable;
use mysql_async::{Row, Value as DbValue, from_value_opt};
use onestep_core::ExecutionError;
use onestep_core::components::{
    COMPONENTS_TABLE_ABSENT, ComponentDigest, ComponentStat, ComponentStore, HeldComponent,
    Prepared, assemble, corrupt, prepare,
};

use crate::backend::{MySqlBackend, begin};
use crate::errors::OpResult;
use crate::rows::{bind_time, instant};
use crate::schema::{component_chunks_table, component_holders_table, components_table};

/// The header and chunks tables.
struct Tables {
    header: String,
    chunks: String,
    holders: String,
}

fn int(d: &ComponentDigest, row: &mut Row, i: usize, col: &str) -> Result<i64, ExecutionError> {
    from_value_opt::<i64>(row.take::<DbValue, _>(i).unwrap_or(DbValue::NULL))
        .map_err(|e| corrupt(d, format!("{col}: {e}")))
}

impl MySqlBackend {
    fn component_tables(&self) -> Result<Tables, ExecutionError> {
        if self.schema_report().features.components_tables {
            Ok(Tables {
                header: components_table(self.tables()),
                chunks: component_chunks_table(self.tables()),
                holders: component_holders_table(self.tables()),
            })
        } else {
            Err(ExecutionError::invalid(COMPONENTS_TABLE_ABSENT))
        }
    }

    /// Stores `p` (when absent) and, with `holder`, records that namespace as holding it in the
    /// same transaction; true when the holder row is new.
    async fn component_put_once(
        &self,
        t: &Tables,
        p: &Prepared<'_>,
        holder: Option<&str>,
    ) -> OpResult<bool> {
        let now = self.now();
        let mut conn = self.conn().await?;
        let mut tx = begin(&mut conn).await?;
        let digest = p.digest.as_str();
        let outcome = async {
            let present: Option<i64> = tx
                .exec_first(
                    format!("SELECT 1 FROM `{}` WHERE digest = ?", t.header),
                    (digest,),
                )
                .await?;
            if present.is_none() {
                self.component_write(&mut tx, t, p, now).await?;
            }
            let Some(namespace) = holder else {
                return Ok(false);
            };
            let held: Option<i64> = tx
                .exec_first(
                    format!(
                        "SELECT 1 FROM `{}` WHERE namespace = ? AND digest = ?",
                        t.holders
                    ),
                    (namespace, digest),
                )
                .await?;
            tx.exec_drop(
                format!(
                    "INSERT INTO `{}` (namespace, digest, stored_at) VALUES (?, ?, ?) \
                     ON DUPLICATE KEY UPDATE stored_at = ?",
                    t.holders
                ),
                (namespace, digest, bind_time(now), bind_time(now)),
            )
            .await?;
            Ok(held.is_none())
        }
        .await;
        self.finish(tx, outcome).await
    }

    /// The chunks, then the header, of a component not stored yet.
    async fn component_write(
        &self,
        tx: &mut mysql_async::Transaction<'_>,
        t: &Tables,
        p: &Prepared<'_>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> OpResult<()> {
        let digest = p.digest.as_str();
        for (seq, chunk) in p.chunks.iter().enumerate() {
            tx.exec_drop(
                format!(
                    "INSERT INTO `{}` (digest, seq, bytes) VALUES (?, ?, ?) \
                     ON DUPLICATE KEY UPDATE seq = seq",
                    t.chunks
                ),
                (digest, seq as i64, chunk.to_vec()),
            )
            .await?;
        }
        tx.exec_drop(
            format!(
                "INSERT INTO `{}` (digest, size, chunks, created_at) VALUES (?, ?, ?, ?) \
                 ON DUPLICATE KEY UPDATE digest = digest",
                t.header
            ),
            (
                digest,
                p.size as i64,
                i64::from(p.chunk_count()),
                bind_time(now),
            ),
        )
        .await?;
        Ok(())
    }

    /// The header of `d`; with `holder`, only when that namespace holds it.
    async fn component_stat_once(
        &self,
        t: &Tables,
        d: &ComponentDigest,
        holder: Option<&str>,
    ) -> OpResult<Option<ComponentStat>> {
        let mut conn = self.conn().await?;
        let row: Option<Row> = match holder {
            None => {
                conn.exec_first(
                    format!(
                        "SELECT size, chunks, created_at FROM `{}` WHERE digest = ?",
                        t.header
                    ),
                    (d.as_str(),),
                )
                .await?
            }
            Some(namespace) => {
                conn.exec_first(
                    format!(
                        "SELECT c.size, c.chunks, c.created_at FROM `{}` AS c \
                         JOIN `{}` AS h ON h.digest = c.digest \
                         WHERE h.namespace = ? AND h.digest = ?",
                        t.header, t.holders
                    ),
                    (namespace, d.as_str()),
                )
                .await?
            }
        };
        let Some(mut row) = row else {
            return Ok(None);
        };
        let size = int(d, &mut row, 0, "size")?;
        let chunks = int(d, &mut row, 1, "chunks")?;
        Ok(Some(ComponentStat {
            digest: d.clone(),
            size: u64::try_from(size).map_err(|_| corrupt(d, format!("its size is {size}")))?,
            chunks: u32::try_from(chunks)
                .map_err(|_| corrupt(d, format!("its chunk count is {chunks}")))?,
            created_at: instant(row.take(2).unwrap_or(DbValue::NULL), "created_at")
                .map_err(ExecutionError::from)?,
        }))
    }

    async fn component_get_once(
        &self,
        t: &Tables,
        d: &ComponentDigest,
    ) -> OpResult<Option<Vec<u8>>> {
        let Some(stat) = self.component_stat_once(t, d, None).await? else {
            return Ok(None);
        };
        let mut conn = self.conn().await?;
        let rows: Vec<Row> = conn
            .exec(
                format!(
                    "SELECT seq, bytes FROM `{}` WHERE digest = ? ORDER BY seq",
                    t.chunks
                ),
                (d.as_str(),),
            )
            .await?;
        let mut chunks = Vec::with_capacity(rows.len());
        for mut row in rows {
            let seq = int(d, &mut row, 0, "seq")?;
            let seq =
                u32::try_from(seq).map_err(|_| corrupt(d, format!("a chunk's seq is {seq}")))?;
            let bytes =
                from_value_opt::<Vec<u8>>(row.take::<DbValue, _>(1).unwrap_or(DbValue::NULL))
                    .map_err(|e| corrupt(d, format!("chunk {seq}: {e}")))?;
            chunks.push((seq, bytes));
        }
        Ok(Some(assemble(d, stat.size, stat.chunks, chunks)?))
    }
}

#[async_trait]
impl ComponentStore for MySqlBackend {
    async fn put(&self, bytes: &[u8]) -> Result<ComponentDigest, ExecutionError> {
        let p = prepare(bytes)?;
        let t = self.component_tables()?;
        self.run("component_put", || self.component_put_once(&t, &p, None))
            .await?;
        Ok(p.digest)
    }

    async fn put_for(
        &self,
        namespace: &str,
        bytes: &[u8],
    ) -> Result<HeldComponent, ExecutionError> {
        onestep_core::deployments::check_name("namespace", namespace)
            .map_err(|e| ExecutionError::invalid(e.to_string()))?;
        let p = prepare(bytes)?;
        let t = self.component_tables()?;
        let created = self
            .run("component_put", || {
                self.component_put_once(&t, &p, Some(namespace))
            })
            .await?;
        Ok(HeldComponent {
            digest: p.digest,
            created,
        })
    }

    async fn stat_for(
        &self,
        namespace: &str,
        digest: &ComponentDigest,
    ) -> Result<Option<ComponentStat>, ExecutionError> {
        let t = self.component_tables()?;
        self.run("component_stat", || {
            self.component_stat_once(&t, digest, Some(namespace))
        })
        .await
    }

    async fn get(&self, digest: &ComponentDigest) -> Result<Option<Vec<u8>>, ExecutionError> {
        let t = self.component_tables()?;
        self.run("component_get", || self.component_get_once(&t, digest))
            .await
    }

    async fn stat(
        &self,
        digest: &ComponentDigest,
    ) -> Result<Option<ComponentStat>, ExecutionError> {
        let t = self.component_tables()?;
        self.run("component_stat", || {
            self.component_stat_once(&t, digest, None)
        })
        .await
    }
}
