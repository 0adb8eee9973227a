//! Turning [`SandboxSettings`] into a WASI context: preopens, environment,
//! captured stdio, and no network.

use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder};

use crate::capture::Capture;
use crate::outcome::InvokeError;
use crate::settings::SandboxSettings;

/// Builds the WASI context of one invocation. Nothing is inherited from the
/// host: no args, no env beyond the allow-list, no stdin, no directories
/// beyond the preopens, no sockets and no name resolution. Clocks and random
/// are the WASI defaults (real clocks, a CSPRNG seeded per context).
pub(crate) fn build_wasi(
    s: &SandboxSettings,
    stdout: &Capture,
    stderr: &Capture,
) -> Result<WasiCtx, InvokeError> {
    let mut b = WasiCtxBuilder::new();
    b.stdout(stdout.clone()).stderr(stderr.clone());

    for name in &s.env {
        if s.env_values.contains_key(name) {
            continue;
        }
        if let Ok(value) = std::env::var(name) {
            b.env(name, value);
        }
    }
    for (name, value) in &s.env_values {
        b.env(name, value);
    }

    for p in &s.preopens {
        if !p.guest.starts_with('/') {
            return Err(InvokeError::Sandbox(format!(
                "preopen guest path {:?} must be absolute",
                p.guest
            )));
        }
        if !p.host.is_dir() {
            return Err(InvokeError::Sandbox(format!(
                "preopen host path {} is not a directory",
                p.host.display()
            )));
        }
        let perms = if p.writable() {
            FsPerms::ReadWrite
        } else {
            FsPerms::ReadOnly
        };
        b.preopened_dir(&p.host, &p.guest, perms)
            .map_err(|e| InvokeError::Sandbox(format!("preopen {}: {e}", p.host.display())))?;
    }

    // No network: no TCP, no UDP, no DNS, and every address refused even if
    // one of the above were switched on.
    b.allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .socket_addr_check(|_, _| Box::pin(async { false }));
    Ok(b.build())
}
