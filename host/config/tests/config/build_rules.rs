//! build_rules
