//! onestep-api: (placeholder; being built).
