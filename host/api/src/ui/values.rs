//! The bounded preview of a JSON value on the detail page (docs/ui.md#values): at most
//! [`PREVIEW_BYTES`] of pretty JSON and [`PREVIEW_DEPTH`] levels, the whole value downloadable.

use serde::Serialize;
use serde_json::Value;

/// Values longer than this (pretty-printed bytes) are shown collapsed, with their size.
pub const COLLAPSE_BYTES: usize = 2048;
/// At most this many bytes of pretty JSON of one value on the detail page; the rest is in the
/// download (docs/ui.md#values).
pub const PREVIEW_BYTES: usize = 64 * 1024;
/// Arrays and objects nested deeper than this are shown as `"[… n items]"` / `"{… n keys}"`.
pub const PREVIEW_DEPTH: usize = 16;

/// One JSON value of the detail page: a bounded preview, one string per line (each line goes
/// through the template's formatter, so the newlines of the pretty JSON stay newlines).
#[derive(Debug, Serialize)]
pub struct ValueBlock {
    name: &'static str,
    /// Size of the whole value as compact JSON.
    size: String,
    collapsed: bool,
    lines: Vec<String>,
    /// The preview stops at [`PREVIEW_BYTES`].
    cut: bool,
    /// Containers deeper than [`PREVIEW_DEPTH`] are summarized.
    deep: bool,
}

/// Human size of `n` bytes.
pub fn size_text(n: usize) -> String {
    if n < 1024 {
        format!("{n} B")
    } else if n < 1024 * 1024 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", n as f64 / (1024.0 * 1024.0))
    }
}

/// A writer that keeps at most `cap` bytes and then fails, so serialization stops there.
struct Capped {
    buf: Vec<u8>,
    cap: usize,
    full: bool,
}

impl std::io::Write for Capped {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        let room = self.cap - self.buf.len();
        if data.len() > room {
            self.buf.extend_from_slice(&data[..room]);
            self.full = true;
            return Err(std::io::Error::other("preview full"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A writer that only counts bytes.
struct Count(usize);

impl std::io::Write for Count {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0 += data.len();
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `value` serialized with containers below `depth` levels summarized as a string.
struct Clipped<'a> {
    value: &'a Value,
    depth: usize,
    deep: &'a std::cell::Cell<bool>,
}

impl Serialize for Clipped<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        let inner = |value| Clipped {
            value,
            depth: self.depth + 1,
            deep: self.deep,
        };
        match self.value {
            Value::Array(items) if self.depth >= PREVIEW_DEPTH && !items.is_empty() => {
                self.deep.set(true);
                s.serialize_str(&format!("[… {} items]", items.len()))
            }
            Value::Object(map) if self.depth >= PREVIEW_DEPTH && !map.is_empty() => {
                self.deep.set(true);
                s.serialize_str(&format!("{{… {} keys}}", map.len()))
            }
            Value::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&inner(item))?;
                }
                seq.end()
            }
            Value::Object(map) => {
                let mut m = s.serialize_map(Some(map.len()))?;
                for (k, v) in map {
                    m.serialize_entry(k, &inner(v))?;
                }
                m.end()
            }
            leaf => leaf.serialize(s),
        }
    }
}

/// A bounded preview of `value` as pretty JSON: at most [`PREVIEW_BYTES`] bytes and
/// [`PREVIEW_DEPTH`] levels (docs/ui.md#values); the work done is bounded by the preview, not
/// by the value (a 960 KB payload nested 100 deep used to print 121 MB of indentation).
pub fn value_block(name: &'static str, value: &Value) -> ValueBlock {
    let mut count = Count(0);
    // Counting cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    let deep = std::cell::Cell::new(false);
    let mut out = Capped {
        buf: Vec::new(),
        cap: PREVIEW_BYTES,
        full: false,
    };
    let clipped = Clipped {
        value,
        depth: 0,
        deep: &deep,
    };
    // The only error is the cap (`full`).
    let _ = serde_json::to_writer_pretty(&mut out, &clipped);
    let text = String::from_utf8_lossy(&out.buf);
    let text = if out.full {
        // Drop the partial last line.
        text.rsplit_once('\n').map_or("", |(head, _)| head)
    } else {
        &text
    };
    ValueBlock {
        name,
        size: size_text(count.0),
        collapsed: out.buf.len() > COLLAPSE_BYTES,
        lines: text.lines().map(str::to_owned).collect(),
        cut: out.full,
        deep: deep.get(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ui::render::{AttemptRow, Step, render};
    use minijinja::context;
    use serde_json::json;

    #[test]
    fn sizes_and_collapse() {
        assert_eq!(size_text(10), "10 B");
        assert_eq!(size_text(4096), "4.0 KiB");
        let big = json!({"text": "x".repeat(5000)});
        let b = value_block("payload", &big);
        assert!(b.collapsed && b.size.ends_with("KiB"));
        assert!(!value_block("payload", &json!({"a": 1})).collapsed);
    }

    /// The payload of issue 28 item 8: ~960 KB of zeros in an array nested 120 deep, which
    /// pretty-printed whole was a 121 MB fragment.
    fn nested_payload() -> Value {
        let mut v = Value::Array(vec![json!(0); 480_000]);
        for _ in 0..120 {
            v = Value::Array(vec![v]);
        }
        v
    }

    #[test]
    fn a_deep_payload_renders_a_bounded_preview_with_a_download_link() {
        let payload = nested_payload();
        let compact = serde_json::to_string(&payload).unwrap().len();
        assert!((900_000..1_000_000).contains(&compact), "{compact}");
        let started = std::time::Instant::now();
        let block = value_block("payload", &payload);
        assert!(block.deep && !block.cut);
        let html = render(
            "detail.html",
            context! {
                e => context! { id => "id-1", task_name => "t", status => "queued", terminal => false },
                timeline => Vec::<Step>::new(),
                attempts => Vec::<AttemptRow>::new(),
                values => vec![block],
                with_values => true,
                preview_kib => PREVIEW_BYTES / 1024,
                preview_depth => PREVIEW_DEPTH,
            },
        )
        .unwrap();
        println!(
            "detail fragment of a {compact}-byte payload nested 121 deep: {} bytes in {:?}",
            html.len(),
            started.elapsed()
        );
        assert!(html.len() <= 256 * 1024, "{} bytes", html.len());
        assert!(html.contains("id=\"truncated-payload\""), "{html}");
        assert!(html.contains("data-download=\"payload\""));
        assert!(html.contains("[… 1 items]"));
        // A wide value is cut at the byte cap instead.
        let wide = json!(
            (0..100_000)
                .map(|i| format!("item {i}"))
                .collect::<Vec<_>>()
        );
        let b = value_block("result", &wide);
        assert!(b.cut && !b.deep);
        assert!(b.lines.iter().map(|l| l.len() + 1).sum::<usize>() <= PREVIEW_BYTES);
        // A small value is whole.
        let small = value_block("metadata", &json!({"a": [1, 2]}));
        assert!(!small.cut && !small.deep && !small.collapsed);
        assert_eq!(
            small.lines.join("\n"),
            "{\n  \"a\": [\n    1,\n    2\n  ]\n}"
        );
    }
}
