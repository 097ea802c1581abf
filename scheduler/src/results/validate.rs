//! Checks and clean-up of a reply before it reaches the store: presence and observer
//! registrations must name routable things, and text PostgreSQL cannot store is replaced.

use chrono::{DateTime, Utc};
use serde_json::Value;
use tracing::warn;

use chime_consumer::protocol::{
    MAX_OBSERVER_PATTERNS, ObserveMessage, PresenceMessage, Reply, TaskOutcome, topology,
};

/// Prepares a reply for the store: replaces what PostgreSQL cannot store, checks the
/// names in presence messages and registrations, and stamps those with `now`, this
/// node's clock (liveness is judged by it, not the sender's). False if the reply must be
/// dead-lettered.
pub(super) fn admit(reply: &mut Reply, now: DateTime<Utc>) -> bool {
    sanitise(reply);
    match reply {
        Reply::Presence(presence) if !valid_presence(presence) => {
            warn!(instance = %presence.instance, group = %presence.group,
                "dead-lettering a presence message with an invalid group or zone name");
            false
        }
        Reply::Observe(observe) if !valid_observe(observe) => {
            warn!(observer = %observe.observer, patterns = observe.patterns.len(),
                "dead-lettering an observer registration with an invalid name or pattern");
            false
        }
        Reply::Presence(presence) => {
            presence.at = now;
            true
        }
        Reply::Observe(observe) => {
            observe.at = now;
            true
        }
        Reply::Ack(_) | Reply::Heartbeat(_) | Reply::Result(_) => true,
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
    use chime_consumer::protocol::{ResultMessage, TaskError};
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
}
