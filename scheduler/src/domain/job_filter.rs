//! [`JobFilter`]: which jobs the job list (`GET /v1/jobs`, `chimectl job ls`) asks for,
//! in which order ([`JobSort`]) and from where ([`JobPosition`], carried by the page
//! cursor). Pure: the API parses a request into it with the parsers here (each refusal
//! names its query parameter), the application service narrows it to the caller's apps,
//! and each store turns it into indexed queries. [`JobFilter::matches`] and
//! [`JobFilter::key_order`] say in Rust what the stores say in SQL, for tests.

use std::cmp::Ordering;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{DeliveryMode, FieldError, Job, run_filter::MAX_APP_BRANCHES};
use chime_consumer::protocol::topology::is_valid_name;

/// The longest search text (`q`), in characters.
pub const MAX_SEARCH_CHARS: usize = 128;

/// The order of a job list. Every order ends with the job id, so it is total.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum JobSort {
    /// Creation order (by id): the list's order when no `sort` is given.
    #[default]
    Created,
    /// App, then name (`name`); `descending` reverses both (`-name`).
    Name {
        /// Z to A.
        descending: bool,
    },
    /// Last change (`updated_at`); `descending`: most recent first (`-updated_at`).
    Updated {
        /// Most recent first.
        descending: bool,
    },
}

/// The values `sort` takes, as the API spells them. There is no next-fire order: it
/// would need an index on `next_fire_at`, which every fire would rewrite (on PostgreSQL
/// a fire is an in-place update only while no index names that column, migration 0007).
pub const SORTS: [&str; 4] = ["name", "-name", "updated_at", "-updated_at"];

impl JobSort {
    /// Parses the `sort` parameter.
    pub fn parse(value: &str) -> Result<Self, FieldError> {
        let (descending, key) = match value.strip_prefix('-') {
            Some(key) => (true, key),
            None => (false, value),
        };
        match key {
            "name" => Ok(Self::Name { descending }),
            "updated_at" => Ok(Self::Updated { descending }),
            _ => Err(FieldError::new(
                "sort",
                format!("unknown sort {value:?}: use {}", SORTS.join(", ")),
            )),
        }
    }

    /// The `sort` value naming this order (`None` for creation order, the default).
    pub fn as_str(self) -> Option<&'static str> {
        Some(match self {
            Self::Created => return None,
            Self::Name { descending: false } => "name",
            Self::Name { descending: true } => "-name",
            Self::Updated { descending: false } => "updated_at",
            Self::Updated { descending: true } => "-updated_at",
        })
    }

    /// Whether the order runs from the largest key down.
    pub fn descending(self) -> bool {
        match self {
            Self::Created => false,
            Self::Name { descending } | Self::Updated { descending } => descending,
        }
    }

    /// `job`'s place in this order: what a cursor after it carries.
    pub fn position_of(self, job: &Job) -> JobPosition {
        match self {
            Self::Created => JobPosition::Id(job.id),
            Self::Name { .. } => JobPosition::Name {
                app: job.spec.app.clone(),
                name: job.spec.name.clone(),
                id: job.id,
            },
            Self::Updated { .. } => JobPosition::Updated(job.updated_at, job.id),
        }
    }
}

/// A job's place in a [`JobSort`] order: its sort key and its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobPosition {
    /// Creation order.
    Id(Uuid),
    /// App and name order.
    Name {
        /// The job's app.
        app: String,
        /// The job's name.
        name: String,
        /// The job's id.
        id: Uuid,
    },
    /// Last-change order.
    Updated(DateTime<Utc>, Uuid),
}

impl JobPosition {
    /// The page cursor after this position in `sort`: the bare job id for creation order
    /// (as the list has always answered), else `<sort>.<key>.<id>`, the key an app and
    /// name (`<app>.<name>`, names have no dots) or an instant in microseconds. Only
    /// URL-safe characters.
    pub fn cursor(&self, sort: JobSort) -> String {
        let tag = sort.as_str().unwrap_or_default();
        match self {
            Self::Id(id) => id.to_string(),
            Self::Name { app, name, id } => format!("{tag}.{app}.{name}.{id}"),
            Self::Updated(at, id) => format!("{tag}.{}.{id}", at.timestamp_micros()),
        }
    }

    /// Parses a `cursor` for a list in `sort`: refused (naming `cursor`) if it is not a
    /// cursor, or is one of a list in another order.
    pub fn parse_cursor(cursor: &str, sort: JobSort) -> Result<Self, FieldError> {
        let bad = || FieldError::new("cursor", format!("invalid cursor {cursor:?}"));
        let other = |of: &str| {
            FieldError::new(
                "cursor",
                format!(
                    "cursor {cursor:?} belongs to a list sorted by {of}, not {}: start again \
                     without a cursor",
                    sort.as_str().unwrap_or("creation order")
                ),
            )
        };
        let parts: Vec<&str> = cursor.split('.').collect();
        let id = |text: &str| Uuid::parse_str(text).map_err(|_| bad());
        let instant = |text: &str| {
            text.parse::<i64>()
                .ok()
                .and_then(DateTime::from_timestamp_micros)
                .ok_or_else(bad)
        };
        if let [only] = parts.as_slice() {
            let id = id(only)?;
            return match sort {
                JobSort::Created => Ok(Self::Id(id)),
                _ => Err(other("creation order")),
            };
        }
        let tag = parts[0];
        let of = JobSort::parse(tag).map_err(|_| bad())?;
        let position = match (of, &parts[1..]) {
            (JobSort::Name { .. }, [app, name, last])
                if is_valid_name(app) && is_valid_name(name) =>
            {
                Self::Name {
                    app: app.to_string(),
                    name: name.to_string(),
                    id: id(last)?,
                }
            }
            (JobSort::Updated { .. }, [at, last]) => Self::Updated(instant(at)?, id(last)?),
            _ => return Err(bad()),
        };
        if of == sort {
            Ok(position)
        } else {
            Err(other(tag))
        }
    }
}

/// Parses the search text `q`: 1 to [`MAX_SEARCH_CHARS`] characters, no NUL (which the
/// database cannot compare). Answers it lowercased (ASCII: names are ASCII, so other
/// letters match nothing however they are cased).
pub fn parse_search(q: &str) -> Result<String, FieldError> {
    let count = q.chars().count();
    if count == 0 || count > MAX_SEARCH_CHARS {
        return Err(FieldError::new(
            "q",
            format!("q must be 1 to {MAX_SEARCH_CHARS} characters, not {count}"),
        ));
    }
    if q.contains('\0') {
        return Err(FieldError::new("q", "q must not contain a NUL character"));
    }
    Ok(q.to_ascii_lowercase())
}

/// Parses the `paused` filter: `true` or `false`.
pub fn parse_paused(value: &str) -> Result<bool, FieldError> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(FieldError::new(
            "paused",
            format!("paused must be true or false, not {value:?}"),
        )),
    }
}

/// Parses the `mode` filter.
pub fn parse_mode(value: &str) -> Result<DeliveryMode, FieldError> {
    DeliveryMode::parse(value).ok_or_else(|| {
        FieldError::new(
            "mode",
            format!("unknown mode {value:?}: use group, broadcast, zone or sharded"),
        )
    })
}

/// A page of the job list. Every filter given must hold (AND).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobFilter {
    /// Jobs of any of these apps (`None`: any app). An empty list matches nothing.
    pub apps: Option<Vec<String>>,
    /// Jobs whose target group is this.
    pub group: Option<String>,
    /// Jobs whose target mode is this.
    pub mode: Option<DeliveryMode>,
    /// Paused (`true`) or running (`false`) jobs.
    pub paused: Option<bool>,
    /// Jobs whose `app/name` contains this, lowercased (see [`parse_search`]); a name
    /// containing it is such a job.
    pub search: Option<String>,
    /// The order.
    pub sort: JobSort,
    /// Only jobs strictly after this position in `sort` (the previous page's last).
    pub after: Option<JobPosition>,
    /// At most this many.
    pub limit: u32,
}

impl JobFilter {
    /// Whether the filter can match no job without asking the store: an empty app list
    /// (a scoped caller asking for none of its apps).
    pub fn matches_nothing(&self) -> bool {
        self.apps.as_ref().is_some_and(Vec::is_empty)
    }

    /// The filter split by app when it lists 2 to [`MAX_APP_BRANCHES`] apps (a scoped
    /// token's), each part one app, the parts together matching what the filter
    /// matches: a store reads each part through that app's index in page order and
    /// merges the parts' pages, so a page costs about a page per app instead of every
    /// job of the apps. Otherwise the filter as it is.
    pub fn branches(&self) -> Vec<JobFilter> {
        match &self.apps {
            Some(apps) if apps.len() > 1 && apps.len() <= MAX_APP_BRANCHES => apps
                .iter()
                .map(|app| JobFilter {
                    apps: Some(vec![app.clone()]),
                    ..self.clone()
                })
                .collect(),
            _ => vec![self.clone()],
        }
    }

    /// Whether `job` passes the filters (not the position): the stores' queries say the
    /// same in SQL.
    pub fn matches(&self, job: &Job) -> bool {
        let target = &job.spec.settings.target;
        self.apps
            .as_ref()
            .is_none_or(|apps| apps.contains(&job.spec.app))
            && self.group.as_ref().is_none_or(|g| *g == target.group)
            && self.mode.is_none_or(|m| m == target.mode)
            && self.paused.is_none_or(|p| p == job.spec.paused)
            && self.search.as_ref().is_none_or(|q| {
                format!("{}/{}", job.spec.app, job.spec.name)
                    .to_ascii_lowercase()
                    .contains(q.as_str())
            })
    }

    /// How `a` and `b` compare in the filter's order (names bytewise: PostgreSQL orders
    /// them by the database's collation, which agrees for lowercase names and digits).
    pub fn key_order(&self, a: &Job, b: &Job) -> Ordering {
        let sort = self.sort;
        let ordered = |o: Ordering| if sort.descending() { o.reverse() } else { o };
        match sort {
            JobSort::Created => a.id.cmp(&b.id),
            JobSort::Name { .. } => {
                ordered((&a.spec.app, &a.spec.name, a.id).cmp(&(&b.spec.app, &b.spec.name, b.id)))
            }
            JobSort::Updated { .. } => ordered((a.updated_at, a.id).cmp(&(b.updated_at, b.id))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{JobSettings, JobSpec};

    fn job(app: &str, name: &str) -> Job {
        let spec = JobSpec {
            app: app.into(),
            name: name.into(),
            paused: false,
            settings: JobSettings::every_second(DeliveryMode::Group, 5),
        };
        Job::new(spec, Utc::now())
    }

    #[test]
    fn sorts_parse_and_name_themselves() {
        for value in SORTS {
            assert_eq!(JobSort::parse(value).unwrap().as_str(), Some(value));
        }
        assert_eq!(JobSort::default().as_str(), None);
        for bad in ["", "-", "id", "--name", "Name", "created_at", "name "] {
            assert_eq!(JobSort::parse(bad).unwrap_err().field, "sort", "{bad:?}");
        }
        // No next-fire order (an index on it would be rewritten by every fire): refused,
        // the message listing the orders there are.
        for gone in ["next_fire_at", "-next_fire_at"] {
            let refused = JobSort::parse(gone).unwrap_err();
            assert_eq!(refused.field, "sort");
            assert!(
                refused
                    .message
                    .contains("name, -name, updated_at, -updated_at")
                    && !refused.message.contains("next_fire_at,"),
                "{}",
                refused.message
            );
        }
    }

    #[test]
    fn cursors_round_trip_and_are_refused_for_another_sort() {
        let mut j = job("shop", "close-orders_2");
        j.updated_at = "2026-11-27T10:00:00.123456Z".parse().unwrap();
        for value in SORTS {
            let sort = JobSort::parse(value).unwrap();
            let position = sort.position_of(&j);
            let cursor = position.cursor(sort);
            assert!(
                cursor
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)),
                "{cursor} is URL-safe"
            );
            assert_eq!(JobPosition::parse_cursor(&cursor, sort).unwrap(), position);
            for other in SORTS.iter().filter(|o| **o != value) {
                let other = JobSort::parse(other).unwrap();
                assert_eq!(
                    JobPosition::parse_cursor(&cursor, other).unwrap_err().field,
                    "cursor"
                );
            }
            assert!(JobPosition::parse_cursor(&cursor, JobSort::Created).is_err());
        }
        let created = JobSort::Created.position_of(&j).cursor(JobSort::Created);
        assert_eq!(
            created,
            j.id.to_string(),
            "the default cursor is the bare id"
        );
        assert_eq!(
            JobPosition::parse_cursor(&created, JobSort::Created).unwrap(),
            JobPosition::Id(j.id)
        );
        let by_name = JobSort::Name { descending: false };
        assert!(JobPosition::parse_cursor(&created, by_name).is_err());
        for bad in [
            "",
            "nope",
            "name.shop.x",
            "name.a b.c.00000000-0000-0000-0000-000000000000",
            "updated_at.soon.00000000-0000-0000-0000-000000000000",
            "updated_at.99999999999999999999.00000000-0000-0000-0000-000000000000",
            "next_fire_at.1.00000000-0000-0000-0000-000000000000",
            "-next_fire_at.none.00000000-0000-0000-0000-000000000000",
            "colour.1.00000000-0000-0000-0000-000000000000",
        ] {
            for value in SORTS {
                let sort = JobSort::parse(value).unwrap();
                let refused = JobPosition::parse_cursor(bad, sort).unwrap_err();
                assert_eq!(refused.field, "cursor", "{bad:?}");
            }
        }
    }

    #[test]
    fn search_paused_and_mode_parse_or_name_their_field() {
        assert_eq!(parse_search("Shop/CLOSE").unwrap(), "shop/close");
        assert_eq!(parse_search(&"é".repeat(128)).unwrap(), "é".repeat(128));
        assert_eq!(parse_search("").unwrap_err().field, "q");
        assert_eq!(parse_search(&"a".repeat(129)).unwrap_err().field, "q");
        assert_eq!(parse_search("a\0").unwrap_err().field, "q");
        assert!(parse_paused("true").unwrap());
        assert!(!parse_paused("false").unwrap());
        assert_eq!(parse_paused("yes").unwrap_err().field, "paused");
        assert_eq!(parse_mode("zone").unwrap(), DeliveryMode::Zone);
        assert_eq!(parse_mode("fanout").unwrap_err().field, "mode");
    }

    #[test]
    fn every_filter_must_hold() {
        let mut j = job("shop", "Close-Orders");
        j.spec.settings.target.mode = DeliveryMode::Broadcast;
        let all = JobFilter::default();
        assert!(all.matches(&j));
        let f = |f: JobFilter| f.matches(&j);
        assert!(f(JobFilter {
            search: Some("p/close".into()),
            ..all.clone()
        }));
        assert!(!f(JobFilter {
            search: Some("orders/".into()),
            ..all.clone()
        }));
        assert!(f(JobFilter {
            mode: Some(DeliveryMode::Broadcast),
            paused: Some(false),
            group: Some("web".into()),
            apps: Some(vec!["x".into(), "shop".into()]),
            ..all.clone()
        }));
        assert!(!f(JobFilter {
            paused: Some(true),
            ..all.clone()
        }));
        assert!(!f(JobFilter {
            group: Some("web2".into()),
            ..all.clone()
        }));
        assert!(!f(JobFilter {
            mode: Some(DeliveryMode::Group),
            ..all.clone()
        }));
        let none = JobFilter {
            apps: Some(vec![]),
            ..all
        };
        assert!(none.matches_nothing() && !none.matches(&j));
    }

    #[test]
    fn a_few_apps_branch_one_app_each() {
        let filter = JobFilter {
            apps: Some(vec!["a".into(), "b".into()]),
            paused: Some(true),
            limit: 7,
            ..JobFilter::default()
        };
        let parts = filter.branches();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[1].apps, Some(vec!["b".to_string()]));
        assert_eq!((parts[1].paused, parts[1].limit), (Some(true), 7));
        let many = JobFilter {
            apps: Some((0..=MAX_APP_BRANCHES).map(|i| i.to_string()).collect()),
            ..JobFilter::default()
        };
        assert_eq!(many.branches(), std::slice::from_ref(&many));
        assert_eq!(JobFilter::default().branches().len(), 1);
    }
}
