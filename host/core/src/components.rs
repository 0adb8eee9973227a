//! The content-addressed component store (docs/semantics.md#component-store): WASM handler
//! components kept in the execution database as blobs named by their SHA-256, the foundation
//! deployments will build on.
//!
//! A component is split into chunks of [`CHUNK_BYTES`] (well under MariaDB's default
//! `max_allowed_packet` of 16 MiB and MySQL 9's 64 MiB) and stored once: putting the same bytes
//! again names the same digest and writes nothing; a stored component is never overwritten.
//! Every read reassembles the chunks and checks the SHA-256 of the whole against the digest, so a
//! missing or altered chunk is reported as a corrupt component ([`ExecutionError::Undecodable`]),
//! never returned as bytes.
//!
//! The splitting, joining and checking live here, once ([`prepare`], [`assemble`]); backends only
//! move rows. `MemoryComponents` in the testkit is the
//! in-process store for tests.

use std::fmt;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use crate::ExecutionError;

/// Bytes per stored chunk (1 MiB): one row of the chunks table stays far below the server's
/// packet limit.
pub const CHUNK_BYTES: usize = 1 << 20;

/// Largest component the store accepts (64 MiB); a larger one is refused before anything is
/// written.
pub const MAX_COMPONENT_BYTES: usize = 64 << 20;

/// The refusal of every component call on tables without the component tables (created by an
/// older onestep), naming the upgrade.
pub const COMPONENTS_TABLE_ABSENT: &str = "the component store's tables are absent (tables \
    created by an older onestep); add them online with `onestep migrate --upgrade`";

const PREFIX: &str = "sha256:";

/// A component's name: `sha256:` and the 64 lowercase hex digits of the SHA-256 of its bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ComponentDigest(String);

impl ComponentDigest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> ComponentDigest {
        ComponentDigest(format!("{PREFIX}{}", hex::encode(Sha256::digest(bytes))))
    }

    /// Parses `sha256:<64 lowercase hex>`; the message names what is allowed.
    pub fn parse(text: &str) -> Result<ComponentDigest, ExecutionError> {
        let hex_part = text.strip_prefix(PREFIX).ok_or_else(|| {
            ExecutionError::invalid(format!(
                "component digest must start with '{PREFIX}' (got {:?})",
                crate::text::truncate_utf8(text, 80)
            ))
        })?;
        if hex_part.len() != 64
            || !hex_part
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(ExecutionError::invalid(format!(
                "component digest must be '{PREFIX}' followed by 64 lowercase hex digits (got {:?})",
                crate::text::truncate_utf8(text, 80)
            )));
        }
        Ok(ComponentDigest(text.to_owned()))
    }

    /// The text form, `sha256:<hex>`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ComponentDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the store knows of one component without reading its chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentStat {
    /// Its digest.
    pub digest: ComponentDigest,
    /// Its size in bytes.
    pub size: u64,
    /// How many chunks hold it (`ceil(size / CHUNK_BYTES)`; 0 for an empty component).
    pub chunks: u32,
    /// When it was first stored (the backend's clock).
    pub created_at: DateTime<Utc>,
}

/// A component ready to be written: its digest, size and chunks, in order.
#[derive(Debug)]
pub struct Prepared<'a> {
    /// The digest of the whole.
    pub digest: ComponentDigest,
    /// Total bytes.
    pub size: u64,
    /// The chunks, `seq` 0, 1, …; each at most [`CHUNK_BYTES`].
    pub chunks: Vec<&'a [u8]>,
}

impl Prepared<'_> {
    /// The chunk count as stored.
    pub fn chunk_count(&self) -> u32 {
        // At most MAX_COMPONENT_BYTES / CHUNK_BYTES = 64 chunks.
        u32::try_from(self.chunks.len()).unwrap_or(u32::MAX)
    }
}

/// Checks the size cap and splits `bytes` into chunks; nothing is written when this refuses.
pub fn prepare(bytes: &[u8]) -> Result<Prepared<'_>, ExecutionError> {
    if bytes.len() > MAX_COMPONENT_BYTES {
        return Err(ExecutionError::Encoding(format!(
            "component is {} bytes; the component store accepts at most {MAX_COMPONENT_BYTES} \
             bytes ({} MiB)",
            bytes.len(),
            MAX_COMPONENT_BYTES >> 20
        )));
    }
    Ok(Prepared {
        digest: ComponentDigest::of(bytes),
        size: bytes.len() as u64,
        chunks: bytes.chunks(CHUNK_BYTES).collect(),
    })
}

/// The error of a stored component that does not verify.
pub fn corrupt(digest: &ComponentDigest, why: impl fmt::Display) -> ExecutionError {
    ExecutionError::Undecodable(format!("stored component {digest} is corrupt: {why}"))
}

/// Joins the chunks read for `digest` (as `(seq, bytes)` in any order) and verifies them against
/// the header (`size`, `chunks`) and the SHA-256 of the whole. A missing, extra or altered chunk
/// is [`corrupt`]; the bytes are returned only when they hash to `digest`.
pub fn assemble(
    digest: &ComponentDigest,
    size: u64,
    chunks: u32,
    mut rows: Vec<(u32, Vec<u8>)>,
) -> Result<Vec<u8>, ExecutionError> {
    rows.sort_by_key(|(seq, _)| *seq);
    if rows.len() != chunks as usize {
        return Err(corrupt(
            digest,
            format!("{} of its {chunks} chunks are stored", rows.len()),
        ));
    }
    let mut out = Vec::with_capacity(usize::try_from(size).unwrap_or(0).min(MAX_COMPONENT_BYTES));
    for (expected, (seq, bytes)) in rows.into_iter().enumerate() {
        if seq as usize != expected {
            return Err(corrupt(digest, format!("chunk {expected} is missing")));
        }
        out.extend_from_slice(&bytes);
    }
    if out.len() as u64 != size {
        return Err(corrupt(
            digest,
            format!(
                "its chunks hold {} bytes, its header says {size}",
                out.len()
            ),
        ));
    }
    let actual = ComponentDigest::of(&out);
    if &actual != digest {
        return Err(corrupt(digest, format!("its bytes hash to {actual}")));
    }
    Ok(out)
}

/// What [`ComponentStore::put_for`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldComponent {
    /// The digest of the bytes.
    pub digest: ComponentDigest,
    /// False when the namespace already held these bytes (nothing new for it). Whether another
    /// namespace stored the same bytes is never told.
    pub created: bool,
}

/// The component store port: content-addressed, chunked, verified on every read.
///
/// The bytes are stored once whoever uploads them, but a tenant may only deploy what it
/// **holds**: bytes it uploaded itself ([`put_for`](Self::put_for), which records the namespace
/// as a holder). A digest is a name, not a capability: knowing another namespace's digest lets
/// a tenant neither deploy it nor learn that it is stored or how large it is
/// ([`stat_for`](Self::stat_for) answers `None`, as for bytes never stored).
#[async_trait]
pub trait ComponentStore: Send + Sync {
    /// Stores `bytes` (at most [`MAX_COMPONENT_BYTES`]) and returns their digest. Idempotent:
    /// the same bytes name the same digest and a stored component is never overwritten; the
    /// chunks and the header are written in one transaction, so a failed put leaves nothing
    /// readable and a retry succeeds.
    async fn put(&self, bytes: &[u8]) -> Result<ComponentDigest, ExecutionError>;

    /// The verified bytes of `digest`, or `None` when no such component is stored.
    async fn get(&self, digest: &ComponentDigest) -> Result<Option<Vec<u8>>, ExecutionError>;

    /// Whether `digest` is stored (its header row exists; the chunks are not read).
    async fn exists(&self, digest: &ComponentDigest) -> Result<bool, ExecutionError> {
        Ok(self.stat(digest).await?.is_some())
    }

    /// Size, chunk count and creation time of `digest`, or `None` when not stored.
    async fn stat(&self, digest: &ComponentDigest)
    -> Result<Option<ComponentStat>, ExecutionError>;

    /// Stores `bytes` like [`put`](Self::put) and records `namespace` as a holder of them, in
    /// the same transaction; storing bytes the namespace already holds refreshes the time it
    /// last stored them (the garbage collection's grace counts from it).
    async fn put_for(&self, namespace: &str, bytes: &[u8])
    -> Result<HeldComponent, ExecutionError>;

    /// [`stat`](Self::stat) of `digest` when `namespace` holds it (it stored the bytes with
    /// [`put_for`](Self::put_for)); `None` otherwise, whether or not another namespace stored
    /// the same bytes.
    async fn stat_for(
        &self,
        namespace: &str,
        digest: &ComponentDigest,
    ) -> Result<Option<ComponentStat>, ExecutionError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_parse_and_name_the_rule() {
        let d = ComponentDigest::of(b"abc");
        assert_eq!(
            d.as_str(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(ComponentDigest::parse(d.as_str()).expect("parse"), d);
        for bad in [
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            "sha256:BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD",
            "sha256:ba78",
            "sha256:zz7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
        ] {
            let e = ComponentDigest::parse(bad).expect_err(bad);
            assert_eq!(e.code(), "invalid_argument");
            assert!(e.to_string().contains("sha256:"), "{e}");
        }
    }

    #[test]
    fn split_join_and_verify() {
        let bytes: Vec<u8> = (0..CHUNK_BYTES * 5 / 2).map(|i| (i % 251) as u8).collect();
        let p = prepare(&bytes).expect("prepare");
        assert_eq!(p.chunk_count(), 3);
        assert_eq!(p.chunks[2].len(), CHUNK_BYTES / 2);
        let rows: Vec<(u32, Vec<u8>)> = p
            .chunks
            .iter()
            .enumerate()
            .rev()
            .map(|(i, c)| (i as u32, c.to_vec()))
            .collect();
        let joined = assemble(&p.digest, p.size, 3, rows.clone()).expect("assemble");
        assert_eq!(joined, bytes);

        let mut altered = rows.clone();
        altered[0].1[7] ^= 1;
        let e = assemble(&p.digest, p.size, 3, altered).expect_err("altered");
        assert!(e.to_string().contains("is corrupt"), "{e}");
        assert_eq!(e.code(), "undecodable_row");

        let e = assemble(&p.digest, p.size, 3, rows[1..].to_vec()).expect_err("missing");
        assert!(e.to_string().contains("2 of its 3 chunks"), "{e}");

        let empty = prepare(b"").expect("empty");
        assert_eq!(empty.chunk_count(), 0);
        assert_eq!(
            assemble(&empty.digest, 0, 0, Vec::new()).expect("empty"),
            b""
        );
    }

    #[test]
    fn over_the_cap_is_refused_naming_it() {
        let bytes = vec![0u8; MAX_COMPONENT_BYTES + 1];
        let e = prepare(&bytes).expect_err("over cap");
        assert!(
            e.to_string().contains("at most 67108864 bytes (64 MiB)"),
            "{e}"
        );
    }
}
