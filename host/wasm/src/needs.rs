//! What a component declares it needs per instantiation ([`Needs`]: core
//! instances, linear memories, tables, the largest initial table, the initial
//! bytes of its memories and tables), read from the component's binary with
//! `wasmparser` when it is loaded, and the check of those needs against a
//! task's [`SandboxSettings`] (so a component that could never run within
//! its task's limits is refused at load, not at run time).
//!
//! The count follows what wasmtime allocates when it instantiates a component:
//! every `core instance (instantiate $module)` creates one core instance with
//! the memories and tables the module *defines* (imported ones are shared, not
//! allocated); a nested component costs what its own instantiations cost, once
//! per `instance (instantiate $component)`; a module or component that is only
//! declared costs nothing. Modules or components that come from imports or
//! from another instance's exports cannot be measured: then the needs are
//! unknown ([`Needs::measured`] is false) and only the run-time limits apply.

use crate::settings::SandboxSettings;

/// Bytes the host spends per table element (wasmtime 48 stores a `funcref`
/// or `externref` element as one pointer: 8 bytes on 64-bit hosts). Table
/// growth is charged this much per element against the sandbox's
/// `memory_limit_bytes`.
pub const TABLE_ELEMENT_BYTES: u64 = std::mem::size_of::<usize>() as u64;

/// The needs of a component that exceed a sandbox's per-attempt limits: one problem per
/// limit, each naming the need, what the component declares and the `sandbox:` key that
/// raises it; shown joined with `; `.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", problems.join("; "))]
pub struct OverLimits {
    /// One sentence per exceeded limit.
    pub problems: Vec<String>,
}

/// Resources one instantiation of a component allocates (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Needs {
    /// Whether every instantiated module could be measured. When false the
    /// figures are a lower bound and [`Needs::check`] accepts the component
    /// (the run-time limits still bound it).
    pub measured: bool,
    /// Core instances created.
    pub instances: u64,
    /// Linear memories defined by those instances.
    pub memories: u64,
    /// Tables defined by those instances.
    pub tables: u64,
    /// Initial size of the largest table, in elements.
    pub max_initial_table_elements: u64,
    /// Initial size of all memories plus all tables (at
    /// [`TABLE_ELEMENT_BYTES`] per element), in bytes.
    pub initial_bytes: u64,
}

impl Needs {
    /// Reads the needs of a component binary. Only the sections that declare
    /// instances, memories and tables are read; an unreadable binary yields
    /// unmeasured needs (compilation reports the real error).
    pub fn of_component(bytes: &[u8]) -> Needs {
        match walk(bytes) {
            Some(Cost::Known(c)) => c.into_needs(true),
            Some(Cost::Unknown(c)) => c.into_needs(false),
            None => Needs::default(),
        }
    }

    /// Checks these needs against a sandbox's per-attempt limits. The error
    /// names the need, what the component declares and what the sandbox
    /// allows (under the `sandbox:` key that raises it).
    pub fn check(&self, sandbox: &SandboxSettings) -> Result<(), OverLimits> {
        if !self.measured {
            return Ok(());
        }
        let over = |what: &str, need: u64, key: &str, limit: u64| {
            (need > limit).then(|| {
                format!("it needs {need} {what} per attempt but the task's sandbox allows {key}: {limit}")
            })
        };
        let problems: Vec<String> = [
            over(
                "core instances",
                self.instances,
                "max_instances",
                u64::from(sandbox.max_instances),
            ),
            over(
                "linear memories",
                self.memories,
                "max_memories",
                u64::from(sandbox.max_memories),
            ),
            over(
                "tables",
                self.tables,
                "max_tables",
                u64::from(sandbox.max_tables),
            ),
            over(
                "table elements (its largest table's initial size)",
                self.max_initial_table_elements,
                "max_table_elements",
                sandbox.max_table_elements,
            ),
            over(
                "bytes of initial memory and tables",
                self.initial_bytes,
                "memory_limit_bytes",
                sandbox.memory_limit_bytes,
            ),
        ]
        .into_iter()
        .flatten()
        .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(OverLimits { problems })
        }
    }
}

/// Resources of one instantiation, as a sum.
#[derive(Debug, Clone, Copy, Default)]
struct Sum {
    instances: u64,
    memories: u64,
    tables: u64,
    max_table: u64,
    bytes: u64,
}

impl Sum {
    fn add(&mut self, o: &Sum) {
        self.instances = self.instances.saturating_add(o.instances);
        self.memories = self.memories.saturating_add(o.memories);
        self.tables = self.tables.saturating_add(o.tables);
        self.max_table = self.max_table.max(o.max_table);
        self.bytes = self.bytes.saturating_add(o.bytes);
    }

    fn into_needs(self, measured: bool) -> Needs {
        Needs {
            measured,
            instances: self.instances,
            memories: self.memories,
            tables: self.tables,
            max_initial_table_elements: self.max_table,
            initial_bytes: self.bytes,
        }
    }
}

/// The cost of instantiating a module or component: known, or a lower bound
/// when part of it could not be measured.
#[derive(Debug, Clone, Copy)]
enum Cost {
    Known(Sum),
    Unknown(Sum),
}

impl Cost {
    fn sum(&self) -> &Sum {
        match self {
            Cost::Known(s) | Cost::Unknown(s) => s,
        }
    }

    fn add(&mut self, o: &Cost) {
        let mut sum = *self.sum();
        sum.add(o.sum());
        *self = match (&*self, o) {
            (Cost::Known(_), Cost::Known(_)) => Cost::Known(sum),
            _ => Cost::Unknown(sum),
        };
    }
}

const UNKNOWN: Cost = Cost::Unknown(Sum {
    instances: 0,
    memories: 0,
    tables: 0,
    max_table: 0,
    bytes: 0,
});

/// A module or component being read (nesting follows the binary).
enum Frame {
    Module(Sum),
    Component {
        /// The core module index space: what instantiating each costs.
        modules: Vec<Cost>,
        /// The component index space.
        components: Vec<Cost>,
        /// What instantiating this component costs so far.
        cost: Cost,
    },
}

fn walk(bytes: &[u8]) -> Option<Cost> {
    use wasmparser::{
        ComponentAlias, ComponentExternalKind, ComponentInstance, ComponentOuterAliasKind,
        ComponentTypeRef, Encoding, Instance, Parser, Payload,
    };

    let mut stack: Vec<Frame> = Vec::new();
    for payload in Parser::new(0).parse_all(bytes) {
        let payload = payload.ok()?;
        match payload {
            Payload::Version { encoding, .. } => stack.push(match encoding {
                Encoding::Module => Frame::Module(Sum {
                    instances: 1,
                    ..Sum::default()
                }),
                Encoding::Component => Frame::Component {
                    modules: Vec::new(),
                    components: Vec::new(),
                    cost: Cost::Known(Sum::default()),
                },
            }),
            Payload::MemorySection(reader) => {
                if let Some(Frame::Module(sum)) = stack.last_mut() {
                    for memory in reader {
                        let m = memory.ok()?;
                        sum.memories += 1;
                        let page = 1u64 << m.page_size_log2.unwrap_or(16);
                        sum.bytes = sum.bytes.saturating_add(m.initial.saturating_mul(page));
                    }
                }
            }
            Payload::TableSection(reader) => {
                if let Some(Frame::Module(sum)) = stack.last_mut() {
                    for table in reader {
                        let t = table.ok()?.ty;
                        sum.tables += 1;
                        sum.max_table = sum.max_table.max(t.initial);
                        sum.bytes = sum
                            .bytes
                            .saturating_add(t.initial.saturating_mul(TABLE_ELEMENT_BYTES));
                    }
                }
            }
            Payload::ComponentImportSection(reader) => {
                if let Some(Frame::Component {
                    modules,
                    components,
                    ..
                }) = stack.last_mut()
                {
                    for import in reader {
                        match import.ok()?.ty {
                            ComponentTypeRef::Module(_) => modules.push(UNKNOWN),
                            ComponentTypeRef::Component(_) => components.push(UNKNOWN),
                            _ => {}
                        }
                    }
                }
            }
            Payload::ComponentAliasSection(reader) => {
                for alias in reader {
                    let alias = alias.ok()?;
                    let (is_module, cost) = match alias {
                        ComponentAlias::InstanceExport { kind, .. } => match kind {
                            ComponentExternalKind::Module => (true, UNKNOWN),
                            ComponentExternalKind::Component => (false, UNKNOWN),
                            _ => continue,
                        },
                        ComponentAlias::Outer { kind, count, index } => {
                            let is_module = match kind {
                                ComponentOuterAliasKind::CoreModule => true,
                                ComponentOuterAliasKind::Component => false,
                                _ => continue,
                            };
                            let depth = usize::try_from(count).ok()?;
                            let outer = stack.len().checked_sub(1 + depth)?;
                            let Frame::Component {
                                modules,
                                components,
                                ..
                            } = &stack[outer]
                            else {
                                return None;
                            };
                            let space = if is_module { modules } else { components };
                            (is_module, *space.get(usize::try_from(index).ok()?)?)
                        }
                        ComponentAlias::CoreInstanceExport { .. } => continue,
                    };
                    if let Some(Frame::Component {
                        modules,
                        components,
                        ..
                    }) = stack.last_mut()
                    {
                        if is_module {
                            modules.push(cost);
                        } else {
                            components.push(cost);
                        }
                    }
                }
            }
            Payload::ComponentExportSection(reader) => {
                if let Some(Frame::Component {
                    modules,
                    components,
                    ..
                }) = stack.last_mut()
                {
                    // An export adds an index referring to the exported item.
                    for export in reader {
                        let e = export.ok()?;
                        let i = usize::try_from(e.index).ok()?;
                        match e.kind {
                            ComponentExternalKind::Module => {
                                let c = *modules.get(i)?;
                                modules.push(c);
                            }
                            ComponentExternalKind::Component => {
                                let c = *components.get(i)?;
                                components.push(c);
                            }
                            _ => {}
                        }
                    }
                }
            }
            Payload::InstanceSection(reader) => {
                if let Some(Frame::Component { modules, cost, .. }) = stack.last_mut() {
                    for instance in reader {
                        if let Instance::Instantiate { module_index, .. } = instance.ok()? {
                            cost.add(modules.get(usize::try_from(module_index).ok()?)?);
                        }
                    }
                }
            }
            Payload::ComponentInstanceSection(reader) => {
                if let Some(Frame::Component {
                    components, cost, ..
                }) = stack.last_mut()
                {
                    for instance in reader {
                        if let ComponentInstance::Instantiate {
                            component_index, ..
                        } = instance.ok()?
                        {
                            cost.add(components.get(usize::try_from(component_index).ok()?)?);
                        }
                    }
                }
            }
            Payload::End(_) => {
                let (is_module, cost) = match stack.pop()? {
                    Frame::Module(sum) => (true, Cost::Known(sum)),
                    Frame::Component { cost, .. } => (false, cost),
                };
                match stack.last_mut() {
                    None => return Some(cost),
                    Some(Frame::Component {
                        modules,
                        components,
                        ..
                    }) => {
                        if is_module {
                            modules.push(cost);
                        } else {
                            components.push(cost);
                        }
                    }
                    Some(Frame::Module(_)) => return None,
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unmeasured_needs_pass_any_sandbox() {
        let needs = Needs {
            measured: false,
            tables: 1000,
            ..Needs::default()
        };
        assert_eq!(needs.check(&SandboxSettings::default()), Ok(()));
    }

    #[test]
    fn each_need_over_its_limit_is_named() {
        let sandbox = SandboxSettings {
            max_tables: 8,
            max_memories: 2,
            ..SandboxSettings::default()
        };
        let needs = Needs {
            measured: true,
            instances: 1,
            memories: 3,
            tables: 52,
            ..Needs::default()
        };
        let message = needs
            .check(&sandbox)
            .expect_err("over the limits")
            .to_string();
        assert!(message.contains("52 tables"), "{message}");
        assert!(message.contains("max_tables: 8"), "{message}");
        assert!(message.contains("3 linear memories"), "{message}");
        assert!(message.contains("max_memories: 2"), "{message}");
        assert!(!message.contains("core instances"), "{message}");
    }

    #[test]
    fn garbage_is_unmeasured() {
        assert!(!Needs::of_component(b"\0asm garbage").measured);
    }
}
