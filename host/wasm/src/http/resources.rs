//! What one attempt may hold in host memory through `wasi:http` resources
//! (docs/security.md#http-resources).
//!
//! A guest's `wasi:http` objects live in the host, outside
//! `memory_limit_bytes`: header `fields` (each up to 128 KiB in
//! wasmtime-wasi-http), outgoing requests and their bodies (a body buffers
//! what the guest wrote until it is sent), response futures, responses.
//! Two bounds make that memory finite per attempt:
//! - a count: the store's resource table holds at most
//!   [`table_capacity`] entries at once (`max_http_handles` plus the
//!   `max_open_handles` of files plus [`RESERVED_HANDLES`] for stdio,
//!   preopens and pollables); one more creation traps, and
//!   [`describe_limit`] names the limit on the attempt's outcome;
//! - bytes: [`FieldsBudget`], the header bytes (as wasmtime-wasi-http counts
//!   them) of the `fields` the guest builds and of the outgoing requests
//!   and responses holding them, at most `http_fields_limit_bytes` at once.
//!   [`add_to_linker`] wraps the functions that add bytes (`fields.set`,
//!   `append`, `from-list`, `clone`, the request and response constructors)
//!   and the destructors that give them back; one more byte traps with a
//!   message naming the limit (wasmtime-wasi-http traps the same way on a
//!   `fields` over its own size limit: `header-error` has no "too large").
//!
//! Bodies are bounded by the count and by the buffer of each (one chunk of
//! [`BODY_CHUNK_BYTES`], set in `send.rs`'s hooks).

use std::collections::HashMap;
use std::mem::size_of;

use http::{HeaderMap, HeaderName, HeaderValue};
use wasmtime::StoreContextMut;
use wasmtime::component::{Linker, Resource, ResourceTable, ResourceTableError, ResourceType};
use wasmtime_wasi_http::FieldMap;
use wasmtime_wasi_http::WasiHttpView;
use wasmtime_wasi_http::p2::bindings::http::types::{
    HeaderError, HostFields, HostOutgoingRequest, HostOutgoingResponse,
};
use wasmtime_wasi_http::p2::types::{
    HostOutgoingRequest as OutgoingRequest, HostOutgoingResponse as OutgoingResponse,
};

use crate::error::Error;
use crate::state::State;

/// The `wasi:http/types` interface as wasmtime-wasi-http names it in the
/// linker ([`add_to_linker`] checks it exists).
const HTTP_TYPES: &str = "wasi:http/types@0.2.12";

/// Table entries granted besides `max_open_handles` and `max_http_handles`:
/// stdio streams, preopened directories, pollables.
pub(crate) const RESERVED_HANDLES: usize = 64;

/// The chunk an outgoing body buffers before the host takes it (the
/// guest's write waits until then): wasmtime-wasi-http's default is 1 MiB.
pub(crate) const BODY_CHUNK_BYTES: usize = 16 * 1024;

/// The most entries the attempt's resource table may hold at once.
pub(crate) fn table_capacity(max_open_handles: u32, max_http_handles: u32) -> usize {
    (max_open_handles as usize)
        .saturating_add(max_http_handles as usize)
        .saturating_add(RESERVED_HANDLES)
}

/// The trap of a `wasi:http` limit, with the message the attempt ends with.
#[derive(Debug)]
struct LimitReached(String);

impl std::fmt::Display for LimitReached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for LimitReached {}

/// The attempt's outcome message when `e` is the trap of a full resource
/// table or of [`FieldsBudget`], otherwise `None`.
pub(crate) fn describe_limit(e: &wasmtime::Error, capacity: usize) -> Option<String> {
    if let Some(limit) = e.chain().find_map(|c| c.downcast_ref::<LimitReached>()) {
        return Some(limit.0.clone());
    }
    let full = e.chain().any(|c| {
        matches!(
            c.downcast_ref::<ResourceTableError>(),
            Some(ResourceTableError::Full)
        )
    });
    full.then(|| {
        format!(
            "the guest holds {capacity} host resources at once, the most its sandbox allows \
             (wasi:http fields, requests, bodies and responses: sandbox.max_http_handles; \
             files: sandbox.max_open_handles; plus {RESERVED_HANDLES}); drop the ones it no \
             longer needs"
        )
    })
}

/// Header bytes as wasmtime-wasi-http's `FieldMap` counts them: each
/// distinct name and each value, with the size of its in-memory struct.
fn name_bytes(name: &str) -> usize {
    name.len() + size_of::<HeaderName>()
}

fn value_bytes(len: usize) -> usize {
    len + size_of::<HeaderValue>()
}

fn map_bytes(map: &HeaderMap) -> usize {
    map.keys().map(|k| name_bytes(k.as_str())).sum::<usize>()
        + map.values().map(|v| value_bytes(v.len())).sum::<usize>()
}

/// What holds the bytes of one charge (to check it is still in the table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holder {
    Fields,
    Request,
    Response,
}

/// The header bytes one attempt holds, by table index of their holder.
#[derive(Debug)]
pub(crate) struct FieldsBudget {
    limit: usize,
    held: usize,
    by_rep: HashMap<u32, (Holder, usize)>,
}

impl FieldsBudget {
    pub(crate) fn new(limit: u64) -> Self {
        FieldsBudget {
            limit: usize::try_from(limit).unwrap_or(usize::MAX),
            held: 0,
            by_rep: HashMap::new(),
        }
    }

    /// Header bytes held now.
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held
    }

    fn set(&mut self, rep: u32, holder: Holder, bytes: usize) {
        let old = self.by_rep.insert(rep, (holder, bytes)).map_or(0, |c| c.1);
        self.held = self.held - old + bytes;
    }

    fn release(&mut self, rep: u32) -> usize {
        let bytes = self.by_rep.remove(&rep).map_or(0, |c| c.1);
        self.held -= bytes;
        bytes
    }

    fn charged(&self, rep: u32) -> usize {
        self.by_rep.get(&rep).map_or(0, |c| c.1)
    }

    /// Forgets the charges whose holder left the table without a destructor
    /// (a request sent by `outgoing-handler.handle`, a response set).
    fn sweep(&mut self, table: &ResourceTable) {
        let gone: Vec<u32> = self
            .by_rep
            .iter()
            .filter(|(rep, (holder, _))| {
                let rep = **rep;
                match holder {
                    Holder::Fields => table.get(&Resource::<FieldMap>::new_own(rep)).is_err(),
                    Holder::Request => table
                        .get(&Resource::<OutgoingRequest>::new_own(rep))
                        .is_err(),
                    Holder::Response => table
                        .get(&Resource::<OutgoingResponse>::new_own(rep))
                        .is_err(),
                }
            })
            .map(|(rep, _)| *rep)
            .collect();
        for rep in gone {
            self.release(rep);
        }
    }

    /// Ok when `more` bytes fit besides `replacing` (the charge they replace).
    fn admit(
        &mut self,
        table: &ResourceTable,
        replacing: usize,
        more: usize,
    ) -> wasmtime::Result<()> {
        let fits = |b: &Self| b.held - replacing.min(b.held) + more <= b.limit;
        if fits(self) {
            return Ok(());
        }
        self.sweep(table);
        if fits(self) {
            return Ok(());
        }
        Err(wasmtime::Error::new(LimitReached(format!(
            "the guest's wasi:http header fields would hold {} bytes, more than its sandbox's \
             http_fields_limit_bytes ({} bytes, counted as wasmtime-wasi-http counts them, for \
             all fields, requests and responses it holds at once); drop the ones it no longer \
             needs",
            self.held - replacing.min(self.held) + more,
            self.limit
        ))))
    }
}

/// The bytes of the `fields` at `rep` (0 if it is not one).
fn fields_bytes(table: &ResourceTable, rep: u32) -> usize {
    table
        .get(&Resource::<FieldMap>::new_own(rep))
        .map_or(0, |f| map_bytes(f))
}

/// The guest's value of a `header-error`, or the trap.
fn header_result<T>(
    r: Result<T, wasmtime_wasi_http::p2::HeaderError>,
) -> wasmtime::Result<Result<T, HeaderError>> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(e) => Ok(Err(e.downcast()?)),
    }
}

/// Replaces, in a linker that already has `wasi:http`, the functions that
/// add header bytes and the destructors that give them back.
pub(crate) fn add_to_linker(linker: &mut Linker<State>) -> Result<(), Error> {
    linker.allow_shadowing(true);
    let r = define(linker);
    linker.allow_shadowing(false);
    r.map_err(|e| {
        Error::Engine(format!(
            "wasi:http resource limits linker ({HTTP_TYPES}; onestep-wasm http/resources.rs \
             must follow wasmtime-wasi-http): {e:#}"
        ))
    })
}

fn define(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    let mut types = linker.instance(HTTP_TYPES)?;
    types.func_wrap(
        "[method]fields.set",
        |mut store: StoreContextMut<'_, State>,
         (fields, name, values): (Resource<FieldMap>, String, Vec<Vec<u8>>)| {
            let state = store.data_mut();
            let rep = fields.rep();
            let more =
                name_bytes(&name) + values.iter().map(|v| value_bytes(v.len())).sum::<usize>();
            state.http_fields.admit(&state.table, 0, more)?;
            let r = HostFields::set(&mut state.http(), fields, name, values);
            let now = fields_bytes(&state.table, rep);
            state.http_fields.set(rep, Holder::Fields, now);
            Ok((header_result(r)?,))
        },
    )?;
    types.func_wrap(
        "[method]fields.append",
        |mut store: StoreContextMut<'_, State>,
         (fields, name, value): (Resource<FieldMap>, String, Vec<u8>)| {
            let state = store.data_mut();
            let rep = fields.rep();
            let more = name_bytes(&name) + value_bytes(value.len());
            state.http_fields.admit(&state.table, 0, more)?;
            let r = HostFields::append(&mut state.http(), fields, name, value);
            let now = fields_bytes(&state.table, rep);
            state.http_fields.set(rep, Holder::Fields, now);
            Ok((header_result(r)?,))
        },
    )?;
    types.func_wrap(
        "[method]fields.delete",
        |mut store: StoreContextMut<'_, State>, (fields, name): (Resource<FieldMap>, String)| {
            let state = store.data_mut();
            let rep = fields.rep();
            let r = HostFields::delete(&mut state.http(), fields, name);
            let now = fields_bytes(&state.table, rep);
            state.http_fields.set(rep, Holder::Fields, now);
            Ok((header_result(r)?,))
        },
    )?;
    types.func_wrap(
        "[static]fields.from-list",
        |mut store: StoreContextMut<'_, State>, (entries,): (Vec<(String, Vec<u8>)>,)| {
            let state = store.data_mut();
            let more = entries
                .iter()
                .map(|(n, v)| name_bytes(n) + value_bytes(v.len()))
                .sum::<usize>();
            state.http_fields.admit(&state.table, 0, more)?;
            let r = HostFields::from_list(&mut state.http(), entries);
            if let Ok(fields) = &r {
                let rep = fields.rep();
                let now = fields_bytes(&state.table, rep);
                state.http_fields.set(rep, Holder::Fields, now);
            }
            Ok((header_result(r)?,))
        },
    )?;
    types.func_wrap(
        "[method]fields.clone",
        |mut store: StoreContextMut<'_, State>, (fields,): (Resource<FieldMap>,)| {
            let state = store.data_mut();
            let more = fields_bytes(&state.table, fields.rep());
            state.http_fields.admit(&state.table, 0, more)?;
            let copy = HostFields::clone(&mut state.http(), fields)?;
            state.http_fields.set(copy.rep(), Holder::Fields, more);
            Ok((copy,))
        },
    )?;
    types.resource(
        "fields",
        ResourceType::host::<FieldMap>(),
        |mut store: StoreContextMut<'_, State>, rep| {
            let state = store.data_mut();
            HostFields::drop(&mut state.http(), Resource::new_own(rep))?;
            state.http_fields.release(rep);
            Ok(())
        },
    )?;
    // The request and the response take over their headers' charge.
    types.func_wrap(
        "[constructor]outgoing-request",
        |mut store: StoreContextMut<'_, State>, (headers,): (Resource<FieldMap>,)| {
            let state = store.data_mut();
            let from = headers.rep();
            let bytes = state
                .http_fields
                .charged(from)
                .max(fields_bytes(&state.table, from));
            state
                .http_fields
                .admit(&state.table, state.http_fields.charged(from), bytes)?;
            let request = HostOutgoingRequest::new(&mut state.http(), headers)?;
            state.http_fields.release(from);
            state.http_fields.set(request.rep(), Holder::Request, bytes);
            Ok((request,))
        },
    )?;
    types.resource(
        "outgoing-request",
        ResourceType::host::<OutgoingRequest>(),
        |mut store: StoreContextMut<'_, State>, rep| {
            let state = store.data_mut();
            HostOutgoingRequest::drop(&mut state.http(), Resource::new_own(rep))?;
            state.http_fields.release(rep);
            Ok(())
        },
    )?;
    types.func_wrap(
        "[constructor]outgoing-response",
        |mut store: StoreContextMut<'_, State>, (headers,): (Resource<FieldMap>,)| {
            let state = store.data_mut();
            let from = headers.rep();
            let bytes = state
                .http_fields
                .charged(from)
                .max(fields_bytes(&state.table, from));
            state
                .http_fields
                .admit(&state.table, state.http_fields.charged(from), bytes)?;
            let response = HostOutgoingResponse::new(&mut state.http(), headers)?;
            state.http_fields.release(from);
            state
                .http_fields
                .set(response.rep(), Holder::Response, bytes);
            Ok((response,))
        },
    )?;
    types.resource(
        "outgoing-response",
        ResourceType::host::<OutgoingResponse>(),
        |mut store: StoreContextMut<'_, State>, rep| {
            let state = store.data_mut();
            HostOutgoingResponse::drop(&mut state.http(), Resource::new_own(rep))?;
            state.http_fields.release(rep);
            Ok(())
        },
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_bytes_are_charged_replaced_and_released() {
        let mut table = ResourceTable::new();
        let held = table.push(FieldMap::new_mutable(1000)).expect("push");
        let mut b = FieldsBudget::new(1000);
        assert!(b.admit(&table, 0, 600).is_ok());
        b.set(held.rep(), Holder::Fields, 600);
        let err = b.admit(&table, 0, 500).expect_err("over the limit");
        assert!(
            err.to_string()
                .contains("http_fields_limit_bytes (1000 bytes"),
            "{err}"
        );
        assert_eq!(b.held(), 600);
        // Once its holder left the table (no destructor ran), the sweep frees it.
        table.delete(held).expect("delete");
        assert!(b.admit(&table, 0, 500).is_ok());
        assert_eq!(b.held(), 0);
        b.set(2, Holder::Request, 900);
        assert!(b.admit(&ResourceTable::new(), 900, 1000).is_ok());
        b.set(2, Holder::Request, 100);
        assert_eq!(b.held(), 100);
        assert_eq!(b.release(2), 100);
        assert_eq!(b.held(), 0);
    }

    #[test]
    fn the_table_capacity_adds_the_reserve() {
        assert_eq!(table_capacity(256, 256), 576);
    }
}
