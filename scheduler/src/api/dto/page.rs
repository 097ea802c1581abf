//! Paging of the HTTP API's lists: the page shape, its query and the run cursor.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::RequestError;
use crate::domain::Run;

/// A page of a list.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct ListResponse<T> {
    /// This page.
    pub items: Vec<T>,
    /// Cursor of the next page; null on the last.
    pub next: Option<String>,
}

/// Query parameters of list endpoints.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Page size.
    pub limit: Option<u32>,
    /// The previous page's `next`.
    pub cursor: Option<String>,
    /// Only jobs of this app (job list only).
    pub app: Option<String>,
}

impl ListQuery {
    /// The page size: default 100, at most 1000.
    pub fn limit(&self) -> Result<u32, RequestError> {
        match self.limit {
            None => Ok(100),
            Some(n @ 1..=1000) => Ok(n),
            Some(n) => Err(RequestError::invalid(
                "limit",
                format!("limit {n} is out of range: use 1 to 1000"),
            )),
        }
    }
}

/// The cursor after a run: `<fire time ms>_<run id>`.
pub fn run_cursor(run: &Run) -> String {
    format!("{}_{}", run.fire_time.timestamp_millis(), run.id)
}

/// Parses a run cursor.
pub fn parse_run_cursor(cursor: &str) -> Result<(DateTime<Utc>, Uuid), RequestError> {
    let bad = || RequestError::invalid("cursor", format!("invalid cursor {cursor:?}"));
    let (ms, id) = cursor.split_once('_').ok_or_else(bad)?;
    let at = ms
        .parse()
        .ok()
        .and_then(DateTime::from_timestamp_millis)
        .ok_or_else(bad)?;
    Ok((at, Uuid::parse_str(id).map_err(|_| bad())?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn run_cursor_round_trips() {
        let run = Run::new(
            Uuid::now_v7(),
            Utc::now(),
            crate::domain::RunTrigger::Manual,
            Value::Null,
            Utc::now(),
        );
        assert_eq!(
            parse_run_cursor(&run_cursor(&run)).unwrap(),
            (run.fire_time, run.id)
        );
        assert!(parse_run_cursor("nope").is_err());
    }
}
