//! The per-attempt cap on open host handles
//! ([`SandboxSettings::max_open_handles`](crate::SandboxSettings::max_open_handles)).
//!
//! A guest holds host resources through WASI handles: a descriptor opened with
//! `open-at` is an open file or directory of the worker process, a stream
//! made from a file (`read-via-stream`, `write-via-stream`,
//! `append-via-stream`) keeps that file open even after the descriptor is
//! dropped, and a directory listing (`read-directory`) holds the whole
//! listing in host memory. Without a cap one guest could use up the worker's
//! file descriptors and make every other task's attempts fail.
//!
//! This module owns:
//! - [`OpenHandles`], the count of the handles one attempt holds (part of the
//!   store's [`State`]);
//! - [`add_to_linker`], which replaces the five WASI functions that create
//!   such handles, and the destructors of the four resource types, by
//!   wrappers around wasmtime-wasi's own implementations. A creation over
//!   the cap returns the WASI `error-code` `quota` to the guest (WASI 0.2
//!   has no "too many open files" code) and the host is unaffected; dropping
//!   a handle frees its slot.
//!
//! Preopened directories and stdio are granted by the sandbox, not opened by
//! the guest, and are not counted.

use std::collections::HashSet;

use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource, ResourceType};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    DescriptorFlags, ErrorCode, Filesize, HostDescriptor, HostDirectoryEntryStream, OpenFlags,
    PathFlags,
};
use wasmtime_wasi::p2::bindings::io::streams::{HostInputStream, HostOutputStream};
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, FsResult, ReaddirIterator};

use crate::error::Error;
use crate::state::State;

/// The WASI 0.2 interfaces as wasmtime-wasi names them in the linker (the
/// newest 0.2 version it implements; guests importing any 0.2.x resolve to
/// it). [`add_to_linker`] checks they exist, so a wasmtime upgrade that
/// renames them fails the runtime's start instead of silently lifting the cap.
const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";
const IO_STREAMS: &str = "wasi:io/streams@0.2.12";

/// The handles one attempt holds, by table index (`rep`) of the resource.
#[derive(Debug)]
pub(crate) struct OpenHandles {
    max: usize,
    open: HashSet<u32>,
    /// Creations refused because the cap was reached.
    denied: u64,
}

impl OpenHandles {
    pub(crate) fn new(max: u32) -> Self {
        Self {
            max: max as usize,
            open: HashSet::new(),
            denied: 0,
        }
    }

    /// Ok when one more handle fits; otherwise counts the refusal and returns
    /// the error value the guest gets.
    fn admit(&mut self) -> Result<(), ErrorCode> {
        if self.open.len() >= self.max {
            self.denied += 1;
            return Err(ErrorCode::Quota);
        }
        Ok(())
    }

    fn opened(&mut self, rep: u32) {
        self.open.insert(rep);
    }

    fn closed(&mut self, rep: u32) {
        self.open.remove(&rep);
    }

    /// Handles currently open.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.open.len()
    }

    /// Creations refused so far.
    pub(crate) fn denied(&self) -> u64 {
        self.denied
    }
}

/// wasmtime-wasi's result: its own error code becomes the guest's error
/// value, anything else stays a trap (as in wasmtime-wasi's bindings).
fn guest_result<R>(r: FsResult<R>) -> wasmtime::Result<Result<R, ErrorCode>> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(e) => Ok(Err(e.downcast()?)),
    }
}

/// Counts a successfully created handle.
fn record<R: 'static>(
    state: &mut State,
    r: wasmtime::Result<Result<Resource<R>, ErrorCode>>,
) -> wasmtime::Result<(Result<Resource<R>, ErrorCode>,)> {
    let r = r?;
    if let Ok(res) = &r {
        state.handles.opened(res.rep());
    }
    Ok((r,))
}

/// Refused before calling wasmtime-wasi: the cap is reached.
fn refuse<R>(state: &mut State) -> Option<(Result<R, ErrorCode>,)> {
    match state.handles.admit() {
        Ok(()) => None,
        Err(code) => {
            if state.handles.denied() == 1 {
                tracing::warn!(
                    target: "onestep_wasm::guest",
                    execution_id = %state.ids.execution_id,
                    attempt_id = %state.ids.attempt_id,
                    max_open_handles = state.handles.max,
                    "guest reached its open-handle cap; further opens fail with error-code quota"
                );
            }
            Some((Err(code),))
        }
    }
}

/// True when `linker` defines `func` in `instance` (probed on a copy that
/// refuses redefinitions).
fn defines(linker: &Linker<State>, instance: &str, func: &str) -> bool {
    let mut probe = linker.clone();
    probe.allow_shadowing(false);
    let Ok(mut inst) = probe.instance(instance) else {
        return false;
    };
    inst.func_wrap(func, |_: StoreContextMut<'_, State>, (): ()| Ok(()))
        .is_err()
}

/// Replaces, in a linker that already has WASI p2, the functions that create
/// counted handles and the destructors of their resources.
pub(crate) fn add_to_linker(linker: &mut Linker<State>) -> Result<(), Error> {
    for (instance, func) in [
        (FILESYSTEM_TYPES, "[method]descriptor.open-at"),
        (IO_STREAMS, "[method]input-stream.read"),
    ] {
        if !defines(linker, instance, func) {
            return Err(Error::Engine(format!(
                "the WASI linker has no `{func}` in `{instance}`: the open-handle cap \
                 (onestep-wasm handles.rs) must be updated for this wasmtime-wasi"
            )));
        }
    }
    linker.allow_shadowing(true);
    let r = define(linker);
    linker.allow_shadowing(false);
    r.map_err(|e| Error::Engine(format!("open-handle cap linker: {e:#}")))
}

fn define(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    let mut fs = linker.instance(FILESYSTEM_TYPES)?;
    fs.func_wrap_async(
        "[method]descriptor.open-at",
        |mut store: StoreContextMut<'_, State>,
         (fd, path_flags, path, oflags, flags): (
            Resource<Descriptor>,
            PathFlags,
            String,
            OpenFlags,
            DescriptorFlags,
        )| {
            Box::new(async move {
                let state = store.data_mut();
                if let Some(refused) = refuse(state) {
                    return Ok(refused);
                }
                let r = {
                    let mut view = state.filesystem();
                    HostDescriptor::open_at(&mut view, fd, path_flags, path, oflags, flags).await
                };
                record(state, guest_result(r))
            })
        },
    )?;
    fs.func_wrap_async(
        "[method]descriptor.read-directory",
        |mut store: StoreContextMut<'_, State>, (fd,): (Resource<Descriptor>,)| {
            Box::new(async move {
                let state = store.data_mut();
                if let Some(refused) = refuse(state) {
                    return Ok(refused);
                }
                let r = {
                    let mut view = state.filesystem();
                    HostDescriptor::read_directory(&mut view, fd).await
                };
                record::<ReaddirIterator>(state, guest_result(r))
            })
        },
    )?;
    fs.func_wrap(
        "[method]descriptor.read-via-stream",
        |mut store: StoreContextMut<'_, State>, (fd, offset): (Resource<Descriptor>, Filesize)| {
            let state = store.data_mut();
            if let Some(refused) = refuse(state) {
                return Ok(refused);
            }
            let r = HostDescriptor::read_via_stream(&mut state.filesystem(), fd, offset);
            record::<DynInputStream>(state, guest_result(r))
        },
    )?;
    fs.func_wrap(
        "[method]descriptor.write-via-stream",
        |mut store: StoreContextMut<'_, State>, (fd, offset): (Resource<Descriptor>, Filesize)| {
            let state = store.data_mut();
            if let Some(refused) = refuse(state) {
                return Ok(refused);
            }
            let r = HostDescriptor::write_via_stream(&mut state.filesystem(), fd, offset);
            record::<DynOutputStream>(state, guest_result(r))
        },
    )?;
    fs.func_wrap(
        "[method]descriptor.append-via-stream",
        |mut store: StoreContextMut<'_, State>, (fd,): (Resource<Descriptor>,)| {
            let state = store.data_mut();
            if let Some(refused) = refuse(state) {
                return Ok(refused);
            }
            let r = HostDescriptor::append_via_stream(&mut state.filesystem(), fd);
            record::<DynOutputStream>(state, guest_result(r))
        },
    )?;
    // Destructors: wasmtime-wasi's, then the slot is freed (only when the
    // entry really left the table).
    fs.resource(
        "descriptor",
        ResourceType::host::<Descriptor>(),
        |mut store: StoreContextMut<'_, State>, rep| {
            let state = store.data_mut();
            HostDescriptor::drop(&mut state.filesystem(), Resource::new_own(rep))?;
            state.handles.closed(rep);
            Ok(())
        },
    )?;
    fs.resource(
        "directory-entry-stream",
        ResourceType::host::<ReaddirIterator>(),
        |mut store: StoreContextMut<'_, State>, rep| {
            let state = store.data_mut();
            HostDirectoryEntryStream::drop(&mut state.filesystem(), Resource::new_own(rep))?;
            state.handles.closed(rep);
            Ok(())
        },
    )?;

    let mut io = linker.instance(IO_STREAMS)?;
    io.resource_async(
        "input-stream",
        ResourceType::host::<DynInputStream>(),
        |mut store: StoreContextMut<'_, State>, rep| {
            Box::new(async move {
                let state = store.data_mut();
                HostInputStream::drop(&mut state.table, Resource::new_own(rep)).await?;
                state.handles.closed(rep);
                Ok(())
            })
        },
    )?;
    io.resource_async(
        "output-stream",
        ResourceType::host::<DynOutputStream>(),
        |mut store: StoreContextMut<'_, State>, rep| {
            Box::new(async move {
                let state = store.data_mut();
                HostOutputStream::drop(&mut state.table, Resource::new_own(rep)).await?;
                state.handles.closed(rep);
                Ok(())
            })
        },
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_admits_max_handles_and_a_close_frees_a_slot() {
        let mut h = OpenHandles::new(2);
        assert!(h.admit().is_ok());
        h.opened(7);
        assert!(h.admit().is_ok());
        h.opened(9);
        assert_eq!(h.admit(), Err(ErrorCode::Quota));
        assert_eq!(h.denied(), 1);
        // Closing something that was never counted (a preopen, stdio) frees nothing.
        h.closed(3);
        assert_eq!(h.admit(), Err(ErrorCode::Quota));
        h.closed(7);
        assert_eq!(h.len(), 1);
        assert!(h.admit().is_ok());
        assert_eq!(h.denied(), 2);
    }

    #[test]
    fn a_zero_cap_admits_nothing() {
        assert_eq!(OpenHandles::new(0).admit(), Err(ErrorCode::Quota));
    }
}
