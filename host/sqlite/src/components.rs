//! The component store (docs/semantics.md#component-store): [`ComponentStore`] over the tables
//! `<T>_components` (one header row per component) and `<T>_component_chunks` (its 1 MiB
//! chunks). A put is one `BEGIN IMMEDIATE` transaction on the writer connection: the chunks, then
//! the header, each `INSERT … ON CONFLICT DO NOTHING`, so a failed put leaves nothing readable
//! and a retry succeeds. A read needs the header and verifies the whole
//! ([`onestep_core::components::assemble`]).

use async_trait::async_trait;
use onestep_core::ExecutionError;
use onestep_core::components::{
    COMPONENTS_TABLE_ABSENT, ComponentDigest, ComponentStat, ComponentStore, HeldComponent,
    assemble, corrupt, prepare,
};
use rusqlite::{Connection, OptionalExtension, params};

use crate::backend::SqliteBackend;
use crate::errors::{OpError, OpResult};
use crate::rows::{parse_time, ts};
use crate::schema::{component_chunks_table, component_holders_table, components_table, q};

/// The quoted header and chunks tables.
#[derive(Clone)]
struct Tables {
    header: String,
    chunks: String,
    holders: String,
}

impl SqliteBackend {
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
}

/// The header of `d`; with `holder`, only when that namespace holds it.
fn stat_in(
    c: &Connection,
    t: &Tables,
    d: &ComponentDigest,
    holder: Option<&str>,
) -> OpResult<Option<ComponentStat>> {
    let read = |r: &rusqlite::Row<'_>| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, String>(2)?,
        ))
    };
    let row = match holder {
        None => c
            .prepare_cached(&format!(
                "SELECT size, chunks, created_at FROM {} WHERE digest = ?1",
                t.header
            ))?
            .query_row(params![d.as_str()], read)
            .optional()?,
        Some(namespace) => c
            .prepare_cached(&format!(
                "SELECT c.size, c.chunks, c.created_at FROM {} AS c \
                 JOIN {} AS h ON h.digest = c.digest WHERE h.namespace = ?1 AND h.digest = ?2",
                t.header, t.holders
            ))?
            .query_row(params![namespace, d.as_str()], read)
            .optional()?,
    };
    let Some((size, chunks, created_at)) = row else {
        return Ok(None);
    };
    Ok(Some(ComponentStat {
        digest: d.clone(),
        size: u64::try_from(size).map_err(|_| corrupt(d, format!("its size is {size}")))?,
        chunks: u32::try_from(chunks)
            .map_err(|_| corrupt(d, format!("its chunk count is {chunks}")))?,
        created_at: parse_time(&created_at, "created_at").map_err(|e| OpError::Domain(e.into()))?,
    }))
}

#[async_trait]
impl ComponentStore for SqliteBackend {
    async fn put(&self, bytes: &[u8]) -> Result<ComponentDigest, ExecutionError> {
        self.put_held(None, bytes).await.map(|h| h.digest)
    }

    async fn put_for(
        &self,
        namespace: &str,
        bytes: &[u8],
    ) -> Result<HeldComponent, ExecutionError> {
        onestep_core::deployments::check_name("namespace", namespace)
            .map_err(|e| ExecutionError::invalid(e.to_string()))?;
        self.put_held(Some(namespace), bytes).await
    }

    async fn stat_for(
        &self,
        namespace: &str,
        digest: &ComponentDigest,
    ) -> Result<Option<ComponentStat>, ExecutionError> {
        let t = self.component_tables()?;
        self.run("component_stat", || {
            let (t, d, ns) = (t.clone(), digest.clone(), namespace.to_owned());
            self.read(move |_, c| stat_in(c, &t, &d, Some(&ns)))
        })
        .await
    }

    async fn get(&self, digest: &ComponentDigest) -> Result<Option<Vec<u8>>, ExecutionError> {
        let t = self.component_tables()?;
        self.run("component_get", || {
            let (t, d) = (t.clone(), digest.clone());
            self.read(move |_, c| {
                let Some(stat) = stat_in(c, &t, &d, None)? else {
                    return Ok(None);
                };
                let mut st = c.prepare_cached(&format!(
                    "SELECT seq, bytes FROM {} WHERE digest = ?1 ORDER BY seq",
                    t.chunks
                ))?;
                let rows = st
                    .query_map(params![d.as_str()], |r| {
                        Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
                    })?
                    .collect::<Result<Vec<_>, _>>()?;
                let mut chunks = Vec::with_capacity(rows.len());
                for (seq, bytes) in rows {
                    let seq = u32::try_from(seq)
                        .map_err(|_| corrupt(&d, format!("a chunk's seq is {seq}")))?;
                    chunks.push((seq, bytes));
                }
                Ok(Some(assemble(&d, stat.size, stat.chunks, chunks)?))
            })
        })
        .await
    }

    async fn stat(
        &self,
        digest: &ComponentDigest,
    ) -> Result<Option<ComponentStat>, ExecutionError> {
        let t = self.component_tables()?;
        self.run("component_stat", || {
            let (t, d) = (t.clone(), digest.clone());
            self.read(move |_, c| stat_in(c, &t, &d, None))
        })
        .await
    }
}

impl SqliteBackend {
    /// Stores `bytes` (when absent) and, with `holder`, records that namespace as holding them
    /// in the same transaction (`created`: the holder row is new).
    async fn put_held(
        &self,
        holder: Option<&str>,
        bytes: &[u8],
    ) -> Result<HeldComponent, ExecutionError> {
        let p = prepare(bytes)?;
        let t = self.component_tables()?;
        let digest = p.digest.clone();
        let size = p.size as i64;
        let chunks: Vec<Vec<u8>> = p.chunks.iter().map(|c| c.to_vec()).collect();
        let holder = holder.map(str::to_owned);
        let created = self
            .run("component_put", || {
                let (t, digest, chunks) = (t.clone(), digest.clone(), chunks.clone());
                let holder = holder.clone();
                self.write(move |b, c| {
                    let present = c
                        .prepare_cached(&format!("SELECT 1 FROM {} WHERE digest = ?1", t.header))?
                        .query_row(params![digest.as_str()], |_| Ok(()))
                        .optional()?;
                    let now = ts(b.now());
                    if present.is_none() {
                        let mut st = c.prepare_cached(&format!(
                            "INSERT INTO {} (digest, seq, bytes) VALUES (?1, ?2, ?3) \
                             ON CONFLICT (digest, seq) DO NOTHING",
                            t.chunks
                        ))?;
                        for (seq, chunk) in chunks.iter().enumerate() {
                            st.execute(params![digest.as_str(), seq as i64, chunk])?;
                        }
                        c.prepare_cached(&format!(
                            "INSERT INTO {} (digest, size, chunks, created_at) \
                             VALUES (?1, ?2, ?3, ?4) ON CONFLICT (digest) DO NOTHING",
                            t.header
                        ))?
                        .execute(params![digest.as_str(), size, chunks.len() as i64, now])?;
                    }
                    let Some(namespace) = holder else {
                        return Ok(false);
                    };
                    let held = c
                        .prepare_cached(&format!(
                            "SELECT 1 FROM {} WHERE namespace = ?1 AND digest = ?2",
                            t.holders
                        ))?
                        .query_row(params![namespace, digest.as_str()], |_| Ok(()))
                        .optional()?
                        .is_some();
                    c.prepare_cached(&format!(
                        "INSERT INTO {} (namespace, digest, stored_at) VALUES (?1, ?2, ?3) \
                         ON CONFLICT (namespace, digest) DO UPDATE SET stored_at = excluded.stored_at",
                        t.holders
                    ))?
                    .execute(params![namespace, digest.as_str(), now])?;
                    Ok(!held)
                })
            })
            .await?;
        Ok(HeldComponent {
            digest: p.digest,
            created,
        })
    }
}
