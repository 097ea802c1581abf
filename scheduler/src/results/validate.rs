//! Checks and clean-up of a reply before it reaches the store: presence and observer
//! registrations must name routable things, and text PostgreSQL cannot store is replaced.

use chrono::{DateTime, Utc};
use serde_json::Value;
use tracing::warn;

use chime_consumer::protocol::{
    AckMessage, HeartbeatMessage, MAX_OBSERVER_PATTERNS, MAX_VERSION_LEN, ObserveMessage,
    PresenceMessage, Progress, Reply, ResultMessage, TaskOutcome, topology,
};

/// Prepares a reply for the store: replaces what PostgreSQL cannot store, checks the
/// names in presence messages and registrations and the `consumer` of acks, heartbeats
/// and results (an instance id, like a presence message's), and stamps presence messages
/// and registrations with `now`, this node's clock (liveness is judged by it, not the
/// sender's). The reason, if the reply must be dead-lettered.
pub(super) fn admit(reply: &mut Reply, now: DateTime<Utc>) -> Result<(), String> {
    sanitise(reply);
    match reply {
        Reply::Presence(presence) if !valid_presence(presence) => {
            warn!(instance = %presence.instance, group = %presence.group,
                "dead-lettering a presence message with an invalid group or zone name");
            Err("invalid presence: instance, group or zone is not a valid name".into())
        }
        Reply::Observe(observe) if !valid_observe(observe) => {
            warn!(observer = %observe.observer, patterns = observe.patterns.len(),
                "dead-lettering an observer registration with an invalid name or pattern");
            Err(format!(
                "invalid observer registration: a valid observer name and 1 to {MAX_OBSERVER_PATTERNS} valid topic patterns are required"
            ))
        }
        Reply::Presence(presence) => {
            presence.at = now;
            // Informational: one that does not fit is dropped, the presence still counts.
            presence.version = presence.version.take().filter(|v| valid_version(v));
            Ok(())
        }
        Reply::Observe(observe) => {
            observe.at = now;
            Ok(())
        }
        Reply::Heartbeat(HeartbeatMessage {
            task_id,
            progress:
                Some(Progress {
                    percent: Some(percent),
                    ..
                }),
            ..
        }) if !(0.0..=100.0).contains(percent) => {
            warn!(%task_id, percent, "dead-lettering a heartbeat with a percent outside 0 to 100");
            Err(format!(
                "invalid progress: percent {percent} is outside 0 to 100"
            ))
        }
        Reply::Ack(AckMessage { consumer, .. })
        | Reply::Heartbeat(HeartbeatMessage { consumer, .. })
        | Reply::Result(ResultMessage { consumer, .. }) => {
            if topology::is_valid_instance(consumer) {
                Ok(())
            } else {
                warn!(task_id = ?reply.task_id(), "dead-lettering a reply with an invalid consumer id");
                Err(format!(
                    "invalid consumer: 1 to {} printable ASCII characters without spaces",
                    topology::MAX_NAME_LEN
                ))
            }
        }
    }
}

/// Whether a presence message names a group, instance and zone that could route tasks,
/// with broker names (its zone queue, its broadcast queue if it takes broadcasts) that
/// fit RabbitMQ's 255 bytes.
fn valid_presence(presence: &PresenceMessage) -> bool {
    topology::check_group(&presence.group).is_ok()
        && topology::is_valid_instance(&presence.instance)
        && (!presence.broadcast
            || topology::check_instance(&presence.group, &presence.instance).is_ok())
        && presence
            .zone
            .as_deref()
            .is_none_or(|zone| topology::check_zone(&presence.group, zone, 0).is_ok())
}

/// Whether a presence message's `version` is 1 to [`MAX_VERSION_LEN`] printable ASCII
/// characters (spaces allowed).
fn valid_version(version: &str) -> bool {
    (1..=MAX_VERSION_LEN).contains(&version.len())
        && version.bytes().all(|b| (b' '..=b'~').contains(&b))
}

/// Whether an observer registration names a valid observer and 1 to
/// [`MAX_OBSERVER_PATTERNS`] valid topic patterns.
fn valid_observe(observe: &ObserveMessage) -> bool {
    (1..=MAX_OBSERVER_PATTERNS).contains(&observe.patterns.len())
        && topology::check_observer(&observe.observer, &observe.patterns).is_ok()
}

/// Replaces NUL characters, which PostgreSQL cannot store in text or jsonb, so a
/// consumer's odd output never makes a reply unstorable.
fn sanitise(reply: &mut Reply) {
    fn clean(text: &mut String) {
        if text.contains('\0') {
            *text = text.replace('\0', "\u{fffd}");
        }
    }
    fn clean_value(value: &mut Value) {
        match value {
            Value::String(s) => clean(s),
            Value::Array(items) => items.iter_mut().for_each(clean_value),
            Value::Object(map) => {
                let dirty: Vec<String> = map.keys().filter(|k| k.contains('\0')).cloned().collect();
                for key in dirty {
                    if let Some(v) = map.remove(&key) {
                        map.insert(key.replace('\0', "\u{fffd}"), v);
                    }
                }
                map.values_mut().for_each(clean_value);
            }
            _ => {}
        }
    }
    match reply {
        // Names and patterns are validated whole; a NUL fails validation.
        Reply::Observe(_) => {}
        Reply::Ack(ack) => clean(&mut ack.consumer),
        Reply::Presence(presence) => {
            clean(&mut presence.instance);
            clean(&mut presence.group);
            if let Some(zone) = presence.zone.as_mut() {
                clean(zone);
            }
        }
        Reply::Heartbeat(heartbeat) => {
            clean(&mut heartbeat.consumer);
            if let Some(note) = heartbeat.progress.as_mut().and_then(|p| p.note.as_mut()) {
                clean(note);
            }
        }
        Reply::Result(result) => {
            clean(&mut result.consumer);
            match &mut result.outcome {
                TaskOutcome::Succeeded {
                    output: Some(output),
                } => clean_value(output),
                TaskOutcome::Succeeded { output: None } => {}
                TaskOutcome::Failed { error } => clean(&mut error.message),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chime_consumer::protocol::TaskError;
    use serde_json::json;

    #[test]
    fn nul_characters_are_replaced() {
        let mut reply = Reply::Result(ResultMessage {
            v: 1,
            task_id: uuid::Uuid::nil(),
            attempt: 1,
            consumer: "a\0b".into(),
            finished_at: chrono::Utc::now(),
            replayed: false,
            outcome: TaskOutcome::Succeeded {
                output: Some(json!({"k\0": ["x\0", {"y": "\0"}]})),
            },
        });
        sanitise(&mut reply);
        let text = serde_json::to_string(&reply).unwrap();
        assert!(!text.contains("\\u0000"), "{text}");
        let mut failed = Reply::Result(ResultMessage {
            v: 1,
            task_id: uuid::Uuid::nil(),
            attempt: 1,
            consumer: "c".into(),
            finished_at: chrono::Utc::now(),
            replayed: false,
            outcome: TaskOutcome::Failed {
                error: TaskError {
                    message: "bad\0".into(),
                    retryable: false,
                    retry_after_ms: None,
                },
            },
        });
        sanitise(&mut failed);
        assert!(!serde_json::to_string(&failed).unwrap().contains("\\u0000"));
    }

    #[test]
    fn presence_must_name_routable_groups_and_zones() {
        let presence = |group: &str, zone: Option<&str>| PresenceMessage {
            v: 1,
            instance: "web-1".into(),
            group: group.into(),
            zone: zone.map(str::to_string),
            broadcast: false,
            version: None,
            at: chrono::Utc::now(),
        };
        assert!(valid_presence(&presence("web", Some("dc1"))));
        assert!(valid_presence(&presence("web", None)));
        assert!(!valid_presence(&presence("web", Some("a.b"))));
        assert!(!valid_presence(&presence("we b", None)));
        // Each name fits alone, but the zone queue would be 274 bytes.
        let long = "x".repeat(128);
        assert!(valid_presence(&presence(&long, Some("dc1"))));
        assert!(!valid_presence(&presence(&long, Some(&long))));
    }

    #[test]
    fn a_presence_keeps_a_fitting_version_and_drops_another() {
        let reply = |version: &str| {
            let mut reply = Reply::Presence(PresenceMessage {
                v: 1,
                instance: "web-1".into(),
                group: "web".into(),
                zone: None,
                broadcast: false,
                version: Some(version.into()),
                at: chrono::Utc::now(),
            });
            admit(&mut reply, chrono::Utc::now()).expect("the presence is admitted");
            match reply {
                Reply::Presence(presence) => presence.version,
                _ => unreachable!(),
            }
        };
        assert_eq!(
            reply("chime-consumer/0.1.0").as_deref(),
            Some("chime-consumer/0.1.0")
        );
        assert_eq!(reply("my app 2.0").as_deref(), Some("my app 2.0"));
        assert_eq!(reply(""), None);
        assert_eq!(reply(&"v".repeat(65)), None);
        assert_eq!(reply("caf\u{e9}/1"), None);
        assert_eq!(reply("a\nb"), None);
    }

    #[test]
    fn observer_registrations_must_carry_a_name_and_usable_patterns() {
        let observe = |observer: &str, patterns: Vec<String>| ObserveMessage {
            v: 1,
            observer: observer.into(),
            patterns,
            at: chrono::Utc::now(),
        };
        let one = |p: &str| vec![p.to_string()];
        assert!(valid_observe(&observe("audit", one("shop.*"))));
        assert!(valid_observe(&observe("audit", one("#"))));
        assert!(!valid_observe(&observe("audit", vec![])));
        assert!(!valid_observe(&observe("audit", one("shop..x"))));
        assert!(!valid_observe(&observe("au dit", one("#"))));
        let long = "x".repeat(128);
        assert!(!valid_observe(&observe(
            "audit",
            one(&format!("{long}.{long}"))
        )));
        let too_many = (0..=MAX_OBSERVER_PATTERNS)
            .map(|i| format!("a{i}.*"))
            .collect();
        assert!(!valid_observe(&observe("audit", too_many)));
    }

    #[test]
    fn acks_heartbeats_and_results_must_name_a_valid_consumer() {
        let ack = |consumer: &str| {
            Reply::Ack(AckMessage {
                v: 1,
                task_id: uuid::Uuid::nil(),
                attempt: 1,
                consumer: consumer.into(),
                acked_at: chrono::Utc::now(),
            })
        };
        let now = chrono::Utc::now();
        assert!(admit(&mut ack("orders-7f9c-12"), now).is_ok());
        for bad in [
            "",
            "a b",
            &"x".repeat(topology::MAX_NAME_LEN + 1),
            "caf\u{e9}",
        ] {
            let error = admit(&mut ack(bad), now).unwrap_err();
            assert!(error.starts_with("invalid consumer"), "{bad:?}: {error}");
        }
        // A NUL is replaced first, and the replacement is not printable ASCII.
        assert!(admit(&mut ack("a\0b"), now).is_err());
    }

    #[test]
    fn progress_percent_must_be_0_to_100() {
        let heartbeat = |percent: f64| {
            Reply::Heartbeat(HeartbeatMessage {
                v: 1,
                task_id: uuid::Uuid::nil(),
                attempt: 1,
                consumer: "c1".into(),
                at: chrono::Utc::now(),
                progress: Some(Progress {
                    percent: Some(percent),
                    note: None,
                }),
            })
        };
        let now = chrono::Utc::now();
        for ok in [0.0, 42.5, 100.0] {
            assert!(admit(&mut heartbeat(ok), now).is_ok(), "{ok}");
        }
        for bad in [-0.1, 100.5, 1e300] {
            let error = admit(&mut heartbeat(bad), now).unwrap_err();
            assert!(error.starts_with("invalid progress"), "{bad}: {error}");
        }
    }
}
