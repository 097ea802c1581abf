//! RabbitMQ's name limits applied to Chime's topology: every queue name, exchange name,
//! routing key and binding key is an AMQP short string of at most
//! [`MAX_SHORT_STRING`] bytes. The checks here derive each name with the same function
//! that builds it (see [`super::names`](mod@super::names)) and measure it, so what they accept always fits
//! and the broker never sees (and lapin never panics on) a name that does not.
//!
//! The rule for users: each name keeps its own limit ([`MAX_NAME_LEN`](super::MAX_NAME_LEN) bytes), and names
//! that are joined into one broker name share its 255 bytes:
//!
//! | names | joined into | combined limit |
//! | --- | --- | --- |
//! | app + job name | topic routing key `<app>.<job>` | 254 bytes |
//! | group + zone | zone queue `chime.group.<group>.zone.<zone>` | 237 bytes |
//! | group + instance | broadcast queue `chime.broadcast.<group>.<instance>` | 238 bytes |
//! | topic pattern | binding key | 255 bytes |

use std::fmt;

use lapin::types::ShortString;

use super::names::{
    MAX_SHORT_STRING, dead_letter_queue, group_queue, instance_queue, is_valid_instance,
    is_valid_name, observer_queue, task_queue, task_route, topic_routing_key, zone_queue,
    zone_routing_key,
};
use crate::protocol::{DeliveryMode, TaskMessage};

/// Which input a name check blames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameField {
    /// The job's app namespace.
    App,
    /// The job's name.
    Job,
    /// The target consumer group.
    Group,
    /// A zone; the index is its place in the job's zone list (0 for a single zone).
    Zone(usize),
    /// A consumer instance id.
    Instance,
    /// An observer's name.
    Observer,
    /// A topic pattern; the index is its place in the observer's pattern list.
    Pattern(usize),
}

impl fmt::Display for NameField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameField::App => f.write_str("app"),
            NameField::Job => f.write_str("job"),
            NameField::Group => f.write_str("group"),
            NameField::Zone(i) => write!(f, "zone[{i}]"),
            NameField::Instance => f.write_str("instance"),
            NameField::Observer => f.write_str("observer"),
            NameField::Pattern(i) => write!(f, "pattern[{i}]"),
        }
    }
}

/// A name Chime cannot use in RabbitMQ.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The name breaks the naming rule (see [`is_valid_name`], [`is_valid_instance`],
    /// [`super::is_valid_topic_pattern`]).
    #[error("{field} {name:?} is not a valid name")]
    Invalid {
        /// The input at fault.
        field: NameField,
        /// The name as given.
        name: String,
    },
    /// A broker name derived from it is longer than RabbitMQ allows.
    #[error(
        "{field} makes the {derived} {len} bytes long, over RabbitMQ's limit of {MAX_SHORT_STRING}"
    )]
    TooLong {
        /// The input at fault (the last name joined in).
        field: NameField,
        /// What was derived, e.g. `zone queue name`.
        derived: &'static str,
        /// Its length in bytes.
        len: usize,
    },
}

impl NameError {
    /// The input at fault.
    pub fn field(&self) -> NameField {
        match self {
            NameError::Invalid { field, .. } | NameError::TooLong { field, .. } => *field,
        }
    }

    /// A short label of the kind of failure, for metrics: `invalid_name` or `name_too_long`.
    pub fn reason(&self) -> &'static str {
        match self {
            NameError::Invalid { .. } => "invalid_name",
            NameError::TooLong { .. } => "name_too_long",
        }
    }
}

/// Checks that `name`, derived as a `derived` from `field`, fits a short string.
fn fits(field: NameField, derived: &'static str, name: &str) -> Result<(), NameError> {
    if name.len() <= MAX_SHORT_STRING {
        Ok(())
    } else {
        Err(NameError::TooLong {
            field,
            derived,
            len: name.len(),
        })
    }
}

fn valid(field: NameField, name: &str) -> Result<(), NameError> {
    if is_valid_name(name) {
        Ok(())
    } else {
        Err(NameError::Invalid {
            field,
            name: name.to_string(),
        })
    }
}

/// Checks group `group`: a valid name whose work queue and dead-letter queue fit.
pub fn check_group(group: &str) -> Result<(), NameError> {
    valid(NameField::Group, group)?;
    let queue = group_queue(group);
    fits(NameField::Group, "group queue name", &queue)?;
    fits(NameField::Group, "routing key", group)?;
    fits(
        NameField::Group,
        "dead-letter queue name",
        &dead_letter_queue(&queue),
    )
}

/// Checks zone `zone` of group `group` (zone number `index` of a job's list): a valid
/// name whose zone queue and routing key fit, together with the group's names.
pub fn check_zone(group: &str, zone: &str, index: usize) -> Result<(), NameError> {
    check_group(group)?;
    let field = NameField::Zone(index);
    valid(field, zone)?;
    fits(field, "zone queue name", &zone_queue(group, zone))?;
    fits(field, "zone routing key", &zone_routing_key(group, zone))
}

/// Checks consumer instance `instance` of group `group`: a valid instance id whose
/// broadcast queue fits.
pub fn check_instance(group: &str, instance: &str) -> Result<(), NameError> {
    check_group(group)?;
    if !is_valid_instance(instance) {
        return Err(NameError::Invalid {
            field: NameField::Instance,
            name: instance.to_string(),
        });
    }
    fits(
        NameField::Instance,
        "broadcast queue name",
        &instance_queue(group, instance),
    )
}

/// Checks observer `name` and its topic patterns: a valid name whose queue and
/// dead-letter queue fit, and patterns that are valid binding keys.
pub fn check_observer(name: &str, patterns: &[String]) -> Result<(), NameError> {
    valid(NameField::Observer, name)?;
    let queue = observer_queue(name);
    fits(NameField::Observer, "observer queue name", &queue)?;
    fits(
        NameField::Observer,
        "dead-letter queue name",
        &dead_letter_queue(&queue),
    )?;
    for (i, pattern) in patterns.iter().enumerate() {
        fits(NameField::Pattern(i), "binding key", pattern)?;
        if !super::is_valid_topic_pattern(pattern) {
            return Err(NameError::Invalid {
                field: NameField::Pattern(i),
                name: pattern.clone(),
            });
        }
    }
    Ok(())
}

/// Checks app `app` and job `job`: valid names whose topic routing key `<app>.<job>`
/// (observer copies) fits.
pub fn check_topic_key(app: &str, job: &str) -> Result<(), NameError> {
    valid(NameField::App, app)?;
    valid(NameField::Job, job)?;
    fits(
        NameField::Job,
        "topic routing key",
        &topic_routing_key(app, job),
    )
}

/// Checks every broker name a job's fires derive: its topic routing key, its group's
/// queues and, in `zone` mode, each listed zone's queue and routing key. A zone job
/// without a list (every live zone) is checked zone by zone when a consumer announces
/// its zone ([`check_zone`]).
pub fn check_job_topology(
    app: &str,
    job: &str,
    group: &str,
    mode: DeliveryMode,
    zones: Option<&[String]>,
) -> Result<(), NameError> {
    check_topic_key(app, job)?;
    check_group(group)?;
    if mode == DeliveryMode::Zone {
        for (i, zone) in zones.unwrap_or_default().iter().enumerate() {
            check_zone(group, zone, i)?;
        }
    }
    Ok(())
}

/// Checks every broker name publishing `task` uses: its route, its work queue and its
/// group's dead-letter queue. The observer copy's routing key is checked apart
/// ([`check_topic_key`]): a task may go out without its copy.
pub fn check_task(task: &TaskMessage) -> Result<(), NameError> {
    check_group(&task.group)?;
    if let (DeliveryMode::Zone, Some(zone)) = (task.mode, task.zone.as_deref()) {
        check_zone(&task.group, zone, 0)?;
    }
    let (_, routing_key) = task_route(task);
    fits(NameField::Group, "routing key", &routing_key)?;
    if let Some(queue) = task_queue(task) {
        fits(NameField::Group, "work queue name", &queue)?;
    }
    Ok(())
}

/// `name` as a short string (a queue or exchange name, a routing or binding key), or an
/// error instead of lapin's panic when it is over [`MAX_SHORT_STRING`] bytes. The error
/// is an I/O error of kind `InvalidInput`.
pub fn short_string(name: &str) -> Result<ShortString, lapin::Error> {
    ShortString::try_new(name).map_err(|error| {
        lapin::Error::from(std::io::Error::new(std::io::ErrorKind::InvalidInput, error))
    })
}

#[cfg(test)]
mod tests {
    use super::super::MAX_NAME_LEN;
    use super::*;
    use proptest::prelude::*;

    fn name(len: usize) -> String {
        "n".repeat(len)
    }

    #[test]
    fn the_reported_cases_are_refused_with_their_field() {
        let long = name(MAX_NAME_LEN);
        let zones = [long.clone()];
        let err = check_job_topology("shop", "close", &long, DeliveryMode::Zone, Some(&zones))
            .unwrap_err();
        assert_eq!(err.field(), NameField::Zone(0));
        assert!(matches!(err, NameError::TooLong { len: 274, .. }), "{err}");
        let err = check_job_topology(&long, &long, "web", DeliveryMode::Group, None).unwrap_err();
        assert_eq!(err.field(), NameField::Job);
        assert!(matches!(err, NameError::TooLong { len: 257, .. }), "{err}");
        assert_eq!(
            check_instance(&long, &long).unwrap_err().field(),
            NameField::Instance
        );
        let pattern = format!("{long}.{long}");
        assert_eq!(
            check_observer("audit", &["#".into(), pattern]).unwrap_err(),
            NameError::TooLong {
                field: NameField::Pattern(1),
                derived: "binding key",
                len: 257
            }
        );
    }

    #[test]
    fn the_combined_limits_are_exact() {
        let g = name(MAX_NAME_LEN);
        assert!(check_zone(&g, &name(237 - MAX_NAME_LEN), 0).is_ok());
        assert!(check_zone(&g, &name(238 - MAX_NAME_LEN), 0).is_err());
        assert!(check_instance(&g, &name(238 - MAX_NAME_LEN)).is_ok());
        assert!(check_instance(&g, &name(239 - MAX_NAME_LEN)).is_err());
        assert!(check_topic_key(&g, &name(254 - MAX_NAME_LEN)).is_ok());
        assert!(check_topic_key(&g, &name(255 - MAX_NAME_LEN)).is_err());
        assert!(check_observer(&name(MAX_NAME_LEN), &["#".into()]).is_ok());
        assert!(check_group("a b").is_err());
    }

    #[test]
    fn short_strings_over_the_limit_are_errors_not_panics() {
        assert!(short_string(&name(MAX_SHORT_STRING)).is_ok());
        assert!(short_string(&name(MAX_SHORT_STRING + 1)).is_err());
    }

    fn any_mode() -> impl Strategy<Value = DeliveryMode> {
        prop_oneof![
            Just(DeliveryMode::Group),
            Just(DeliveryMode::Broadcast),
            Just(DeliveryMode::Zone),
            Just(DeliveryMode::Sharded),
        ]
    }

    /// A valid name of 1 to `MAX_NAME_LEN` bytes, biased towards the long end.
    fn any_name() -> impl Strategy<Value = String> {
        prop_oneof![1..=MAX_NAME_LEN, 100..=MAX_NAME_LEN].prop_map(|len| {
            std::iter::once('a')
                .chain("b-_9".chars().cycle())
                .take(len)
                .collect()
        })
    }

    /// Every broker name a job's fires and its consumers derive, with the field to blame.
    fn derived(
        app: &str,
        job: &str,
        group: &str,
        mode: DeliveryMode,
        zones: &[String],
        instance: &str,
    ) -> Vec<String> {
        let queue = group_queue(group);
        let mut names = vec![
            topic_routing_key(app, job),
            queue.clone(),
            dead_letter_queue(&queue),
            group.to_string(),
        ];
        match mode {
            DeliveryMode::Zone => {
                for zone in zones {
                    names.push(zone_queue(group, zone));
                    names.push(zone_routing_key(group, zone));
                }
            }
            DeliveryMode::Broadcast => names.push(instance_queue(group, instance)),
            DeliveryMode::Group | DeliveryMode::Sharded => {}
        }
        names
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Whatever the checks accept fits RabbitMQ; whatever does not fit is refused.
        #[test]
        fn accepted_names_fit_and_names_that_do_not_fit_are_refused(
            app in any_name(),
            job in any_name(),
            group in any_name(),
            mode in any_mode(),
            zones in proptest::collection::vec(any_name(), 1..4),
            instance in any_name(),
            observer in any_name(),
        ) {
            let accepted = check_job_topology(&app, &job, &group, mode, Some(&zones)).is_ok()
                && (mode != DeliveryMode::Broadcast || check_instance(&group, &instance).is_ok());
            let names = derived(&app, &job, &group, mode, &zones, &instance);
            let fit = names.iter().all(|n| n.len() <= MAX_SHORT_STRING);
            prop_assert_eq!(accepted, fit, "names: {:?}", names);
            if accepted {
                for n in &names {
                    prop_assert!(ShortString::try_new(n.as_str()).is_ok());
                }
            }
            let pattern = format!("{app}.{job}");
            let observed = check_observer(&observer, std::slice::from_ref(&pattern)).is_ok();
            let queue = observer_queue(&observer);
            prop_assert_eq!(
                observed,
                [&queue, &dead_letter_queue(&queue), &pattern]
                    .iter()
                    .all(|n| n.len() <= MAX_SHORT_STRING)
            );
        }

        /// A task built from an accepted job publishes only names that fit.
        #[test]
        fn tasks_of_accepted_jobs_pass_the_publish_check(
            app in any_name(),
            job in any_name(),
            group in any_name(),
            mode in any_mode(),
            zone in any_name(),
        ) {
            let zones = [zone.clone()];
            let task = TaskMessage {
                v: 1,
                task_id: uuid::Uuid::nil(),
                job_id: uuid::Uuid::nil(),
                app: app.clone(),
                job: job.clone(),
                group: group.clone(),
                fire_time: chrono::DateTime::UNIX_EPOCH,
                shard: 0,
                shard_total: 1,
                attempt: 1,
                mode,
                zone: (mode == DeliveryMode::Zone).then_some(zone),
                payload: serde_json::Value::Null,
                published_at: chrono::DateTime::UNIX_EPOCH,
                run_timeout_ms: None,
            };
            let job_ok = check_job_topology(&app, &job, &group, mode, Some(&zones)).is_ok();
            let task_ok = check_task(&task).is_ok();
            if job_ok {
                prop_assert!(task_ok);
            }
            if task_ok {
                let (_, key) = task_route(&task);
                prop_assert!(key.len() <= MAX_SHORT_STRING);
                if let Some(queue) = task_queue(&task) {
                    prop_assert!(queue.len() <= MAX_SHORT_STRING);
                }
            }
        }
    }
}
