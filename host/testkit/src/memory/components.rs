//! The in-memory component store (docs/semantics.md#component-store) for fast tests: the same
//! splitting, joining and checking as the SQL backends ([`onestep_core::components::prepare`],
//! [`onestep_core::components::assemble`]), over a map of header and chunks.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;
use onestep_core::ExecutionError;
use onestep_core::components::{ComponentDigest, ComponentStat, ComponentStore, assemble, prepare};
use onestep_core::time::SharedClock;

struct Stored {
    stat: ComponentStat,
    chunks: Vec<Vec<u8>>,
}

/// Components kept in process, on a clock (for `created_at`).
pub struct MemoryComponents {
    clock: SharedClock,
    stored: Mutex<HashMap<ComponentDigest, Stored>>,
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

    /// Removes every component stored before `cutoff` whose digest is not in `referenced`
    /// (the garbage collection of [`super::MemoryDeployments`]).
    pub fn remove_unreferenced(
        &self,
        referenced: &std::collections::HashSet<ComponentDigest>,
        cutoff: chrono::DateTime<chrono::Utc>,
    ) -> onestep_core::deployments::GcReport {
        let mut report = onestep_core::deployments::GcReport::default();
        self.lock().retain(|d, s| {
            let keep = referenced.contains(d) || s.stat.created_at >= cutoff;
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
}
