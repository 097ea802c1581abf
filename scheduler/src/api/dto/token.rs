//! The token shapes of the HTTP API (`/v1/tokens`): what creating one takes and what a
//! token looks like when listed. The secret appears once, in the answer to its creation.

use serde::{Deserialize, Serialize};

use crate::domain::{
    access::{ApiToken, Caller},
    timestamp::timestamp,
};

/// `POST /v1/tokens`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenRequest {
    /// Unique name: 1 to 64 of `A-Z a-z 0-9 . _ -`.
    pub name: String,
    /// `reader`, `operator` or `admin`.
    pub role: String,
    /// The apps it acts on; `["*"]` for every app. Admin tokens act on every app.
    #[serde(default)]
    pub apps: Vec<String>,
}

/// The answer of `GET /v1/me`: the calling token and what it may do.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MeResponse {
    /// The token's name.
    pub name: String,
    /// Its role: `reader`, `operator` or `admin`.
    pub role: String,
    /// Its apps (`["*"]`: every app).
    pub apps: Vec<String>,
    /// The actions its role reaches (on its own apps' resources), by name.
    pub actions: Vec<String>,
}

impl From<&Caller> for MeResponse {
    fn from(caller: &Caller) -> Self {
        Self {
            name: caller.name.clone(),
            role: caller.role.to_string(),
            apps: caller.apps.to_list(),
            actions: caller
                .allowed_actions()
                .into_iter()
                .map(|action| action.name().to_string())
                .collect(),
        }
    }
}

/// A token as listed (and as created, with its `token` secret).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenResponse {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its role.
    pub role: String,
    /// Its apps (`["*"]`: every app).
    pub apps: Vec<String>,
    /// When it was created.
    pub created_at: String,
    /// The name of the token that created it.
    pub created_by: String,
    /// When it was revoked, or null.
    pub revoked_at: Option<String>,
    /// The secret, only in the answer to `POST /v1/tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl From<&ApiToken> for TokenResponse {
    fn from(t: &ApiToken) -> Self {
        Self {
            id: t.id.to_string(),
            name: t.name.clone(),
            role: t.role.to_string(),
            apps: t.apps.to_list(),
            created_at: timestamp(t.created_at),
            created_by: t.created_by.clone(),
            revoked_at: t.revoked_at.map(timestamp),
            token: None,
        }
    }
}
