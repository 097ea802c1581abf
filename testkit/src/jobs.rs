//! Job specs for the HTTP API, written as code with defaults: a scenario names what
//! matters to it (the schedule, the target, a policy) and the factory fills in the rest.
//!
//! Plain JSON on purpose: this crate does not depend on `chime-scheduler` (which
//! dev-depends on it), and the API takes JSON anyway, so a fixture is exactly what a
//! client would send.

use serde_json::{Map, Value, json};

/// A job body for `POST /v1/jobs`, built up field by field.
///
/// ```
/// use chime_testkit::JobSpec;
/// let job = JobSpec::new("e2e", "report").every("1s").group("workers").build();
/// assert_eq!(job["schedule"]["every"], "1s");
/// assert_eq!(job["target"]["group"], "workers");
/// ```
#[derive(Debug, Clone)]
pub struct JobSpec {
    body: Map<String, Value>,
}

impl JobSpec {
    /// Job `name` in `app`, with no schedule or target yet.
    pub fn new(app: &str, name: &str) -> Self {
        let mut body = Map::new();
        body.insert("app".into(), json!(app));
        body.insert("name".into(), json!(name));
        Self { body }
    }

    /// Sets `key` to `value`, replacing what was there.
    pub fn set(mut self, key: &str, value: Value) -> Self {
        self.body.insert(key.into(), value);
        self
    }

    /// A cron schedule (six or seven fields, seconds first).
    pub fn cron(self, expression: &str) -> Self {
        self.set("schedule", json!({ "cron": expression }))
    }

    /// A fixed-interval schedule such as `"1s"` or `"1h"`.
    pub fn every(self, interval: &str) -> Self {
        self.set("schedule", json!({ "every": interval }))
    }

    /// A one-shot schedule at an RFC 3339 time.
    pub fn at(self, time: &str) -> Self {
        self.set("schedule", json!({ "at": time }))
    }

    /// Targets consumer group `group`.
    pub fn group(self, group: &str) -> Self {
        self.set("target", json!({ "group": group }))
    }

    /// Sets the whole target object (delivery mode, zone, shards, ...).
    pub fn target(self, target: Value) -> Self {
        self.set("target", target)
    }

    /// Sets the payload handed to the handler.
    pub fn payload(self, payload: Value) -> Self {
        self.set("payload", payload)
    }

    /// Sets every top-level field of the object `extra`, replacing fields already set;
    /// panics if `extra` is not an object.
    pub fn merge(mut self, extra: &Value) -> Self {
        let fields = extra.as_object().expect("extra job fields as an object");
        for (key, value) in fields {
            self.body.insert(key.clone(), value.clone());
        }
        self
    }

    /// The JSON body.
    pub fn build(self) -> Value {
        Value::Object(self.body)
    }
}

impl From<JobSpec> for Value {
    fn from(spec: JobSpec) -> Self {
        spec.build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_fields_replace_earlier_ones() {
        let job = JobSpec::new("a", "j")
            .every("1s")
            .group("g")
            .merge(&json!({"target": {"group": "h"}, "misfire": "skip"}))
            .build();
        assert_eq!(
            job,
            json!({
                "app": "a", "name": "j", "schedule": {"every": "1s"},
                "target": {"group": "h"}, "misfire": "skip",
            })
        );
    }
}
