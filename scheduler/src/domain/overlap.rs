//! Whether a job may fire while its previous run is unfinished.

use serde::{Deserialize, Serialize};

/// Whether a job may fire while its previous run is unfinished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OverlapPolicy {
    /// Fire on schedule regardless of earlier runs.
    #[default]
    Allow,
    /// Skip a fire while the job has a run that is not finished (`scheduled`,
    /// `dispatched`, `acked`, or `failed` waiting for its retry), whichever node
    /// recorded it.
    Forbid,
}

impl OverlapPolicy {
    /// Every policy, in the order the API lists them.
    pub const ALL: [OverlapPolicy; 2] = [OverlapPolicy::Allow, OverlapPolicy::Forbid];

    /// The policy's name in the API and in the store (the same as its serde name).
    pub fn as_str(self) -> &'static str {
        match self {
            OverlapPolicy::Allow => "allow",
            OverlapPolicy::Forbid => "forbid",
        }
    }

    /// The policy named `name`.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == name)
    }
}
