//! onestep-config: (placeholder; being built).
