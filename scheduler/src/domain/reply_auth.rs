//! Which RabbitMQ users may answer for which consumer groups: the `reply_users` setting
//! ([`ReplyUsers`]) and the rule the result collector applies to each reply's validated
//! `user_id` property (RabbitMQ refuses a message whose `user_id` is not its publishing
//! connection's user, so a present `user_id` names the real publisher).
//!
//! - Acks, results and heartbeats must come from a user listed for the group of their
//!   run's job, or for `*` (any group).
//! - Presence messages must come from a user listed for the group they name, or for `*`.
//! - Observer registrations must come from a user listed anywhere in the setting (any
//!   group, or `*`): what an observer may actually read is enforced by the broker's topic
//!   permissions on `chime.topics`; chimed only refuses registrations from users it does
//!   not know.
//! - A reply without `user_id` is refused.

use std::collections::{BTreeMap, BTreeSet};

use chime_consumer::protocol::topology;

/// The group key that stands for every group.
pub const ANY_GROUP: &str = "*";

/// The parsed `reply_users` setting: users allowed to answer, by group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReplyUsers {
    by_group: BTreeMap<String, BTreeSet<String>>,
    any_group: BTreeSet<String>,
}

/// Why a reply is refused (its text is the dead letter's reason; user names are not
/// secrets).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The message carries no `user_id` property.
    #[error("refused: the message has no user_id property (reply_users is set)")]
    NoUser,
    /// The user may not answer for the group.
    #[error("refused: user {user:?} may not answer for group {group:?}")]
    NotForGroup {
        /// The validated publisher.
        user: String,
        /// The group it answered for.
        group: String,
    },
    /// The user is not listed in `reply_users` at all (observer registrations).
    #[error("refused: user {user:?} is not listed in reply_users")]
    Unknown {
        /// The validated publisher.
        user: String,
    },
}

impl ReplyUsers {
    /// Parses `group=user,group=user,*=user`; a group may be listed more than once (each
    /// entry adds a user). Empty text means no rule (`None`: any user may answer).
    pub fn parse(text: &str) -> Result<Option<Self>, String> {
        let mut users = Self::default();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let Some((group, user)) = entry.split_once('=') else {
                return Err(format!("{entry:?} is not group=user"));
            };
            let (group, user) = (group.trim(), user.trim());
            if user.is_empty() || user.len() > 255 || user.chars().any(char::is_control) {
                return Err(format!(
                    "{entry:?}: the user must be 1 to 255 characters without control characters"
                ));
            }
            if group == ANY_GROUP {
                users.any_group.insert(user.to_string());
            } else {
                topology::check_group(group).map_err(|e| format!("{entry:?}: {e}"))?;
                users
                    .by_group
                    .entry(group.to_string())
                    .or_default()
                    .insert(user.to_string());
            }
        }
        if users.by_group.is_empty() && users.any_group.is_empty() {
            return Ok(None);
        }
        Ok(Some(users))
    }

    /// Whether `user` (a message's `user_id`, if any) may answer for `group`.
    pub fn check_group(&self, user: Option<&str>, group: &str) -> Result<(), Refusal> {
        let user = user.ok_or(Refusal::NoUser)?;
        let listed = self.any_group.contains(user)
            || self.by_group.get(group).is_some_and(|u| u.contains(user));
        if listed {
            Ok(())
        } else {
            Err(Refusal::NotForGroup {
                user: user.to_string(),
                group: group.to_string(),
            })
        }
    }

    /// Whether `user` may register an observer: any user listed in the setting.
    pub fn check_observer(&self, user: Option<&str>) -> Result<(), Refusal> {
        let user = user.ok_or(Refusal::NoUser)?;
        let listed =
            self.any_group.contains(user) || self.by_group.values().any(|u| u.contains(user));
        if listed {
            Ok(())
        } else {
            Err(Refusal::Unknown {
                user: user.to_string(),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users() -> ReplyUsers {
        ReplyUsers::parse("orders=shop-app, billing=billing-app,*=ops,orders=shop-2")
            .unwrap()
            .unwrap()
    }

    #[test]
    fn empty_means_no_rule() {
        assert_eq!(ReplyUsers::parse(""), Ok(None));
        assert_eq!(ReplyUsers::parse(" , "), Ok(None));
    }

    #[test]
    fn bad_entries_are_refused() {
        for bad in [
            "orders",
            "orders=",
            "=shop",
            "or ders=shop",
            "orders=a\u{7}b",
        ] {
            assert!(ReplyUsers::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn users_answer_only_for_their_groups() {
        let users = users();
        assert_eq!(users.check_group(Some("shop-app"), "orders"), Ok(()));
        assert_eq!(users.check_group(Some("shop-2"), "orders"), Ok(()));
        assert_eq!(users.check_group(Some("billing-app"), "billing"), Ok(()));
        assert_eq!(
            users.check_group(Some("billing-app"), "orders"),
            Err(Refusal::NotForGroup {
                user: "billing-app".into(),
                group: "orders".into()
            })
        );
        assert!(users.check_group(Some("shop-app"), "other").is_err());
        assert!(users.check_group(Some("stranger"), "orders").is_err());
    }

    #[test]
    fn any_group_users_answer_for_every_group() {
        let users = users();
        assert_eq!(users.check_group(Some("ops"), "orders"), Ok(()));
        assert_eq!(users.check_group(Some("ops"), "unlisted"), Ok(()));
    }

    #[test]
    fn a_missing_user_is_refused() {
        let users = users();
        assert_eq!(users.check_group(None, "orders"), Err(Refusal::NoUser));
        assert_eq!(users.check_observer(None), Err(Refusal::NoUser));
    }

    #[test]
    fn observers_need_a_listed_user() {
        let users = users();
        assert_eq!(users.check_observer(Some("shop-app")), Ok(()));
        assert_eq!(users.check_observer(Some("ops")), Ok(()));
        assert_eq!(
            users.check_observer(Some("stranger")),
            Err(Refusal::Unknown {
                user: "stranger".into()
            })
        );
    }

    #[test]
    fn reasons_name_user_and_group() {
        let reason = users()
            .check_group(Some("x"), "orders")
            .unwrap_err()
            .to_string();
        assert!(
            reason.contains("\"x\"") && reason.contains("\"orders\""),
            "{reason}"
        );
    }
}
