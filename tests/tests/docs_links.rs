//! Keeps the documentation self-contained (no database, no binary needed):
//!
//! * every `docs/<name>.md` or `docs/<name>.md#anchor` mentioned in a source, config, script or doc
//!   file names an existing file and, when an anchor is given, a heading of that file (GitHub's
//!   heading slugs: lower case, punctuation dropped, spaces as `-`, `-1`, `-2` … for repeats);
//! * every relative Markdown link (`[text](other.md#anchor)`, `[text](#anchor)`, `[text](../wit/)`)
//!   resolves the same way;
//! * nothing cites a numbered section of a document outside the repository (a section sign
//!   followed by a number): such rules are written down in `docs/semantics.md` and cited by
//!   anchor.
//!
//! Failures name `file:line` and what is missing.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Component, Path, PathBuf};

/// File kinds whose text is scanned.
const SCANNED_EXTENSIONS: [&str; 8] = ["rs", "md", "toml", "yaml", "yml", "wit", "sh", "py"];

/// Directory names never entered (build output, VCS data, virtual environments).
const SKIPPED_DIRS: [&str; 5] = ["target", ".git", "node_modules", ".venv", "out"];

fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// Every scanned file under `root`, sorted, as paths relative to it.
fn scanned_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                let hidden = name.starts_with('.') && name != ".ci";
                if !hidden && !SKIPPED_DIRS.contains(&name.as_str()) {
                    stack.push(path);
                }
            } else if kind.is_file() {
                let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
                let ci_script =
                    path.parent().and_then(Path::file_name) == Some(std::ffi::OsStr::new(".ci"));
                if (SCANNED_EXTENSIONS.contains(&ext) || ci_script)
                    && let Ok(rel) = path.strip_prefix(root)
                {
                    out.push(rel.to_path_buf());
                }
            }
        }
    }
    out.sort();
    out
}

/// GitHub's anchor for a heading text.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Lines of a Markdown text outside fenced code blocks, with their 1-based numbers.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// The anchors of every heading of a Markdown text.
fn anchors(text: &str) -> Vec<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(line[hashes..].trim().trim_end_matches('#'));
        let n = seen.entry(base.clone()).or_insert(0);
        out.push(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// `docs/<name>.md[#anchor]` mentions in one line: (path, anchor).
fn docs_mentions(line: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("docs/") {
        let tail = &rest[at + "docs/".len()..];
        let name_len = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
            .unwrap_or(tail.len());
        let name = tail[..name_len].trim_end_matches('.');
        let after = &tail[name.len()..];
        if let Some(stem) = name.strip_suffix(".md").filter(|s| !s.is_empty()) {
            let anchor = after.strip_prefix('#').map(|a| {
                let len = a
                    .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-')))
                    .unwrap_or(a.len());
                a[..len].to_owned()
            });
            out.push((format!("docs/{stem}.md"), anchor.filter(|a| !a.is_empty())));
        }
        rest = &tail[name_len..];
    }
    out
}

/// Relative Markdown link targets in one line: `](target)`.
fn markdown_links(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let tail = &rest[at + 2..];
        let Some(end) = tail.find(')') else {
            break;
        };
        let target = tail[..end].trim();
        let external = target.contains("://") || target.starts_with("mailto:");
        if !target.is_empty() && !external && !target.contains(char::is_whitespace) {
            out.push(target.to_owned());
        }
        rest = &tail[end..];
    }
    out
}

/// `dir/../x` → `x`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// True when `line` cites a numbered section (a section sign, optional space, a digit).
fn cites_a_section(line: &str) -> bool {
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{a7}' {
            while chars.peek() == Some(&' ') {
                chars.next();
            }
            if chars.peek().is_some_and(char::is_ascii_digit) {
                return true;
            }
        }
    }
    false
}

struct Checker {
    root: PathBuf,
    anchors: BTreeMap<PathBuf, Vec<String>>,
    failures: Vec<String>,
}

impl Checker {
    fn check_target(&mut self, at: &str, target: &Path, anchor: Option<&str>) {
        let target = normalize(target);
        let full = self.root.join(&target);
        if !full.exists() {
            self.failures
                .push(format!("{at}: {} does not exist", target.display()));
            return;
        }
        let Some(anchor) = anchor else {
            return;
        };
        if target.extension().and_then(|e| e.to_str()) != Some("md") {
            return;
        }
        if !self.anchors.contains_key(&target) {
            let text = fs::read_to_string(&full).unwrap_or_default();
            self.anchors.insert(target.clone(), anchors(&text));
        }
        let known = self
            .anchors
            .get(&target)
            .is_some_and(|a| a.iter().any(|x| x == anchor));
        if !known {
            self.failures.push(format!(
                "{at}: {} has no heading with anchor #{anchor}",
                target.display()
            ));
        }
    }
}

#[test]
fn docs_references_resolve_and_nothing_cites_an_outside_section() {
    let root = repo_root();
    let mut checker = Checker {
        root: root.clone(),
        anchors: BTreeMap::new(),
        failures: Vec::new(),
    };
    let files = scanned_files(&root);
    assert!(
        files.iter().any(|f| f == Path::new("docs/semantics.md")),
        "docs/semantics.md not found under {}",
        root.display()
    );
    for file in &files {
        let Ok(text) = fs::read_to_string(root.join(file)) else {
            continue;
        };
        let is_md = file.extension().and_then(|e| e.to_str()) == Some("md");
        let lines: Vec<(usize, &str)> = if is_md {
            prose_lines(&text)
        } else {
            text.lines().enumerate().map(|(i, l)| (i + 1, l)).collect()
        };
        for (n, line) in lines {
            let at = format!("{}:{n}", file.display());
            if cites_a_section(line) {
                checker.failures.push(format!(
                    "{at}: cites a numbered section of an outside document; point at a docs/*.md anchor instead: {}",
                    line.trim()
                ));
            }
            for (path, anchor) in docs_mentions(line) {
                checker.check_target(&at, Path::new(&path), anchor.as_deref());
            }
            if is_md {
                let dir = file.parent().unwrap_or(Path::new(""));
                for link in markdown_links(line) {
                    let (path, anchor) = match link.split_once('#') {
                        Some((p, a)) => (p, Some(a)),
                        None => (link.as_str(), None),
                    };
                    let target = if path.is_empty() {
                        file.clone()
                    } else {
                        dir.join(path)
                    };
                    checker.check_target(&at, &target, anchor);
                }
            }
        }
    }
    assert!(
        checker.failures.is_empty(),
        "{} broken documentation reference(s):\n{}",
        checker.failures.len(),
        checker.failures.join("\n")
    );
}

#[test]
fn slugs_follow_github() {
    assert_eq!(slug("Lease fencing"), "lease-fencing");
    assert_eq!(
        slug("Faults (`retry.rs`, `errors.rs`)"),
        "faults-retryrs-errorsrs"
    );
    assert_eq!(slug("`onestep check` output"), "onestep-check-output");
    assert_eq!(slug("`mysql_execution_source`"), "mysql_execution_source");
    let text = "# A\n## Same\n```\n## Not a heading\n```\n## Same\n";
    assert_eq!(anchors(text), ["a", "same", "same-1"]);
}

#[test]
fn mentions_and_citations_are_recognised() {
    assert_eq!(
        docs_mentions("see docs/semantics.md#lease-fencing, and docs/schema.md."),
        [
            (
                "docs/semantics.md".to_owned(),
                Some("lease-fencing".to_owned())
            ),
            ("docs/schema.md".to_owned(), None),
        ]
    );
    assert!(docs_mentions("docs/<file>.md and docs/ alone").is_empty());
    assert_eq!(
        markdown_links("[a](x.md#b) [c](https://e.org/) [d](#e)"),
        ["x.md#b", "#e"]
    );
    let sign = '\u{a7}';
    assert!(cites_a_section(&format!("(spec {sign}8.3)")));
    assert!(cites_a_section(&format!("{sign} 2")));
    assert!(!cites_a_section(&format!("a lone {sign} sign")));
}
