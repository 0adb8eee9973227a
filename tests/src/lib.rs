//! End-to-end test support (placeholder).
