//! The shapes of `POST /v1/jobs/batch` (bulk job import): the request, a success, and a
//! refusal's list of the jobs at fault. All or none: a refused batch stores nothing.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::JobResponse;

pub use crate::domain::limits::MAX_BATCH_JOBS;

/// The most refused jobs a refusal lists (its `refused` counts them all).
pub const MAX_LISTED_ERRORS: usize = 100;

/// `POST /v1/jobs/batch`'s body: jobs as `POST /v1/jobs` takes each. The items are kept
/// as JSON here and read one by one, so a refusal can name every bad one.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct JobBatchRequest {
    /// The jobs, 1 to [`MAX_BATCH_JOBS`].
    #[schema(value_type = Vec<super::JobRequest>)]
    pub jobs: Vec<Value>,
}

/// A created batch: every job as `POST /v1/jobs` answers it, in the order sent.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct JobBatchResponse {
    /// The stored jobs.
    pub items: Vec<JobResponse>,
}

/// One refused job of a batch, in a refusal's `errors`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct BatchItemError {
    /// The job's index in `jobs` (from 0).
    pub index: usize,
    /// The error code a single create would answer (`invalid_field`, `duplicate_name`,
    /// `payload_too_large`).
    pub code: String,
    /// What is wrong, for a human.
    pub message: String,
    /// The field at fault, from the body's top: `jobs[17].schedule.cron`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// The body of a refused batch, beside the usual `error` (which is the first refused
/// job's): every refused job up to [`MAX_LISTED_ERRORS`], and how many there were.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct BatchRefusal {
    /// The refused jobs, by index, at most [`MAX_LISTED_ERRORS`].
    #[serde(default)]
    pub errors: Vec<BatchItemError>,
    /// How many jobs were refused in all.
    #[serde(default)]
    pub refused: usize,
}

/// The field path of `field` (as a single create names it, `body` for the item itself)
/// inside item `index` of a batch.
pub fn item_field(index: usize, field: Option<&str>) -> String {
    match field {
        None | Some("body") | Some("") => format!("jobs[{index}]"),
        Some(field) => format!("jobs[{index}].{field}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_fields_are_paths_from_the_body() {
        assert_eq!(
            item_field(17, Some("schedule.cron")),
            "jobs[17].schedule.cron"
        );
        assert_eq!(item_field(0, Some("body")), "jobs[0]");
        assert_eq!(item_field(3, None), "jobs[3]");
    }
}
