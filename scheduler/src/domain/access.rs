//! Who may do what through the API: the roles a token can have, the apps it is scoped
//! to, the actions the application services perform, and the one rule table that
//! decides each (action, app) for a caller. Pure: the services in [`crate::app`] call
//! [`Caller::check`] before they act; nothing here knows about HTTP or the store.
//!
//! Group-level resources (a group's dead-letter queue holds tasks of every app whose jobs
//! target that group; its consumers serve every such app) are not owned by one app.
//! Consumers: a caller scoped to apps sees the groups its apps' jobs target. The rule for
//! dead letters: listing dead-letter queues
//! shows depths only and is open to every role; a peek shows only the messages of the
//! caller's apps; a replay by an operator must name a job of its apps (only that job's
//! messages move); a replay of a whole queue and a purge are admin operations.

use std::collections::BTreeSet;
use std::fmt;

/// What a token may do, before its app scope narrows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Read jobs, runs, the cluster and dead-letter queues of its apps.
    Reader,
    /// A reader that also creates, changes, deletes, pauses, resumes, triggers and
    /// backfills jobs, and replays one job's dead letters, within its apps.
    Operator,
    /// Everything, on every app: tokens, whole-queue replays and purges included.
    Admin,
}

impl Role {
    /// Every role, least powerful first.
    pub const ALL: [Role; 3] = [Role::Reader, Role::Operator, Role::Admin];

    /// The role's name in the API and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Reader => "reader",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    /// The role named `name`.
    pub fn parse(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|role| role.as_str() == name)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The apps a token acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppScope {
    /// Every app (admin tokens, and tokens created with `--app '*'`).
    All,
    /// Only these apps (at least one).
    Only(BTreeSet<String>),
}

impl AppScope {
    /// The scope of `apps` as given when a token is created: `*` alone means every app.
    pub fn from_list(apps: &[String]) -> Result<AppScope, &'static str> {
        if apps.iter().any(|app| app == "*") {
            return if apps.len() == 1 {
                Ok(AppScope::All)
            } else {
                Err("'*' (every app) cannot be combined with named apps")
            };
        }
        if apps.is_empty() {
            return Err("name at least one app (or '*' for every app)");
        }
        Ok(AppScope::Only(apps.iter().cloned().collect()))
    }

    /// Whether `app` is in scope.
    pub fn covers(&self, app: &str) -> bool {
        match self {
            AppScope::All => true,
            AppScope::Only(apps) => apps.contains(app),
        }
    }

    /// The scope as a list: `["*"]` for every app.
    pub fn to_list(&self) -> Vec<String> {
        match self {
            AppScope::All => vec!["*".to_string()],
            AppScope::Only(apps) => apps.iter().cloned().collect(),
        }
    }
}

/// What a caller asks to do. Each application service names its action once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Read jobs and their runs.
    ReadJobs,
    /// Read run statistics (`GET /v1/stats/runs`): counts of the caller's apps' runs.
    ReadRunStats,
    /// Create, change, delete, pause or resume jobs.
    ChangeJobs,
    /// Fire a job now, or record its past fires (a backfill).
    TriggerJobs,
    /// Cancel a run that has not finished.
    CancelRuns,
    /// Read the cluster's nodes and shards.
    ReadCluster,
    /// Read the consumer instances and groups (of the groups its apps' jobs target).
    ReadConsumers,
    /// List dead-letter queues (depths) and peek (filtered to the caller's apps).
    ReadDeadLetters,
    /// Replay one job's dead letters.
    ReplayJobDeadLetters,
    /// Replay every message of a dead-letter queue, whatever its app.
    ReplayQueue,
    /// Empty a dead-letter queue.
    PurgeQueue,
    /// Create, list and revoke API tokens.
    ManageTokens,
    /// Read `/metrics`.
    ReadMetrics,
    /// Read the API's description (`/v1/openapi.json`).
    ReadApiDescription,
}

impl Action {
    /// Every action, in the order `GET /v1/me` lists them.
    pub const ALL: [Action; 14] = [
        Action::ReadJobs,
        Action::ReadRunStats,
        Action::ChangeJobs,
        Action::TriggerJobs,
        Action::CancelRuns,
        Action::ReadCluster,
        Action::ReadConsumers,
        Action::ReadDeadLetters,
        Action::ReplayJobDeadLetters,
        Action::ReplayQueue,
        Action::PurgeQueue,
        Action::ManageTokens,
        Action::ReadMetrics,
        Action::ReadApiDescription,
    ];

    /// Its name in `GET /v1/me`'s `actions`.
    pub fn name(self) -> &'static str {
        match self {
            Action::ReadJobs => "read_jobs",
            Action::ReadRunStats => "read_run_stats",
            Action::ChangeJobs => "change_jobs",
            Action::TriggerJobs => "trigger_jobs",
            Action::CancelRuns => "cancel_runs",
            Action::ReadCluster => "read_cluster",
            Action::ReadConsumers => "read_consumers",
            Action::ReadDeadLetters => "read_dead_letters",
            Action::ReplayJobDeadLetters => "replay_job_dead_letters",
            Action::ReplayQueue => "replay_queue",
            Action::PurgeQueue => "purge_queue",
            Action::ManageTokens => "manage_tokens",
            Action::ReadMetrics => "read_metrics",
            Action::ReadApiDescription => "read_api_description",
        }
    }

    /// The least role that may perform the action (within its apps, for actions on an
    /// app's resources).
    pub fn least_role(self) -> Role {
        match self {
            Action::ReadJobs | Action::ReadCluster | Action::ReadDeadLetters => Role::Reader,
            Action::ReadRunStats => Role::Reader,
            Action::ReadConsumers => Role::Reader,
            Action::ReadMetrics | Action::ReadApiDescription => Role::Reader,
            Action::ChangeJobs
            | Action::TriggerJobs
            | Action::CancelRuns
            | Action::ReplayJobDeadLetters => Role::Operator,
            Action::ReplayQueue | Action::PurgeQueue | Action::ManageTokens => Role::Admin,
        }
    }

    /// How the action reads in an error message.
    pub fn describe(self) -> &'static str {
        match self {
            Action::ReadJobs => "read jobs and runs",
            Action::ReadRunStats => "read run statistics",
            Action::ChangeJobs => "change jobs",
            Action::TriggerJobs => "trigger jobs",
            Action::CancelRuns => "cancel runs",
            Action::ReadCluster => "read the cluster",
            Action::ReadConsumers => "read consumers",
            Action::ReadDeadLetters => "read dead-letter queues",
            Action::ReplayJobDeadLetters => "replay a job's dead letters",
            Action::ReplayQueue => "replay a whole dead-letter queue",
            Action::PurgeQueue => "purge dead-letter queues",
            Action::ManageTokens => "manage API tokens",
            Action::ReadMetrics => "read metrics",
            Action::ReadApiDescription => "read the API description",
        }
    }
}

/// Why a caller may not do something.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// The role is too weak for the action.
    #[error("token '{token}' has role {role}, which may not {action}; {least} or above may")]
    Role {
        /// The token's name.
        token: String,
        /// Its role.
        role: Role,
        /// What was asked.
        action: &'static str,
        /// The least role that may.
        least: Role,
    },
    /// The resource's app is outside the token's apps.
    #[error("token '{token}' may not {action} of app '{app}' (it is scoped to {scope})")]
    App {
        /// The token's name.
        token: String,
        /// What was asked.
        action: &'static str,
        /// The resource's app.
        app: String,
        /// The token's apps, as text.
        scope: String,
    },
}

/// Who is calling: a token's name, role and apps, as the API authenticated it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's name (the actor in logs and the audit trail).
    pub name: String,
    /// Its role.
    pub role: Role,
    /// Its apps.
    pub apps: AppScope,
}

impl Caller {
    /// A caller with every right, for in-process callers that no token stands behind
    /// (tests of the services, and chimed itself).
    pub fn internal() -> Caller {
        Caller {
            name: "chimed".to_string(),
            role: Role::Admin,
            apps: AppScope::All,
        }
    }

    /// Whether this caller may perform `action`, on a resource of `app` when it has one.
    pub fn check(&self, action: Action, app: Option<&str>) -> Result<(), Denied> {
        let least = action.least_role();
        if self.role < least {
            return Err(Denied::Role {
                token: self.name.clone(),
                role: self.role,
                action: action.describe(),
                least,
            });
        }
        match app {
            Some(app) if !self.sees(app) => Err(Denied::App {
                token: self.name.clone(),
                action: action.describe(),
                app: app.to_string(),
                scope: self.apps.to_list().join(", "),
            }),
            _ => Ok(()),
        }
    }

    /// Whether resources of `app` are visible to this caller (admins see every app).
    pub fn sees(&self, app: &str) -> bool {
        self.role == Role::Admin || self.apps.covers(app)
    }

    /// The actions its role reaches, on its own apps' resources where an action has an
    /// app: what `GET /v1/me` lists, so a client shows only what the API would allow.
    pub fn allowed_actions(&self) -> Vec<Action> {
        Action::ALL
            .into_iter()
            .filter(|action| self.check(*action, None).is_ok())
            .collect()
    }

    /// The apps a listing must be narrowed to: None for every app.
    pub fn visible_apps(&self) -> Option<Vec<String>> {
        match (&self.apps, self.role) {
            (_, Role::Admin) | (AppScope::All, _) => None,
            (AppScope::Only(apps), _) => Some(apps.iter().cloned().collect()),
        }
    }

    /// The apps a listing of `action` reads when it `asked` for these (None: every
    /// app): naming an app outside the caller's scope is refused; otherwise the asked
    /// apps within its scope, or its whole scope when none were asked (None: every
    /// app). The one rule for narrowing a listing across apps to a caller.
    pub fn narrow_apps(
        &self,
        action: Action,
        asked: Option<Vec<String>>,
    ) -> Result<Option<Vec<String>>, Denied> {
        self.check(action, None)?;
        for app in asked.iter().flatten() {
            self.check(action, Some(app))?;
        }
        Ok(match (self.visible_apps(), asked) {
            (None, asked) => asked,
            (Some(visible), Some(asked)) => {
                Some(asked.into_iter().filter(|a| visible.contains(a)).collect())
            }
            (Some(visible), None) => Some(visible),
        })
    }
}

/// An API token as stored and listed: never its secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiToken {
    /// Its id.
    pub id: uuid::Uuid,
    /// Its unique name (the actor in logs and the audit trail).
    pub name: String,
    /// Its role.
    pub role: Role,
    /// Its apps.
    pub apps: AppScope,
    /// When it was created.
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// The name of the token that created it.
    pub created_by: String,
    /// When it was revoked, if it was.
    pub revoked_at: Option<chrono::DateTime<chrono::Utc>>,
}

impl ApiToken {
    /// The caller this token authenticates.
    pub fn caller(&self) -> Caller {
        Caller {
            name: self.name.clone(),
            role: self.role,
            apps: self.apps.clone(),
        }
    }
}

/// Whether `name` can name a token: 1 to 64 of `A-Z a-z 0-9 . _ -`.
pub fn check_token_name(name: &str) -> Result<(), &'static str> {
    let fine = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if fine {
        Ok(())
    } else {
        Err("use 1 to 64 letters, digits, '.', '_' or '-'")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(role: Role, apps: &[&str]) -> Caller {
        let apps: Vec<String> = apps.iter().map(|a| a.to_string()).collect();
        Caller {
            name: "t".into(),
            role,
            apps: AppScope::from_list(&apps).unwrap(),
        }
    }

    const ACTIONS: [Action; 11] = [
        Action::ReadJobs,
        Action::ReadRunStats,
        Action::ChangeJobs,
        Action::TriggerJobs,
        Action::ReadCluster,
        Action::ReadDeadLetters,
        Action::ReplayJobDeadLetters,
        Action::ReplayQueue,
        Action::PurgeQueue,
        Action::ManageTokens,
        Action::ReadMetrics,
    ];

    #[test]
    fn allowed_actions_are_those_check_allows_and_grow_with_the_role() {
        let reader = caller(Role::Reader, &["shop"]).allowed_actions();
        let operator = caller(Role::Operator, &["shop"]).allowed_actions();
        let admin = caller(Role::Admin, &["*"]).allowed_actions();
        assert!(reader.contains(&Action::ReadJobs) && !reader.contains(&Action::ChangeJobs));
        assert!(operator.contains(&Action::ChangeJobs) && !operator.contains(&Action::PurgeQueue));
        assert_eq!(admin, Action::ALL.to_vec());
        assert!(reader.iter().all(|a| operator.contains(a)));
        let names: std::collections::HashSet<_> = Action::ALL.iter().map(|a| a.name()).collect();
        assert_eq!(names.len(), Action::ALL.len(), "action names are distinct");
    }

    #[test]
    fn every_action_by_every_role_in_and_out_of_scope() {
        for role in Role::ALL {
            let scoped = caller(role, &["shop"]);
            for action in ACTIONS {
                let allowed_by_role = role >= action.least_role();
                assert_eq!(
                    scoped.check(action, Some("shop")).is_ok(),
                    allowed_by_role,
                    "{role} {action:?} in scope"
                );
                // Admins act on every app; others only on theirs.
                assert_eq!(
                    scoped.check(action, Some("billing")).is_ok(),
                    allowed_by_role && role == Role::Admin,
                    "{role} {action:?} out of scope"
                );
                assert_eq!(scoped.check(action, None).is_ok(), allowed_by_role);
            }
        }
    }

    #[test]
    fn the_least_roles_are_the_documented_ones() {
        let readers: Vec<_> = ACTIONS
            .into_iter()
            .filter(|a| a.least_role() == Role::Reader)
            .collect();
        assert_eq!(
            readers,
            [
                Action::ReadJobs,
                Action::ReadRunStats,
                Action::ReadCluster,
                Action::ReadDeadLetters,
                Action::ReadMetrics
            ]
        );
        let admins: Vec<_> = ACTIONS
            .into_iter()
            .filter(|a| a.least_role() == Role::Admin)
            .collect();
        assert_eq!(
            admins,
            [
                Action::ReplayQueue,
                Action::PurgeQueue,
                Action::ManageTokens
            ]
        );
    }

    #[test]
    fn denials_name_the_token_the_action_and_the_scope() {
        let reader = caller(Role::Reader, &["shop", "web"]);
        let denied = reader.check(Action::ChangeJobs, Some("shop")).unwrap_err();
        assert_eq!(
            denied.to_string(),
            "token 't' has role reader, which may not change jobs; operator or above may"
        );
        let denied = reader.check(Action::ReadJobs, Some("billing")).unwrap_err();
        assert_eq!(
            denied.to_string(),
            "token 't' may not read jobs and runs of app 'billing' (it is scoped to shop, web)"
        );
    }

    #[test]
    fn listings_narrow_to_the_callers_apps_and_refuse_others() {
        let scoped = caller(Role::Reader, &["shop", "web"]);
        let apps = |list: &[&str]| Some(list.iter().map(|a| a.to_string()).collect());
        assert_eq!(
            scoped.narrow_apps(Action::ReadRunStats, None),
            Ok(apps(&["shop", "web"]))
        );
        assert_eq!(
            scoped.narrow_apps(Action::ReadRunStats, apps(&["web"])),
            Ok(apps(&["web"]))
        );
        assert!(matches!(
            scoped.narrow_apps(Action::ReadRunStats, apps(&["billing"])),
            Err(Denied::App { .. })
        ));
        let admin = caller(Role::Admin, &["shop"]);
        assert_eq!(admin.narrow_apps(Action::ReadRunStats, None), Ok(None));
        assert_eq!(
            admin.narrow_apps(Action::ReadRunStats, apps(&["billing"])),
            Ok(apps(&["billing"]))
        );
        let reader = caller(Role::Reader, &["shop"]);
        assert!(matches!(
            reader.narrow_apps(Action::ChangeJobs, None),
            Err(Denied::Role { .. })
        ));
    }

    #[test]
    fn scopes_parse_star_alone_and_need_an_app() {
        assert_eq!(AppScope::from_list(&["*".into()]), Ok(AppScope::All));
        assert!(AppScope::from_list(&["*".into(), "shop".into()]).is_err());
        assert!(AppScope::from_list(&[]).is_err());
        let star = caller(Role::Operator, &["*"]);
        assert!(star.check(Action::ChangeJobs, Some("anything")).is_ok());
        assert_eq!(star.visible_apps(), None);
        assert_eq!(
            caller(Role::Reader, &["b", "a"]).visible_apps(),
            Some(vec!["a".to_string(), "b".to_string()])
        );
        assert_eq!(Role::parse("operator"), Some(Role::Operator));
        assert_eq!(Role::parse("root"), None);
    }
}
