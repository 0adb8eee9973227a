//! onestep-worker: (placeholder; being built).
