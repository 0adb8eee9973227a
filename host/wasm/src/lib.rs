//! onestep-wasm: (placeholder; being built).
