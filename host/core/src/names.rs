//! Table names and derived object names (spec §2.1, §2.2, vectors §14.3). (STUB: being implemented.)

/// `prefix + table + "_" + suffix`, hash-truncated to `max_len` characters (spec §2.2).
pub fn derived_name(prefix: &str, table: &str, suffix: &str, max_len: usize) -> String {
    let _ = (prefix, table, suffix, max_len);
    unimplemented!("names are being implemented")
}
