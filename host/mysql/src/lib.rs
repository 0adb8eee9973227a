//! onestep-mysql: (placeholder; being built).
