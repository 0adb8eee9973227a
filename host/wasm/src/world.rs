//! Which handler world a component implements, told apart before and after
//! compilation so that an unloadable file gets the message that says why
//! (docs/cli.md#component-checks):
//!
//! - [`check_binary`]: the bytes are a WebAssembly *component* (not a core
//!   module, not something else), read from the 8-byte preamble;
//! - [`check_shape`]: the compiled component imports only served versions of
//!   `onestep:handler` ([`crate::WIT_PACKAGES`]) and exports a function
//!   `handle` (otherwise it is a component of another world);
//! - [`Pre`]: the prepared `handle` export, `0.3.0`'s (a component importing
//!   `onestep:handler/durable@0.3.0`), `0.2.0`'s (its context carries
//!   `params`) or `0.1.0`'s, chosen by the imports and the export's type.

use std::collections::BTreeSet;

use wasmtime::component::{Component, InstancePre};

use crate::bindings;
use crate::error::Error;
use crate::state::State;

/// The package whose worlds handlers implement.
const PACKAGE: &str = "onestep:handler";

/// `\0asm`, the first four bytes of every WebAssembly binary.
const MAGIC: &[u8; 4] = b"\0asm";

/// Refuses bytes that are not a WebAssembly component before compiling them:
/// anything without the `\0asm` magic, and core modules (version 1), with a
/// message saying what the file is and how a handler is built.
pub(crate) fn check_binary(name: &str, bytes: &[u8]) -> Result<(), Error> {
    let not = |message: String| {
        Err(Error::NotAComponent {
            name: name.to_string(),
            message,
        })
    };
    if bytes.len() < 8 || &bytes[..4] != MAGIC {
        return not(format!(
            "it is not a WebAssembly file ({} bytes, no `\\0asm` header)",
            bytes.len()
        ));
    }
    // Bytes 4..8: version (u16 LE) and layer (u16 LE): a core module is
    // version 1 layer 0, a component layer 1.
    let layer = u16::from_le_bytes([bytes[6], bytes[7]]);
    if layer == 0 {
        return not(
            "it is a core WebAssembly module, not a component: build the handler for the \
             wasm32-wasip2 target (cargo build --target wasm32-wasip2), or wrap the module \
             with `wasm-tools component new`"
                .to_string(),
        );
    }
    Ok(())
}

/// The versions of `onestep:handler` that `component` imports interfaces of
/// (`onestep:handler/types@0.2.0` → `onestep:handler@0.2.0`).
pub(crate) fn imported_versions(component: &Component) -> BTreeSet<String> {
    let engine = component.engine();
    component
        .component_type()
        .imports(engine)
        .filter_map(|(name, _)| {
            let rest = name.strip_prefix(PACKAGE)?.strip_prefix('/')?;
            let (_, version) = rest.split_once('@')?;
            Some(format!("{PACKAGE}@{version}"))
        })
        .collect()
}

/// Refuses, before linking, a component built against a version of
/// `onestep:handler` this host does not serve ([`Error::WorldVersion`]) and
/// one that exports no `handle` function ([`Error::NotAHandler`], a
/// component of another world, e.g. a WASI command).
pub(crate) fn check_shape(name: &str, component: &Component) -> Result<(), Error> {
    let unserved: Vec<String> = imported_versions(component)
        .into_iter()
        .filter(|v| !crate::WIT_PACKAGES.contains(&v.as_str()))
        .collect();
    if !unserved.is_empty() {
        return Err(Error::WorldVersion {
            name: name.to_string(),
            found: unserved.join(", "),
            served: crate::WIT_PACKAGES.join(", "),
        });
    }
    let engine = component.engine();
    let exports: Vec<String> = component
        .component_type()
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    if !exports.iter().any(|e| e == "handle") {
        let what = if exports.is_empty() {
            "nothing".to_string()
        } else {
            exports.join(", ")
        };
        return Err(Error::NotAHandler {
            name: name.to_string(),
            message: format!("it exports {what}, not the function `handle`"),
        });
    }
    Ok(())
}

/// A linked component's `handle` export, prepared for one of the served
/// versions. Both versions' `host` imports are in the linker; the export
/// differs in the context record only.
#[derive(Clone)]
pub(crate) enum Pre {
    /// `onestep:handler@0.1.0`: the context has no `params`.
    V1(bindings::HandlerPre<State>),
    /// `onestep:handler@0.2.0` (world `handler` or `compute`): the context
    /// carries the task's `params`.
    V2(bindings::v2::HandlerPre<State>),
    /// `onestep:handler@0.3.0` (world `handler` or `compute`): `0.2.0`'s
    /// context, and the component imports `durable`.
    V3(bindings::v3::HandlerPre<State>),
}

impl Pre {
    /// Prepares the `handle` export of `component`: `0.2.0`'s when its type
    /// matches, else `0.1.0`'s. When neither matches, the error is the type
    /// mismatch against the version the component's imports name (`0.1.0`
    /// when they name none).
    pub(crate) fn new(
        name: &str,
        component: &Component,
        instance_pre: InstancePre<State>,
    ) -> Result<Pre, Error> {
        // `0.3.0`'s export has the same type as `0.2.0`'s: the imports tell them apart.
        if imported_versions(component).contains(crate::WIT_PACKAGES[2]) {
            return bindings::v3::HandlerPre::new(instance_pre)
                .map(Pre::V3)
                .map_err(|e| Error::NotAHandler {
                    name: name.to_string(),
                    message: format!(
                        "its `handle` does not have the type of {}: {e:#}",
                        crate::WIT_PACKAGES[2]
                    ),
                });
        }
        let v2 = match bindings::v2::HandlerPre::new(instance_pre.clone()) {
            Ok(pre) => return Ok(Pre::V2(pre)),
            Err(e) => e,
        };
        let v1 = match bindings::HandlerPre::new(instance_pre) {
            Ok(pre) => return Ok(Pre::V1(pre)),
            Err(e) => e,
        };
        let claims_v2 = imported_versions(component).contains(crate::WIT_PACKAGES[1]);
        let (version, e) = if claims_v2 {
            (crate::WIT_PACKAGES[1], v2)
        } else {
            (crate::WIT_PACKAGES[0], v1)
        };
        Err(Error::NotAHandler {
            name: name.to_string(),
            message: format!("its `handle` does not have the type of {version}: {e:#}"),
        })
    }

    /// The world version the export implements (`onestep:handler@0.1.0` or
    /// `@0.2.0`).
    pub(crate) fn version(&self) -> &'static str {
        match self {
            Pre::V1(_) => crate::WIT_PACKAGES[0],
            Pre::V2(_) => crate::WIT_PACKAGES[1],
            Pre::V3(_) => crate::WIT_PACKAGES[2],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(bytes: &[u8]) -> String {
        match check_binary("x.wasm", bytes) {
            Err(e) => e.to_string(),
            Ok(()) => "accepted".into(),
        }
    }

    #[test]
    fn garbage_and_core_modules_are_not_components() {
        assert_eq!(
            message(b"garbage"),
            "component x.wasm is not a WebAssembly component: it is not a WebAssembly file \
             (7 bytes, no `\\0asm` header)"
        );
        assert!(
            message(b"\0asm\x01\0\0\0")
                .contains("it is a core WebAssembly module, not a component"),
            "{}",
            message(b"\0asm\x01\0\0\0")
        );
        assert_eq!(message(b"\0asm\x0d\0\x01\0"), "accepted");
    }
}
