//! The "table hog": a tiny hand-written handler component (WAT) for the
//! instance-pool and table-memory tests. Self-contained (only `wat`), so the
//! end-to-end tests include this file too.

/// A tiny hand-written handler component (WAT) for the instance-pool and
/// table tests: it instantiates a one-table module `extra_tables` times
/// (each a core instance with its own table), and on every call grows each of
/// `grow_tables` tables of its main module by `grow_by` elements, spins
/// `spin` loop iterations, then returns how many growths succeeded (a JSON
/// number).
pub fn table_hog_wat(extra_tables: u32, grow_tables: u32, grow_by: u32, spin: u64) -> String {
    let tables: String = (0..grow_tables)
        .map(|i| format!("(table $t{i} 1 funcref)\n"))
        .collect();
    let grows: String = (0..grow_tables)
        .map(|i| {
            format!(
                "(if (i32.ne (table.grow $t{i} (ref.null func) (i32.const {grow_by})) (i32.const -1))
                   (then (local.set $ok (i32.add (local.get $ok) (i32.const 1)))))\n"
            )
        })
        .collect();
    let instances: String = (0..extra_tables)
        .map(|_| "(core instance (instantiate $one_table))\n".to_string())
        .collect();
    let params = "i32 ".repeat(15);
    format!(
        r#"(component
  (core module $one_table (table 1 funcref))
  (core module $main
    (memory (export "memory") 1)
    {tables}
    (global $heap (mut i32) (i32.const 1024))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $p i32)
      (local.set $p (i32.and
        (i32.add (global.get $heap) (i32.sub (local.get 2) (i32.const 1)))
        (i32.xor (i32.sub (local.get 2) (i32.const 1)) (i32.const -1))))
      (global.set $heap (i32.add (local.get $p) (local.get 3)))
      (local.get $p))
    (func (export "handle") (param {params}) (result i32)
      (local $i i64) (local $ok i32) (local $p i32)
      {grows}
      (block $done
        (loop $spin
          (br_if $done (i64.ge_u (local.get $i) (i64.const {spin})))
          (local.set $i (i64.add (local.get $i) (i64.const 1)))
          (br $spin)))
      ;; the decimal digits of $ok, written backwards ending at 148
      (local.set $p (i32.const 148))
      (loop $digit
        (local.set $p (i32.sub (local.get $p) (i32.const 1)))
        (i32.store8 (local.get $p)
          (i32.add (i32.const 48) (i32.rem_u (local.get $ok) (i32.const 10))))
        (local.set $ok (i32.div_u (local.get $ok) (i32.const 10)))
        (br_if $digit (local.get $ok)))
      ;; result<string, _> at 64: case 0 (ok), then the string at offset 8
      (i32.store8 (i32.const 64) (i32.const 0))
      (i32.store (i32.const 72) (local.get $p))
      (i32.store (i32.const 76) (i32.sub (i32.const 148) (local.get $p)))
      (i32.const 64)))
  (core instance $m (instantiate $main))
  {instances}
  (type $context' (record
    (field "execution-id" string) (field "attempt-id" string) (field "attempt" u32)
    (field "task-name" string) (field "namespace" string) (field "worker-id" string)
    (field "metadata" string)))
  (export $context "context" (type $context'))
  (type $error' (record
    (field "retryable" bool) (field "message" string) (field "retry-after-ms" (option u64))))
  (export $error "handler-error" (type $error'))
  (func $handle (param "ctx" $context) (param "payload" string)
    (result (result string (error $error)))
    (canon lift (core func $m "handle") (memory $m "memory") (realloc (func $m "realloc"))))
  (export "handle" (func $handle))
)"#
    )
}

/// [`table_hog_wat`] as a component binary.
pub fn table_hog(extra_tables: u32, grow_tables: u32, grow_by: u32, spin: u64) -> Vec<u8> {
    wat::parse_str(table_hog_wat(extra_tables, grow_tables, grow_by, spin)).expect("valid WAT")
}
