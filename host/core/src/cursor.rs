//! The list cursor codec (spec §7.3, vectors §14.2). (STUB: being implemented.)

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::error::ExecutionError;

/// A position in the `created_at DESC, id DESC` order: the last item of the previous page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    /// The item's `created_at` (UTC, microseconds).
    pub created_at: DateTime<Utc>,
    /// The item's id.
    pub id: Uuid,
}

impl Cursor {
    /// The canonical cursor text.
    pub fn encode(&self) -> String {
        unimplemented!("cursor is being implemented")
    }

    /// Parses a cursor; `invalid execution cursor` / `unknown cursor version` on failure.
    pub fn decode(text: &str) -> Result<Cursor, ExecutionError> {
        let _ = text;
        unimplemented!("cursor is being implemented")
    }
}
