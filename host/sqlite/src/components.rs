//! The component store (docs/semantics.md#component-store): [`ComponentStore`] over the tables
//! `<T>_components` (one header row per component) and `<T>_component_chunks` (its 1 MiB
//! chunks). A put is one `BEGIN IMMEDIATE` transaction on the writer connection: the chunks, then
//! the header, each `INSERT … ON CONFLICT DO NOTHING`, so a failed put leaves nothing readable
//! and a retry succeeds. A read needs the header and verifies the whole
//! ([`onestep_core::components::assemble`]).

use async_trait::async_trait;
use onestep_core::ExecutionError;
use onestep_core::components::{
    COMPONENTS_TABLE_ABSENT, ComponentDigest, ComponentStat, ComponentStore, assemble, corrupt,
    prepare,
};
use rusqlite::{Connection, OptionalExtension, params};

use crate::backend::SqliteBackend;
use crate::errors::{OpError, OpResult};
use crate::rows::{parse_time, ts};
use crate::schema::{component_chunks_table, components_table, q};

/// The quoted header and chunks tables.
#[derive(Clone)]
struct Tables {
    header: String,
    chunks: String,
}

impl SqliteBackend {
    fn component_tables(&self) -> Result<Tables, ExecutionError> {
        if self.schema_report().features.components_tables {
            Ok(Tables {
                header: q(&components_table(self.tables())),
                chunks: q(&component_chunks_table(self.tables())),
            })
        } else {
            Err(ExecutionError::invalid(COMPONENTS_TABLE_ABSENT))
        }
    }
}

fn stat_in(c: &Connection, t: &Tables, d: &ComponentDigest) -> OpResult<Option<ComponentStat>> {
    let row = c
        .prepare_cached(&format!(
            "SELECT size, chunks, created_at FROM {} WHERE digest = ?1",
            t.header
        ))?
        .query_row(params![d.as_str()], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
            ))
        })
        .optional()?;
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
        let p = prepare(bytes)?;
        let t = self.component_tables()?;
        let digest = p.digest.clone();
        let size = p.size as i64;
        let chunks: Vec<Vec<u8>> = p.chunks.iter().map(|c| c.to_vec()).collect();
        self.run("component_put", || {
            let (t, digest, chunks) = (t.clone(), digest.clone(), chunks.clone());
            self.write(move |b, c| {
                let present = c
                    .prepare_cached(&format!("SELECT 1 FROM {} WHERE digest = ?1", t.header))?
                    .query_row(params![digest.as_str()], |_| Ok(()))
                    .optional()?;
                if present.is_some() {
                    return Ok(());
                }
                {
                    let mut st = c.prepare_cached(&format!(
                        "INSERT INTO {} (digest, seq, bytes) VALUES (?1, ?2, ?3) \
                         ON CONFLICT (digest, seq) DO NOTHING",
                        t.chunks
                    ))?;
                    for (seq, chunk) in chunks.iter().enumerate() {
                        st.execute(params![digest.as_str(), seq as i64, chunk])?;
                    }
                }
                c.prepare_cached(&format!(
                    "INSERT INTO {} (digest, size, chunks, created_at) VALUES (?1, ?2, ?3, ?4) \
                     ON CONFLICT (digest) DO NOTHING",
                    t.header
                ))?
                .execute(params![
                    digest.as_str(),
                    size,
                    chunks.len() as i64,
                    ts(b.now())
                ])?;
                Ok(())
            })
        })
        .await?;
        Ok(p.digest)
    }

    async fn get(&self, digest: &ComponentDigest) -> Result<Option<Vec<u8>>, ExecutionError> {
        let t = self.component_tables()?;
        self.run("component_get", || {
            let (t, d) = (t.clone(), digest.clone());
            self.read(move |_, c| {
                let Some(stat) = stat_in(c, &t, &d)? else {
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
            self.read(move |_, c| stat_in(c, &t, &d))
        })
        .await
    }
}
