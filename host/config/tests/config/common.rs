//! Helpers: temp dirs, loading snippets with an isolated environment.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use onestep_config::{AppConfig, ConfigError, EnvLookup, LoadOptions};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A fresh temporary directory (removed on drop).
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> Self {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let p =
            std::env::temp_dir().join(format!("onestep-config-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("create temp dir");
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).expect("mkdir");
        }
        std::fs::write(&p, text).expect("write");
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Options with an isolated environment and no file checks.
pub fn opts(strict: bool) -> LoadOptions {
    LoadOptions {
        strict,
        env: EnvLookup::isolated(Vec::<(String, String)>::new()),
        check_files: false,
        ..LoadOptions::default()
    }
}

/// Loads YAML text (as if at /nonexistent/app.yaml) with an isolated environment.
pub fn load_text(yaml: &str, strict: bool) -> Result<AppConfig, ConfigError> {
    onestep_config::load_str(yaml, Path::new("/nonexistent/app.yaml"), &opts(strict))
}

/// The error message of loading `yaml`, panicking if it loads.
pub fn err(yaml: &str, strict: bool) -> String {
    match load_text(yaml, strict) {
        Ok(_) => panic!("expected an error for:\n{yaml}"),
        Err(e) => e.to_string(),
    }
}

/// A minimal valid document; `{extra}` is appended.
pub const BASE: &str = "\
app:
  name: demo
resources:
  db:
    type: mysql
    dsn: mysql://root@127.0.0.1/x
  jobs:
    type: mysql_execution_source
    connector: db
    namespace: ns
    task_names: [echo]
tasks:
  - name: echo
    source: jobs
    handler: {component: echo.wasm}
";
