//! The list search filters as the API takes them (docs/http-api.md#search-filters): query
//! parameters of `GET /v1/executions` and the dashboard, fields of the bulk bodies.

use chrono::{DateTime, Utc};
use onestep_core::request::ListSearch;

use crate::error::ApiError;

/// The five filters as text, before validation.
#[derive(Debug, Clone, Default)]
pub struct SearchText<'a> {
    /// `created_from`: RFC 3339 with an offset.
    pub created_from: Option<&'a str>,
    /// `created_before`: RFC 3339 with an offset.
    pub created_before: Option<&'a str>,
    /// `idempotency_key`: exact.
    pub idempotency_key: Option<&'a str>,
    /// `metadata`: `key=value`.
    pub metadata: Option<&'a str>,
    /// `exception_type`: a substring, any case.
    pub exception_type: Option<&'a str>,
}

fn given(v: Option<&str>) -> Option<&str> {
    v.map(str::trim).filter(|t| !t.is_empty())
}

fn instant(name: &str, text: Option<&str>) -> Result<Option<DateTime<Utc>>, ApiError> {
    given(text)
        .map(|t| {
            DateTime::parse_from_rfc3339(t)
                .map(|d| d.with_timezone(&Utc))
                .map_err(|_| {
                    ApiError::invalid(format!(
                        "{name} must be an RFC 3339 datetime with a timezone, e.g. 2026-12-01T00:00:00Z"
                    ))
                })
        })
        .transpose()
}

impl SearchText<'_> {
    /// Parses and validates (empty values are absent): 422 `invalid_argument` naming the field.
    pub fn parse(&self) -> Result<ListSearch, ApiError> {
        let metadata = match given(self.metadata) {
            None => None,
            Some(t) => {
                let (k, v) = t.split_once('=').ok_or_else(|| {
                    ApiError::invalid(
                        "metadata must be key=value (a top-level key and its string value)",
                    )
                })?;
                Some((k.trim().to_owned(), v.trim().to_owned()))
            }
        };
        let search = ListSearch {
            created_from: instant("created_from", self.created_from)?,
            created_before: instant("created_before", self.created_before)?,
            idempotency_key: given(self.idempotency_key).map(str::to_owned),
            metadata,
            exception_type: given(self.exception_type).map(str::to_owned),
        };
        Ok(search.validate()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_names_bad_fields() {
        let s = SearchText {
            created_from: Some("2026-12-01T00:00:00+02:00"),
            metadata: Some(" team = red "),
            exception_type: Some(" "),
            ..SearchText::default()
        }
        .parse()
        .unwrap();
        assert_eq!(s.metadata, Some(("team".into(), "red".into())));
        assert_eq!(s.exception_type, None);
        assert_eq!(
            s.created_from.unwrap().to_rfc3339(),
            "2026-11-30T22:00:00+00:00"
        );
        let e = SearchText {
            created_before: Some("2026-12-01 00:00"),
            ..SearchText::default()
        }
        .parse()
        .unwrap_err();
        assert!(e.body().message.starts_with("created_before must be"));
        let e = SearchText {
            metadata: Some("novalue"),
            ..SearchText::default()
        }
        .parse()
        .unwrap_err();
        assert!(e.body().message.starts_with("metadata must be key=value"));
    }
}
