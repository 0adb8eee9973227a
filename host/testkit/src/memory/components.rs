//! The in-memory component store (docs/semantics.md#component-store) for fast tests: the same
//! splitting, joining and checking as the SQL backends ([`onestep_core::components::prepare`],
//! [`onestep_core::components::assemble`]), over a map of header and chunks.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use onestep_core::ExecutionError;
use onestep_core::components::{
    ComponentDigest, ComponentStat, ComponentStore, HeldComponent, assemble, prepare,
};
use onestep_core::time::SharedClock;

struct Stored {
    stat: ComponentStat,
    chunks: Vec<Vec<u8>>,
}

/// Components kept in process, on a clock (for `created_at`).
pub struct MemoryComponents {
    clock: SharedClock,
    stored: Mutex<HashMap<ComponentDigest, Stored>>,
    /// (namespace, digest) → when the namespace last stored the bytes.
    holders: Mutex<HashMap<(String, ComponentDigest), chrono::DateTime<chrono::Utc>>>,
}

impl std::fmt::Debug for MemoryComponents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryComponents")
            .field("components", &self.lock().len())
            .finish()
    }
}

impl MemoryComponents {
    /// An empty store on `clock`.
    pub fn new(clock: SharedClock) -> MemoryComponents {
        MemoryComponents {
            clock,
            stored: Mutex::new(HashMap::new()),
            holders: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<ComponentDigest, Stored>> {
        self.stored.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Flips one bit of chunk `seq` of `digest` (the conformance cases' corruption); false when
    /// there is no such chunk.
    pub fn corrupt_chunk(&self, digest: &ComponentDigest, seq: u32) -> bool {
        let mut map = self.lock();
        match map
            .get_mut(digest)
            .and_then(|s| s.chunks.get_mut(seq as usize))
            .and_then(|c| c.first_mut())
        {
            Some(b) => {
                *b ^= 1;
                true
            }
            None => false,
        }
    }

    /// The header of `digest`, read without awaiting (for the deployments beside this store).
    pub fn stat_now(&self, digest: &ComponentDigest) -> Option<ComponentStat> {
        self.lock().get(digest).map(|s| s.stat.clone())
    }

    fn holders(
        &self,
    ) -> MutexGuard<'_, HashMap<(String, ComponentDigest), chrono::DateTime<chrono::Utc>>> {
        self.holders.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The garbage collection of [`super::MemoryDeployments`]: forgets every holder stored
    /// before `cutoff` whose namespace has no deployment of the digest (`referenced_by`), then
    /// removes every component stored before `cutoff` that no deployment references
    /// (`referenced`) and no holder keeps.
    pub fn remove_unreferenced(
        &self,
        referenced: &std::collections::HashSet<ComponentDigest>,
        referenced_by: &std::collections::HashSet<(String, ComponentDigest)>,
        cutoff: chrono::DateTime<chrono::Utc>,
    ) -> onestep_core::deployments::GcReport {
        let mut report = onestep_core::deployments::GcReport::default();
        let mut holders = self.holders();
        holders.retain(|key, at| *at >= cutoff || referenced_by.contains(key));
        let held: std::collections::HashSet<ComponentDigest> =
            holders.keys().map(|(_, d)| d.clone()).collect();
        self.lock().retain(|d, s| {
            let keep = referenced.contains(d) || held.contains(d) || s.stat.created_at >= cutoff;
            if !keep {
                report.components += 1;
                report.bytes += s.stat.size;
            }
            keep
        });
        report
    }

    /// Header rows and chunk rows kept for `digest`.
    pub fn rows(&self, digest: &ComponentDigest) -> (u64, u64) {
        self.lock()
            .get(digest)
            .map_or((0, 0), |s| (1, s.chunks.len() as u64))
    }
}

#[async_trait]
impl ComponentStore for MemoryComponents {
    async fn put(&self, bytes: &[u8]) -> Result<ComponentDigest, ExecutionError> {
        let p = prepare(bytes)?;
        let now = onestep_core::time::truncate_micros(self.clock.now());
        self.lock()
            .entry(p.digest.clone())
            .or_insert_with(|| Stored {
                stat: ComponentStat {
                    digest: p.digest.clone(),
                    size: p.size,
                    chunks: p.chunk_count(),
                    created_at: now,
                },
                chunks: p.chunks.iter().map(|c| c.to_vec()).collect(),
            });
        Ok(p.digest)
    }

    async fn get(&self, digest: &ComponentDigest) -> Result<Option<Vec<u8>>, ExecutionError> {
        let (stat, rows) = {
            let map = self.lock();
            let Some(s) = map.get(digest) else {
                return Ok(None);
            };
            let rows: Vec<(u32, Vec<u8>)> = s
                .chunks
                .iter()
                .enumerate()
                .map(|(i, c)| (i as u32, c.clone()))
                .collect();
            (s.stat.clone(), rows)
        };
        assemble(digest, stat.size, stat.chunks, rows).map(Some)
    }

    async fn stat(
        &self,
        digest: &ComponentDigest,
    ) -> Result<Option<ComponentStat>, ExecutionError> {
        Ok(self.lock().get(digest).map(|s| s.stat.clone()))
    }

    async fn put_for(
        &self,
        namespace: &str,
        bytes: &[u8],
    ) -> Result<HeldComponent, ExecutionError> {
        onestep_core::deployments::check_name("namespace", namespace)
            .map_err(|e| ExecutionError::invalid(e.to_string()))?;
        let digest = self.put(bytes).await?;
        let now = onestep_core::time::truncate_micros(self.clock.now());
        let created = self
            .holders()
            .insert((namespace.to_owned(), digest.clone()), now)
            .is_none();
        Ok(HeldComponent { digest, created })
    }

    async fn stat_for(
        &self,
        namespace: &str,
        digest: &ComponentDigest,
    ) -> Result<Option<ComponentStat>, ExecutionError> {
        if !self
            .holders()
            .contains_key(&(namespace.to_owned(), digest.clone()))
        {
            return Ok(None);
        }
        self.stat(digest).await
    }
}
