//! The component store (docs/semantics.md#component-store): [`ComponentStore`] over the tables
//! `<T>_components` (one header row per component) and `<T>_component_chunks` (its 1 MiB
//! chunks). A put is one transaction: the chunks, then the header, each `ON CONFLICT DO
//! NOTHING`, so a failed put leaves nothing readable, a retry succeeds, and concurrent puts of
//! the same bytes agree on one stored copy. A read needs the header and verifies the whole
//! ([`onestep_core::components::assemble`]).

use async_trait::async_trait;
use onestep_core::ExecutionError;
use onestep_core::components::{
    COMPONENTS_TABLE_ABSENT, ComponentDigest, ComponentStat, ComponentStore, HeldComponent,
    Prepared, assemble, corrupt, prepare,
};

use crate::backend::PgBackend;
use crate::errors::OpResult;
use crate::schema::{component_chunks_table, component_holders_table, components_table, q};
use crate::worker_ops::finish;

/// The quoted header and chunks tables.
struct Tables {
    header: String,
    chunks: String,
    holders: String,
}

impl PgBackend {
    fn component_tables(&self) -> Result<Tables, ExecutionError> {
        if self.schema_report().features.components_tables {
            Ok(Tables {
                header: q(&components_table(self.tables())),
                chunks: q(&component_chunks_table(self.tables())),
                holders: q(&component_holders_table(self.tables())),
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
        let tx = conn.transaction().await?;
        let outcome = async {
            let digest = p.digest.as_str();
            let present = tx
                .query_opt(
                    &format!("SELECT 1 FROM {} WHERE digest = $1", t.header),
                    &[&digest],
                )
                .await?;
            if present.is_none() {
                Self::component_write(&tx, t, p, now).await?;
            }
            let Some(namespace) = holder else {
                return Ok(false);
            };
            // `xmax = 0`: the row was inserted, not an existing holder's time refreshed.
            let row = tx
                .query_one(
                    &format!(
                        "INSERT INTO {} AS h (namespace, digest, stored_at) VALUES ($1, $2, $3) \
                         ON CONFLICT (namespace, digest) DO UPDATE SET stored_at = EXCLUDED.stored_at \
                         RETURNING (xmax = 0)",
                        t.holders
                    ),
                    &[&namespace, &digest, &now],
                )
                .await?;
            Ok(row.try_get::<_, bool>(0)?)
        }
        .await;
        finish(tx, outcome).await
    }

    /// The chunks, then the header, of a component not stored yet.
    async fn component_write(
        tx: &deadpool_postgres::Transaction<'_>,
        t: &Tables,
        p: &Prepared<'_>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> OpResult<()> {
        let digest = p.digest.as_str();
        {
            let st = tx
                .prepare(&format!(
                    "INSERT INTO {} (digest, seq, bytes) VALUES ($1, $2, $3) \
                     ON CONFLICT (digest, seq) DO NOTHING",
                    t.chunks
                ))
                .await?;
            for (seq, chunk) in p.chunks.iter().enumerate() {
                let seq = seq as i32;
                tx.execute(&st, &[&digest, &seq, chunk]).await?;
            }
            let size = p.size as i64;
            let chunks = p.chunk_count() as i32;
            tx.execute(
                &format!(
                    "INSERT INTO {} (digest, size, chunks, created_at) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (digest) DO NOTHING",
                    t.header
                ),
                &[&digest, &size, &chunks, &now],
            )
            .await?;
            Ok(())
        }
    }

    /// The header of `d`; with `holder`, only when that namespace holds it.
    async fn component_stat_once(
        &self,
        t: &Tables,
        d: &ComponentDigest,
        holder: Option<&str>,
    ) -> OpResult<Option<ComponentStat>> {
        let conn = self.conn().await?;
        let row = match holder {
            None => {
                conn.query_opt(
                    &format!(
                        "SELECT size, chunks, created_at FROM {} WHERE digest = $1",
                        t.header
                    ),
                    &[&d.as_str()],
                )
                .await?
            }
            Some(namespace) => {
                conn.query_opt(
                    &format!(
                        "SELECT c.size, c.chunks, c.created_at FROM {} AS c \
                         JOIN {} AS h ON h.digest = c.digest \
                         WHERE h.namespace = $1 AND h.digest = $2",
                        t.header, t.holders
                    ),
                    &[&namespace, &d.as_str()],
                )
                .await?
            }
        };
        let Some(row) = row else {
            return Ok(None);
        };
        let size: i64 = row.try_get(0)?;
        let chunks: i32 = row.try_get(1)?;
        Ok(Some(ComponentStat {
            digest: d.clone(),
            size: u64::try_from(size).map_err(|_| corrupt(d, format!("its size is {size}")))?,
            chunks: u32::try_from(chunks)
                .map_err(|_| corrupt(d, format!("its chunk count is {chunks}")))?,
            created_at: row.try_get(2)?,
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
        let conn = self.conn().await?;
        let rows = conn
            .query(
                &format!(
                    "SELECT seq, bytes FROM {} WHERE digest = $1 ORDER BY seq",
                    t.chunks
                ),
                &[&d.as_str()],
            )
            .await?;
        let mut chunks = Vec::with_capacity(rows.len());
        for row in rows {
            let seq: i32 = row.try_get(0)?;
            let seq =
                u32::try_from(seq).map_err(|_| corrupt(d, format!("a chunk's seq is {seq}")))?;
            chunks.push((seq, row.try_get::<_, Vec<u8>>(1)?));
        }
        Ok(Some(assemble(d, stat.size, stat.chunks, chunks)?))
    }
}

#[async_trait]
impl ComponentStore for PgBackend {
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
