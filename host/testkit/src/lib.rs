//! onestep-testkit: (placeholder; being built).
