//! Shared helpers: building guests, one shared runtime, temp dirs, RSS.

use onestep_wasm::{Handler, InvocationContext, Runtime, RuntimeSettings};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub const RUST_GUESTS: [&str; 12] = [
    "echo",
    "fetch",
    "agent",
    "summarize",
    "countdown",
    "flaky",
    "misbehave",
    "not-a-handler",
    "inspect",
    "future-world",
    "steps",
    "steps-http",
];

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn guest_path(name: &str) -> PathBuf {
    repo_root()
        .join("guest-examples/out")
        .join(format!("{name}.wasm"))
}

static BUILD: Mutex<()> = Mutex::new(());

fn run_build_script(skip_python: bool) {
    let script = repo_root().join("scripts/build-guests.sh");
    let status = Command::new("bash")
        .arg(&script)
        .env("SKIP_PYTHON", if skip_python { "1" } else { "0" })
        .env("SKIP_JS", "1")
        .status()
        .expect("run scripts/build-guests.sh");
    assert!(status.success(), "scripts/build-guests.sh failed: {status}");
}

/// Builds the Rust guests if any is missing.
pub fn ensure_rust_guests() {
    let _g = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    if RUST_GUESTS.iter().any(|g| !guest_path(g).exists()) {
        run_build_script(true);
    }
}

/// The Python guests (componentize-py).
pub const PYTHON_GUESTS: [&str; 2] = ["python-echo", "python-agent"];

/// Builds every guest (including the Python ones) if a Python one is missing.
pub fn ensure_python_guest() {
    ensure_rust_guests();
    let _g = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    if PYTHON_GUESTS.iter().any(|g| !guest_path(g).exists()) {
        run_build_script(false);
    }
}

pub fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("onestep-wasm-cache")
}

/// One runtime for most tests (pooling auto, disk cache in the target dir).
pub fn runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        Runtime::new(RuntimeSettings {
            cache_dir: Some(cache_dir()),
            ..RuntimeSettings::default()
        })
        .expect("runtime")
    })
}

pub fn load(name: &str) -> Handler {
    ensure_rust_guests();
    runtime().load(guest_path(name)).expect("load guest")
}

pub fn ctx(attempt: u32) -> InvocationContext {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    InvocationContext {
        execution_id: format!("exec-{n}"),
        attempt_id: format!("att-{n}-{attempt}"),
        attempt,
        task_name: "test-task".into(),
        namespace: "tests".into(),
        worker_id: "worker-test".into(),
        metadata_json: "{}".into(),
        params_json: "{}".into(),
        ..Default::default()
    }
}

static NEXT: AtomicU64 = AtomicU64::new(0);

/// Tests that measure time or process memory run alone: they take the write
/// side; every other test takes the read side.
static EXCLUSIVE: RwLock<()> = RwLock::new(());

pub fn shared() -> RwLockReadGuard<'static, ()> {
    EXCLUSIVE.read().unwrap_or_else(|e| e.into_inner())
}

pub fn exclusive() -> RwLockWriteGuard<'static, ()> {
    EXCLUSIVE.write().unwrap_or_else(|e| e.into_inner())
}

/// A directory under the target tmp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(label: &str) -> Self {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let p = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("t-{}-{label}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        Self(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn status_kib(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .expect("field in /proc/self/status")
}

/// Current resident set size in bytes.
pub fn rss_bytes() -> u64 {
    status_kib("VmRSS:") * 1024
}

/// Peak resident set size (since the last [`reset_peak_rss`]) in bytes.
pub fn peak_rss_bytes() -> u64 {
    status_kib("VmHWM:") * 1024
}

/// Resets VmHWM to the current RSS (Linux `clear_refs` value 5).
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

pub fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).expect("valid JSON")
}

/// What a `tracing-subscriber` formatter wrote, shared with the test (the writer of the log
/// tests).
#[derive(Clone, Default)]
pub struct Buf(std::sync::Arc<Mutex<Vec<u8>>>);

impl Buf {
    /// Everything written so far (lossy UTF-8).
    pub fn text(&self) -> String {
        let bytes = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl std::io::Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Buf {
    type Writer = Buf;
    fn make_writer(&'a self) -> Buf {
        self.clone()
    }
}
