//! [`Tokens`]: API tokens — creating one (its secret shown once, only its SHA-256
//! stored), listing and revoking them, and turning a request's bearer secret into the
//! [`Caller`] the other services check.
//!
//! Every node keeps a snapshot of the active tokens and reloads it from the store when it
//! is older than [`SNAPSHOT_MAX_AGE`], so a token revoked on one node stops working on
//! every node within that time, and a token created on another node works as soon as a
//! request on this one finds the snapshot stale. A secret the snapshot does not know
//! reloads it at most once per [`SNAPSHOT_MAX_AGE`] too, so a flood of wrong tokens
//! costs no database work.
//!
//! The bootstrap token (`admin_token_file`) is an admin token named `bootstrap` that
//! lives only in the file and in memory: automation mounts the same file on every node.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use chrono::Utc;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use tokio::sync::Mutex;
use tracing::warn;
use uuid::Uuid;

use crate::{
    domain::{
        access::{Action, ApiToken, AppScope, Caller, Denied, Role, check_token_name},
        audit::{AuditEntry, actions},
    },
    store::{Store, StoreError, StoredToken},
};

/// Age past which the token snapshot is reloaded before it answers.
pub const SNAPSHOT_MAX_AGE: Duration = Duration::from_secs(2);
/// What every secret starts with (so a leaked one is easy to recognise and scan for).
pub const SECRET_PREFIX: &str = "chime_";
/// The name of the token read from `admin_token_file`.
pub const BOOTSTRAP_NAME: &str = "bootstrap";
/// The shortest secret a bootstrap file may hold.
pub const MIN_BOOTSTRAP_LEN: usize = 32;

/// Why a token operation failed.
#[derive(Debug, thiserror::Error)]
pub enum TokensError {
    /// The caller may not manage tokens.
    #[error(transparent)]
    Denied(#[from] Denied),
    /// A field of the new token is not acceptable.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The field (`name`, `role`, `apps`).
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// A token already has this name (revoked tokens keep theirs).
    #[error("a token named {0:?} already exists")]
    NameTaken(String),
    /// No token has this name.
    #[error("no token named {0:?}")]
    NotFound(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a request is not authenticated. The messages never contain the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization: Bearer` header.
    #[error("this request needs an API token: send Authorization: Bearer <token>")]
    Missing,
    /// The header is there but is not a bearer token.
    #[error("the Authorization header must be 'Bearer <token>'")]
    Malformed,
    /// No active token has this secret (unknown or revoked).
    #[error("the API token is not valid (unknown or revoked)")]
    Unknown,
    /// The store could not be read and no snapshot exists yet.
    #[error("tokens cannot be checked right now (the store is unavailable)")]
    Unavailable,
}

/// A token just created: the record and its secret, which is never shown again.
#[derive(Debug, Clone)]
pub struct NewToken {
    /// The token as listed.
    pub token: ApiToken,
    /// The secret to send as `Authorization: Bearer <secret>`.
    pub secret: String,
}

/// The active tokens by the SHA-256 of their secrets, and when they were read.
#[derive(Default)]
struct Snapshot {
    callers: HashMap<String, Caller>,
    loaded: Option<Instant>,
}

/// API tokens. Cheap to share.
pub struct Tokens {
    store: Arc<dyn Store>,
    /// The SHA-256 of the bootstrap token's secret, if a file gave one.
    bootstrap: Option<String>,
    snapshot: Mutex<Snapshot>,
}

/// The SHA-256 of `secret`, lower-case hex. Secrets are 256 random bits, so a plain
/// hash (no salt, no stretching) cannot be reversed or guessed.
pub fn secret_hash(secret: &str) -> String {
    Sha256::digest(secret.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A new random secret: the prefix and 256 bits from the OS-seeded CSPRNG, as hex.
pub fn new_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{SECRET_PREFIX}{hex}")
}

impl Tokens {
    /// Tokens kept in `store`, plus the bootstrap admin token `bootstrap` if given.
    pub fn new(store: Arc<dyn Store>, bootstrap: Option<&str>) -> Self {
        Self {
            store,
            bootstrap: bootstrap.map(secret_hash),
            snapshot: Mutex::new(Snapshot::default()),
        }
    }

    /// Creates a token named `name` with `role` on `apps` (`*` for every app; admin
    /// tokens are on every app whatever is given).
    pub async fn create(
        &self,
        caller: &Caller,
        name: &str,
        role: &str,
        apps: &[String],
    ) -> Result<NewToken, TokensError> {
        caller.check(Action::ManageTokens, None)?;
        check_token_name(name).map_err(|reason| TokensError::Invalid {
            field: "name",
            reason: reason.to_string(),
        })?;
        if name == BOOTSTRAP_NAME {
            return Err(TokensError::NameTaken(name.to_string()));
        }
        let role = Role::parse(role).ok_or_else(|| TokensError::Invalid {
            field: "role",
            reason: format!("unknown role {role:?}; use reader, operator or admin"),
        })?;
        let apps = if role == Role::Admin && apps.is_empty() {
            AppScope::All
        } else {
            AppScope::from_list(apps).map_err(|reason| TokensError::Invalid {
                field: "apps",
                reason: reason.to_string(),
            })?
        };
        let secret = new_secret();
        let token = ApiToken {
            id: Uuid::now_v7(),
            name: name.to_string(),
            role,
            apps,
            created_at: Utc::now(),
            created_by: caller.name.clone(),
            revoked_at: None,
        };
        let stored = StoredToken {
            token: token.clone(),
            secret_sha256: secret_hash(&secret),
        };
        if !self.store.insert_token(&stored).await? {
            return Err(TokensError::NameTaken(name.to_string()));
        }
        let entry = AuditEntry::now(
            &caller.name,
            actions::TOKEN_CREATE,
            format!("token:{name}"),
            None,
            serde_json::json!({"name": name, "role": token.role.as_str(), "apps": token.apps.to_list()}),
        );
        super::audit::record(self.store.as_ref(), vec![entry]).await;
        Ok(NewToken { token, secret })
    }

    /// Every token, revoked ones included, by name.
    pub async fn list(&self, caller: &Caller) -> Result<Vec<ApiToken>, TokensError> {
        caller.check(Action::ManageTokens, None)?;
        Ok(self
            .store
            .list_tokens()
            .await?
            .into_iter()
            .map(|stored| stored.token)
            .collect())
    }

    /// Revokes token `name`; every node refuses it within [`SNAPSHOT_MAX_AGE`] (this one
    /// at once).
    pub async fn revoke(&self, caller: &Caller, name: &str) -> Result<ApiToken, TokensError> {
        caller.check(Action::ManageTokens, None)?;
        let token = self
            .store
            .revoke_token(name, Utc::now())
            .await?
            .ok_or_else(|| TokensError::NotFound(name.to_string()))?;
        self.snapshot.lock().await.loaded = None;
        let entry = AuditEntry::now(
            &caller.name,
            actions::TOKEN_REVOKE,
            format!("token:{name}"),
            None,
            serde_json::json!({"name": name}),
        );
        super::audit::record(self.store.as_ref(), vec![entry]).await;
        Ok(token)
    }

    /// The caller whose token `authorization` (the `Authorization` header's value, if
    /// any) carries.
    pub async fn authenticate(&self, authorization: Option<&str>) -> Result<Caller, AuthError> {
        let header = authorization.ok_or(AuthError::Missing)?;
        let secret = bearer(header).ok_or(AuthError::Malformed)?;
        let hash = secret_hash(secret);
        if self.bootstrap.as_deref() == Some(hash.as_str()) {
            return Ok(Caller {
                name: BOOTSTRAP_NAME.to_string(),
                role: Role::Admin,
                apps: AppScope::All,
            });
        }
        let mut snapshot = self.snapshot.lock().await;
        let fresh = snapshot
            .loaded
            .is_some_and(|at| at.elapsed() < SNAPSHOT_MAX_AGE);
        if !fresh {
            match self.store.list_tokens().await {
                Ok(tokens) => {
                    snapshot.callers = tokens
                        .into_iter()
                        .filter(|stored| stored.token.revoked_at.is_none())
                        .map(|stored| (stored.secret_sha256, stored.token.caller()))
                        .collect();
                    snapshot.loaded = Some(Instant::now());
                }
                // Keep answering from the last snapshot: no one can revoke a token while
                // the store is down either.
                Err(error) if snapshot.loaded.is_some() => {
                    warn!(%error, "cannot reload API tokens; using the last ones read");
                }
                Err(error) => {
                    warn!(%error, "cannot read API tokens");
                    return Err(AuthError::Unavailable);
                }
            }
        }
        snapshot
            .callers
            .get(&hash)
            .cloned()
            .ok_or(AuthError::Unknown)
    }
}

/// The secret of a `Bearer <secret>` header value (the scheme is case-insensitive).
fn bearer(header: &str) -> Option<&str> {
    let (scheme, secret) = header.trim().split_once(' ')?;
    let secret = secret.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !secret.is_empty() && !secret.contains(' '))
        .then_some(secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_headers_parse_and_others_do_not() {
        assert_eq!(bearer("Bearer abc"), Some("abc"));
        assert_eq!(bearer("bearer  abc "), Some("abc"));
        assert_eq!(bearer("Basic abc"), None);
        assert_eq!(bearer("Bearer"), None);
        assert_eq!(bearer("Bearer a b"), None);
    }

    #[test]
    fn secrets_are_long_random_and_hash_to_hex() {
        let (a, b) = (new_secret(), new_secret());
        assert_ne!(a, b);
        assert!(a.starts_with(SECRET_PREFIX) && a.len() == SECRET_PREFIX.len() + 64);
        let hash = secret_hash(&a);
        assert_eq!(hash.len(), 64);
        assert!(!hash.contains(&a[SECRET_PREFIX.len()..]));
        assert_eq!(
            secret_hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
