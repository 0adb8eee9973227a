//! `onestep task run … --watch` (docs/cli.md#onestep-task-run): after the first run, waits for
//! the task's component file to change and runs the same attempt again, until interrupted. It
//! rebuilds nothing: the author's build (in another terminal) writes the file.
//!
//! The watch is on the file's directory (builds usually write a new file and rename it over the
//! old one, which a watch on the file itself would lose), filtered on the file's name. Events are
//! debounced ([`QUIET`] without a new one), and a file whose bytes did not change (a `touch`, the
//! same build written twice) is not run again.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{Event, RecursiveMode, Watcher};
use tokio::sync::mpsc;

/// How long the file must stay quiet after a change before it is run again.
pub(crate) const QUIET: Duration = Duration::from_millis(300);

/// A watch on one file.
pub(crate) struct FileWatch {
    path: PathBuf,
    events: mpsc::UnboundedReceiver<()>,
    /// Kept alive for as long as the watch is used.
    _watcher: notify::RecommendedWatcher,
    last: Option<u64>,
}

/// A hash of the file's bytes (`None` when it cannot be read, e.g. mid-write or removed).
fn content_hash(path: &Path) -> Option<u64> {
    let bytes = std::fs::read(path).ok()?;
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    Some(h.finish())
}

impl FileWatch {
    /// Starts watching `path` (its directory must exist). The current contents count as seen.
    pub(crate) fn new(path: &Path) -> anyhow::Result<FileWatch> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = path
            .file_name()
            .map(|n| n.to_os_string())
            .ok_or_else(|| anyhow::anyhow!("{} names no file", path.display()))?;
        let (tx, events) = mpsc::unbounded_channel();
        let mut watcher = notify::recommended_watcher(move |res: notify::Result<Event>| {
            let ours = match &res {
                Ok(event) => event
                    .paths
                    .iter()
                    .any(|p| p.file_name() == Some(name.as_os_str())),
                // A watcher error: look at the file again rather than miss a change.
                Err(_) => true,
            };
            if ours {
                let _ = tx.send(());
            }
        })
        .map_err(|e| anyhow::anyhow!("cannot watch {}: {e}", dir.display()))?;
        watcher
            .watch(&dir, RecursiveMode::NonRecursive)
            .map_err(|e| anyhow::anyhow!("cannot watch {}: {e}", dir.display()))?;
        Ok(FileWatch {
            path: path.to_path_buf(),
            events,
            _watcher: watcher,
            last: content_hash(path),
        })
    }

    /// Waits until the file has new contents: an event about it, then [`QUIET`] without another,
    /// then bytes that differ from the last ones seen. `None` when the watcher stopped.
    pub(crate) async fn changed(&mut self) -> Option<()> {
        loop {
            self.events.recv().await?;
            loop {
                match tokio::time::timeout(QUIET, self.events.recv()).await {
                    Ok(Some(())) => continue,
                    Ok(None) => return None,
                    Err(_) => break,
                }
            }
            let now = content_hash(&self.path);
            if now.is_some() && now != self.last {
                self.last = now;
                return Some(());
            }
        }
    }
}
