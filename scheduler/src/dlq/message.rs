//! Reading a dead-lettered message: which kind it is (a Chime dead letter, a task the
//! broker dead-lettered, or an unreadable body), why it was dead-lettered and how old it
//! is. Where a replay sends it is never read from the message: a header can be forged by
//! whoever could publish to the dead-letter exchange (see [`super::replay`]).

use chime_consumer::protocol::{DeadLetterMessage, TaskMessage, dead_letter::REASON_HEADER};
use chrono::{DateTime, Utc};
use lapin::{
    BasicProperties,
    types::{AMQPValue, FieldTable},
};

use crate::{api::dto::DlqMessage, domain::timestamp::timestamp};

/// Longest excerpt of an unreadable body shown.
const BODY_EXCERPT: usize = 512;

/// A parsed dead-lettered message.
pub(crate) struct Classified {
    pub(crate) view: DlqMessage,
    /// The task, for dead letters and broker-dead-lettered tasks.
    pub(crate) task: Option<TaskMessage>,
    /// When it was dead-lettered.
    pub(crate) dead_at: Option<DateTime<Utc>>,
}

impl Classified {
    /// The job as `app/name`, if known.
    pub(crate) fn job(&self) -> Option<&str> {
        self.view.job.as_deref()
    }
}

/// Reads a message taken from a dead-letter queue.
pub(crate) fn classify(body: &[u8], properties: &BasicProperties) -> Classified {
    let headers = properties.headers().as_ref();
    let death = headers.and_then(first_death);
    let broker_reason = death.as_ref().and_then(|d| d.reason.clone());
    let broker_time = death.as_ref().and_then(|d| d.time);
    if let Ok(letter) = DeadLetterMessage::from_slice(body) {
        let task = letter.task.clone();
        return Classified {
            view: DlqMessage {
                kind: "dead_letter".into(),
                reason: letter.reason.clone(),
                run_id: Some(task.task_id),
                job: Some(format!("{}/{}", task.app, task.job)),
                attempt: Some(task.attempt),
                dead_at: Some(timestamp(letter.dead_at)),
                payload: Some(task.payload.clone()),
                history: letter.history,
                body: None,
                resolved: false,
            },
            task: Some(task),
            dead_at: Some(letter.dead_at),
        };
    }
    let reason = headers
        .and_then(|h| text(h, REASON_HEADER))
        .or(broker_reason)
        .unwrap_or_else(|| "unknown".into());
    let dead_at = broker_time.or_else(|| {
        properties
            .timestamp()
            .and_then(|t| DateTime::from_timestamp(t as i64, 0))
    });
    match TaskMessage::from_slice(body) {
        Ok(task) => Classified {
            view: DlqMessage {
                kind: "task".into(),
                reason,
                run_id: Some(task.task_id),
                job: Some(format!("{}/{}", task.app, task.job)),
                attempt: Some(task.attempt),
                dead_at: dead_at.map(timestamp),
                payload: Some(task.payload.clone()),
                history: Vec::new(),
                body: None,
                resolved: false,
            },
            task: Some(task),
            dead_at,
        },
        Err(_) => {
            let text = String::from_utf8_lossy(body);
            Classified {
                view: DlqMessage {
                    kind: "unreadable".into(),
                    reason,
                    run_id: None,
                    job: None,
                    attempt: None,
                    dead_at: dead_at.map(timestamp),
                    payload: None,
                    history: Vec::new(),
                    body: Some(text.chars().take(BODY_EXCERPT).collect()),
                    resolved: false,
                },
                task: None,
                dead_at,
            }
        }
    }
}

struct Death {
    reason: Option<String>,
    time: Option<DateTime<Utc>>,
}

/// The newest entry of RabbitMQ's `x-death` header (it lists the latest first).
fn first_death(headers: &FieldTable) -> Option<Death> {
    let AMQPValue::FieldArray(deaths) = headers.inner().get("x-death")? else {
        return None;
    };
    let AMQPValue::FieldTable(death) = deaths.as_slice().first()? else {
        return None;
    };
    let time = match death.inner().get("time") {
        Some(AMQPValue::Timestamp(t)) => DateTime::from_timestamp(*t as i64, 0),
        _ => None,
    };
    Some(Death {
        reason: text(death, "reason"),
        time,
    })
}

fn text(table: &FieldTable, key: &str) -> Option<String> {
    table.inner().get(key).and_then(value_text)
}

fn value_text(value: &AMQPValue) -> Option<String> {
    match value {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::types::{FieldArray, LongString, ShortString};

    fn death(reason: &str) -> BasicProperties {
        let mut entry = FieldTable::default();
        entry.insert(
            ShortString::from("reason"),
            AMQPValue::LongString(LongString::from(reason)),
        );
        entry.insert(
            ShortString::from("exchange"),
            AMQPValue::LongString(LongString::from("chime.tasks")),
        );
        entry.insert(
            ShortString::from("routing-keys"),
            AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::LongString(
                LongString::from("orders"),
            )])),
        );
        entry.insert(
            ShortString::from("time"),
            AMQPValue::Timestamp(1_800_000_000),
        );
        let mut headers = FieldTable::default();
        headers.insert(
            ShortString::from("x-death"),
            AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(entry)])),
        );
        BasicProperties::default().with_headers(headers)
    }

    #[test]
    fn unreadable_body_keeps_the_broker_reason() {
        let c = classify(b"not json", &death("rejected"));
        assert_eq!(c.view.kind, "unreadable");
        assert_eq!(c.view.reason, "rejected");
        assert_eq!(c.view.body.as_deref(), Some("not json"));
        assert!(!c.view.resolved);
        assert_eq!(c.dead_at.unwrap().timestamp(), 1_800_000_000);
    }
}
