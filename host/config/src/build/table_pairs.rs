//! The rule that ties sources together: the worker opens one backend per connector and table
//! pair, so the sources of the tasks that share a pair must agree on that backend's options
//! (value limits, `auto_create`, `reclaim_batch_size`). Checked at load time, so `onestep check`
//! rejects the same files as `onestep run`.

use std::collections::BTreeMap;

use super::resources::ResourceEntry;
use crate::error::ConfigError;
use crate::model::{ExecutionSourceConfig, TaskConfig};

/// Checks the sources of `tasks`, in task order: the first source of each (connector, table,
/// attempts table) sets the options, a later one that differs is an error at its resource.
pub fn check_shared_tables(
    tasks: &[TaskConfig],
    sources: &BTreeMap<String, ExecutionSourceConfig>,
    resources: &BTreeMap<String, ResourceEntry<'_>>,
) -> Result<(), ConfigError> {
    let mut first: BTreeMap<(&str, &str, &str), &ExecutionSourceConfig> = BTreeMap::new();
    // The sources of the tasks, in task order, then the sources of deployed tasks.
    let used = tasks
        .iter()
        .filter_map(|t| sources.get(&t.source))
        .chain(sources.values().filter(|s| s.deployed.is_some()));
    for source in used {
        let key = (
            source.connector.as_str(),
            source.table.as_str(),
            source.attempts_table.as_str(),
        );
        let Some(other) = first.get(&key) else {
            first.insert(key, source);
            continue;
        };
        if other.limits != source.limits
            || other.auto_create != source.auto_create
            || other.reclaim_batch_size != source.reclaim_batch_size
        {
            let message = format!(
                "sources '{}' and '{}' share connector '{}' and tables {}/{} but set different \
                 limits, auto_create or reclaim_batch_size: give them the same values or \
                 different tables",
                other.name, source.name, source.connector, source.table, source.attempts_table
            );
            return Err(match resources.get(&source.name) {
                Some(e) => ConfigError::at(e.node, &e.path(), message),
                None => ConfigError::Invalid {
                    path: None,
                    message,
                    line: 0,
                    column: 0,
                },
            });
        }
    }
    Ok(())
}
