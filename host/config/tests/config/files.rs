//! Every file under config/ loads, non-strict and strict.

use std::path::{Path, PathBuf};

use onestep_config::{EnvLookup, LoadOptions};

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            yaml_files(&p, out);
        } else if matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")) {
            out.push(p);
        }
    }
}

#[test]
fn every_config_file_loads_in_both_modes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config");
    let mut files = Vec::new();
    yaml_files(&root, &mut files);
    files.sort();
    assert!(files.len() >= 6, "found {files:?}");
    // Component files are built by scripts/build-guests.sh; check them only when present.
    let guests_built = root.join("../guest-examples/out/echo.wasm").is_file();
    for f in &files {
        for strict in [false, true] {
            let opts = LoadOptions {
                strict,
                strict_env: false,
                env: EnvLookup::isolated([
                    ("ONESTEP_API_TOKENS", "t1=team-a"),
                    ("OPENAI_API_KEY", "sk-test"),
                ]),
                check_files: guests_built,
                ..LoadOptions::default()
            };
            let cfg = onestep_config::load(f, &opts)
                .unwrap_or_else(|e| panic!("{} (strict={strict}): {e}", f.display()));
            assert!(!cfg.summary().is_empty());
            serde_json::to_string(&cfg.json_summary()).expect("json summary");
        }
    }
}
