//! What components declare they need per instantiation, checked against the
//! sandbox when loaded; the defaults fit every example guest.

use crate::common::*;
use onestep_wasm::{Needs, SandboxSettings};

/// wasmtime's own count of memories and tables for a component file.
fn wasmtime_count(bytes: &[u8]) -> (u32, u32, Option<u64>) {
    let mut cfg = wasmtime::Config::new();
    cfg.wasm_component_model(true);
    let engine = wasmtime::Engine::new(&cfg).expect("engine");
    let c = wasmtime::component::Component::from_binary(&engine, bytes).expect("component");
    let r = c.resources_required().expect("no imported modules");
    (r.num_memories, r.num_tables, r.max_initial_table_size)
}

#[test]
fn example_guests_fit_the_default_limits_and_match_wasmtime_counts() {
    ensure_python_guest();
    let _g = shared();
    let mut names: Vec<&str> = RUST_GUESTS.to_vec();
    names.extend(PYTHON_GUESTS);
    for name in names {
        let bytes = std::fs::read(guest_path(name)).expect("read guest");
        let needs = Needs::of_component(&bytes);
        eprintln!("{name}: {needs:?}");
        assert!(needs.measured, "{name}");
        let (memories, tables, max_table) = wasmtime_count(&bytes);
        assert_eq!(needs.memories, u64::from(memories), "{name} memories");
        assert_eq!(needs.tables, u64::from(tables), "{name} tables");
        assert_eq!(
            needs.max_initial_table_elements,
            max_table.unwrap_or(0),
            "{name} largest table"
        );
        assert_eq!(needs.check(&SandboxSettings::default()), Ok(()), "{name}");
    }
}
