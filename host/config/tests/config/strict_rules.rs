//! strict_rules
