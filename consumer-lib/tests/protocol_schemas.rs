//! The JSON Schemas in `docs/protocol/` against the protocol's two other descriptions:
//! every JSON example in `docs/protocol.md` (each marked with the schema it shows), the
//! messages this crate's types serialise to, and the field tables in `protocol.md`
//! (field names and the required column), and the readers themselves (a field is required
//! in a schema exactly when the Rust reader refuses an example without it). A schema, an
//! example, a table or a message type that drifts from the others fails here.
//!
//! Each message is checked twice: against the schemas as published (which, like the
//! readers, allow fields they do not know), and against a strict copy that refuses any
//! field a schema does not declare, so a field the code writes must be in the schema.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use chime_consumer::protocol::{
    AckMessage, AttemptRecord, CancelMessage, DeadLetterMessage, DeliveryMode, HeartbeatMessage,
    ObserveMessage, PresenceMessage, Progress, Reply, ReplyBatch, ResultMessage, TaskError,
    TaskMessage, TaskOutcome,
};
use jsonschema::{Registry, Validator};
use serde_json::{Value, json};
use uuid::Uuid;

/// Where the published schemas say they live; `$ref`s between them are relative to it.
const BASE: &str = "https://github.com/chime-scheduler/chime/raw/main/docs/protocol/";

fn docs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs")
}

/// Every schema file, by message name (`task` for `task.schema.json`).
fn schemas() -> BTreeMap<String, Value> {
    let mut schemas = BTreeMap::new();
    for entry in std::fs::read_dir(docs().join("protocol")).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_str().unwrap().to_string();
        let Some(name) = file.strip_suffix(".schema.json") else {
            panic!("unexpected file {file} in docs/protocol");
        };
        let schema: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(schema["$id"], format!("{BASE}{file}"), "{file}: $id");
        assert_eq!(
            schema["$schema"], "https://json-schema.org/draft/2020-12/schema",
            "{file}: draft"
        );
        schemas.insert(name.to_string(), schema);
    }
    assert!(schemas.len() >= 10, "schemas: {:?}", schemas.keys());
    schemas
}

/// `schema` refusing, in every object it describes with `properties`, any other field.
fn strict(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out: serde_json::Map<String, Value> = map
                .iter()
                .map(|(k, v)| {
                    // Inside `properties` and `$defs` the keys are names, not keywords.
                    let v = match k.as_str() {
                        "properties" | "$defs" => Value::Object(
                            v.as_object()
                                .unwrap()
                                .iter()
                                .map(|(name, s)| (name.clone(), strict(s)))
                                .collect(),
                        ),
                        _ => strict(v),
                    };
                    (k.clone(), v)
                })
                .collect();
            // Objects a schema describes say `"type": "object"`; the subschemas of
            // `if`/`then` that only look at a field do not.
            if map.contains_key("properties") && map.get("type") == Some(&json!("object")) {
                out.insert("unevaluatedProperties".into(), json!(false));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(strict).collect()),
        other => other.clone(),
    }
}

/// Validators for every schema, published and strict.
struct Schemas {
    published: BTreeMap<String, Validator>,
    strict: BTreeMap<String, Validator>,
}

impl Schemas {
    fn load() -> Self {
        let schemas = schemas();
        let build = |transform: fn(&Value) -> Value| {
            let docs: Vec<(String, Value)> = schemas
                .iter()
                .map(|(name, s)| (format!("{BASE}{name}.schema.json"), transform(s)))
                .collect();
            let registry = docs
                .iter()
                .fold(Registry::new(), |registry, (uri, doc)| {
                    registry.add(uri, doc.clone()).unwrap()
                })
                .prepare()
                .unwrap();
            docs.iter()
                .map(|(uri, doc)| {
                    let name = uri
                        .strip_prefix(BASE)
                        .unwrap()
                        .strip_suffix(".schema.json")
                        .unwrap();
                    let validator = jsonschema::options()
                        .with_registry(&registry)
                        .build(doc)
                        .unwrap_or_else(|e| panic!("{name}: {e}"));
                    (name.to_string(), validator)
                })
                .collect()
        };
        Self {
            published: build(Value::clone),
            strict: build(strict),
        }
    }

    /// Panics unless `instance` is a valid `name` message, published and strict.
    fn check(&self, name: &str, instance: &Value, what: &str) {
        for (kind, validators) in [("published", &self.published), ("strict", &self.strict)] {
            let validator = validators
                .get(name)
                .unwrap_or_else(|| panic!("{what}: no schema {name}"));
            let errors: Vec<String> = validator
                .iter_errors(instance)
                .map(|e| format!("{} at {}", e, e.instance_path()))
                .collect();
            assert!(
                errors.is_empty(),
                "{what} is not a valid {name} ({kind} schema): {errors:#?}\n{instance:#}"
            );
        }
    }

    fn is_valid(&self, name: &str, instance: &Value) -> bool {
        self.published[name].is_valid(instance)
    }
}

fn protocol_md() -> String {
    std::fs::read_to_string(docs().join("protocol.md")).unwrap()
}

/// The HTML comment `<!-- key: value -->` on `line`, if it is one.
fn marker<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.trim()
        .strip_prefix("<!--")?
        .strip_suffix("-->")?
        .trim()
        .strip_prefix(key)?
        .strip_prefix(':')
        .map(str::trim)
}

/// Every ```json block of protocol.md: its line, the schema its marker names, its text.
fn examples() -> Vec<(usize, String, String)> {
    let text = protocol_md();
    let lines: Vec<&str> = text.lines().collect();
    let mut examples = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() != "```json" {
            i += 1;
            continue;
        }
        let line_no = i + 1;
        let name = (i > 0)
            .then(|| marker(lines[i - 1], "schema"))
            .flatten()
            .unwrap_or_else(|| {
                panic!(
                    "protocol.md:{line_no}: a json block without `<!-- schema: ... -->` before it"
                )
            });
        let end = (i + 1..lines.len())
            .find(|&j| lines[j].trim() == "```")
            .unwrap_or_else(|| panic!("protocol.md:{line_no}: unclosed block"));
        examples.push((line_no, name.to_string(), lines[i + 1..end].join("\n")));
        i = end + 1;
    }
    examples
}

/// Whether the Rust readers take `body` as a `name` message (a schema target).
fn reads(name: &str, body: &Value) -> Result<(), String> {
    let bytes = body.to_string().into_bytes();
    let error = |e: &dyn std::fmt::Display| e.to_string();
    match name {
        "task" => TaskMessage::from_slice(&bytes)
            .map(drop)
            .map_err(|e| error(&e)),
        "dead_letter" => DeadLetterMessage::from_slice(&bytes)
            .map(drop)
            .map_err(|e| error(&e)),
        "cancel" => CancelMessage::from_slice(&bytes)
            .map(drop)
            .map_err(|e| error(&e)),
        "batch" => Reply::many_from_slice(&bytes)
            .map(drop)
            .map_err(|e| error(&e)),
        "attempt_record" => serde_json::from_value::<AttemptRecord>(body.clone())
            .map(drop)
            .map_err(|e| error(&e)),
        "result#/$defs/error" => serde_json::from_value::<TaskError>(body.clone())
            .map(drop)
            .map_err(|e| error(&e)),
        "heartbeat#/$defs/progress" => serde_json::from_value::<Progress>(body.clone())
            .map(drop)
            .map_err(|e| error(&e)),
        _ => Reply::from_slice(&bytes).map(drop).map_err(|e| error(&e)),
    }
}

#[test]
fn every_example_in_protocol_md_is_marked_and_valid() {
    let schemas = Schemas::load();
    let mut shown = BTreeSet::new();
    for (line_no, name, body) in examples() {
        let example: Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("protocol.md:{line_no}: not JSON: {e}"));
        schemas.check(&name, &example, &format!("protocol.md:{line_no}"));
        // What the schema accepts, the code reads too.
        let read = reads(&name, &example);
        assert!(read.is_ok(), "protocol.md:{line_no}: {read:?}");
        shown.insert(name);
    }
    let expected: BTreeSet<String> = [
        "task",
        "ack",
        "result",
        "heartbeat",
        "presence",
        "observe",
        "batch",
        "dead_letter",
        "cancel",
    ]
    .map(String::from)
    .into();
    assert_eq!(shown, expected, "message types with an example");
}

/// Fields whose requirement depends on another field (`zone` and `mode` go together;
/// a failure has an `error`): the schemas say so with `if`/`then`, the readers do not
/// all check it.
const CONDITIONAL: [(&str, &str); 3] = [("task", "zone"), ("task", "mode"), ("result", "error")];

#[test]
fn the_required_fields_are_the_ones_the_readers_require() {
    let schemas = schemas();
    // Each example, and the objects inside them that have their own table.
    let mut cases: Vec<(String, Value, String)> = Vec::new();
    for (line_no, name, body) in examples() {
        let example: Value = serde_json::from_str(&body).unwrap();
        let at = format!("protocol.md:{line_no}");
        for record in example["history"].as_array().into_iter().flatten() {
            cases.push(("attempt_record".into(), record.clone(), at.clone()));
        }
        if example["error"].is_object() {
            cases.push((
                "result#/$defs/error".into(),
                example["error"].clone(),
                at.clone(),
            ));
        }
        if example["progress"].is_object() {
            let progress = example["progress"].clone();
            cases.push(("heartbeat#/$defs/progress".into(), progress, at.clone()));
        }
        cases.push((name, example, at));
    }
    let mut tried = 0;
    for (target, example, at) in cases {
        let required: BTreeSet<&str> = subschema(&schemas, &target)["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap())
            .collect();
        for field in example.as_object().unwrap().keys() {
            if CONDITIONAL.contains(&(target.as_str(), field.as_str())) {
                continue;
            }
            let mut without = example.clone();
            without.as_object_mut().unwrap().remove(field);
            let read = reads(&target, &without);
            assert_eq!(
                read.is_err(),
                required.contains(field.as_str()),
                "{at}: {target} without `{field}`: {read:?}"
            );
            tried += 1;
        }
    }
    assert!(tried > 60, "{tried} fields tried");
}

/// The subschema a `<!-- fields: ... -->` marker names: `task` or `result#/$defs/error`.
fn subschema<'a>(schemas: &'a BTreeMap<String, Value>, target: &str) -> &'a Value {
    let (file, pointer) = target.split_once('#').unwrap_or((target, ""));
    schemas
        .get(file)
        .and_then(|s| s.pointer(pointer))
        .unwrap_or_else(|| panic!("fields marker names no schema: {target}"))
}

#[test]
fn the_field_tables_in_protocol_md_match_the_schemas() {
    let schemas = schemas();
    let text = protocol_md();
    let lines: Vec<&str> = text.lines().collect();
    let mut tabled = BTreeSet::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(target) = marker(line, "fields") else {
            continue;
        };
        let schema = subschema(&schemas, target);
        let rows: Vec<Vec<String>> = lines[i + 1..]
            .iter()
            .skip_while(|l| l.trim().is_empty())
            .take_while(|l| l.starts_with('|'))
            .map(|l| {
                l.trim()
                    .trim_matches('|')
                    .split('|')
                    .map(|c| c.trim().to_string())
                    .collect()
            })
            .collect();
        let line_no = i + 1;
        assert!(
            rows.len() > 2,
            "protocol.md:{line_no}: no table after the marker"
        );
        assert_eq!(
            rows[0],
            ["field", "type", "required", "meaning"],
            "protocol.md:{line_no}: table header"
        );
        let mut fields = BTreeSet::new();
        let mut required = BTreeSet::new();
        for row in &rows[2..] {
            let field = row[0].trim_matches('`').to_string();
            assert!(
                row.len() == 4 && !field.contains('`') && !field.is_empty(),
                "protocol.md:{line_no}: one field per row, four cells: {row:?}"
            );
            match row[2].split([' ', ':', ',', ';']).next() {
                Some("yes") => {
                    required.insert(field.clone());
                }
                Some("no") => {}
                other => panic!("protocol.md:{line_no}: required is yes or no, not {other:?}"),
            }
            assert!(fields.insert(field), "protocol.md:{line_no}: a field twice");
        }
        let properties: BTreeSet<String> = schema["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("{target}: no properties"))
            .keys()
            .cloned()
            .collect();
        let schema_required: BTreeSet<String> = schema["required"]
            .as_array()
            .unwrap_or_else(|| panic!("{target}: no required list"))
            .iter()
            .map(|f| f.as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            fields, properties,
            "protocol.md:{line_no}: fields of {target}"
        );
        assert_eq!(
            required, schema_required,
            "protocol.md:{line_no}: required fields of {target}"
        );
        tabled.insert(target.to_string());
    }
    // Every object with fields, in every schema, has its table.
    let mut objects = BTreeSet::new();
    for (name, schema) in &schemas {
        if schema.get("properties").is_some() {
            objects.insert(name.clone());
        }
        for (def, sub) in schema["$defs"].as_object().into_iter().flatten() {
            if sub.get("properties").is_some() {
                objects.insert(format!("{name}#/$defs/{def}"));
            }
        }
    }
    assert_eq!(tabled, objects, "objects with a field table in protocol.md");
}

fn at(text: &str) -> chrono::DateTime<chrono::Utc> {
    text.parse().unwrap()
}

fn task(mode: DeliveryMode, zone: Option<&str>) -> TaskMessage {
    TaskMessage {
        v: 1,
        task_id: Uuid::from_u128(0x13bb),
        job_id: Uuid::from_u128(0x01a1),
        app: "shop".into(),
        job: "close-expired-orders".into(),
        group: "orders".into(),
        // Nanoseconds, to check that they are written as milliseconds.
        fire_time: at("2026-11-21T10:00:00.123456789Z"),
        shard: 0,
        shard_total: 1,
        attempt: 1,
        mode,
        zone: zone.map(String::from),
        payload: json!({"older_than_min": 30, "deep": [[{"x": null}]]}),
        published_at: at("2026-11-21T10:00:00Z"),
        run_timeout_ms: Some(300_000),
    }
}

fn replies() -> Vec<Reply> {
    let task_id = Uuid::from_u128(7);
    let now = at("2026-11-21T10:00:05.987654Z");
    let result = |replayed, outcome| {
        Reply::Result(ResultMessage {
            v: 1,
            task_id,
            attempt: 2,
            consumer: "web-1.example".into(),
            finished_at: now,
            replayed,
            outcome,
        })
    };
    let heartbeat = |progress| {
        Reply::Heartbeat(HeartbeatMessage {
            v: 1,
            task_id,
            attempt: 1,
            consumer: "py-worker-3".into(),
            at: now,
            progress,
        })
    };
    vec![
        Reply::Ack(AckMessage {
            v: 1,
            task_id,
            attempt: 1,
            consumer: "orders-7f9c-12".into(),
            acked_at: now,
        }),
        result(false, TaskOutcome::Succeeded { output: None }),
        result(
            true,
            TaskOutcome::Succeeded {
                output: Some(json!({"closed": 12})),
            },
        ),
        result(
            false,
            TaskOutcome::Failed {
                error: TaskError {
                    message: "db down".into(),
                    retryable: true,
                    retry_after_ms: Some(5000),
                },
            },
        ),
        // What a consumer sends for an output over the limits.
        result(
            false,
            TaskOutcome::Succeeded {
                output: Some(json!(
                    "x".repeat(chime_consumer::protocol::MAX_OUTPUT_BYTES)
                )),
            }
            .within_limits(),
        ),
        heartbeat(None),
        heartbeat(Some(Progress::default())),
        heartbeat(Some(Progress {
            percent: Some(100.0),
            note: Some("page 10 of 10".into()),
        })),
        Reply::Presence(PresenceMessage {
            v: 1,
            instance: "web-dc1-a".into(),
            group: "web".into(),
            zone: Some("dc1".into()),
            broadcast: true,
            version: Some("chime-consumer/1.2.3".into()),
            at: now,
        }),
        Reply::Presence(PresenceMessage {
            v: 1,
            instance: "web-b".into(),
            group: "web".into(),
            zone: None,
            broadcast: false,
            version: None,
            at: now,
        }),
        Reply::Observe(ObserveMessage {
            v: 1,
            observer: "audit".into(),
            patterns: vec!["shop.*".into(), "billing.#".into(), "#".into()],
            at: now,
        }),
    ]
}

fn value(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

#[test]
fn messages_the_code_writes_match_the_schemas() {
    let schemas = Schemas::load();
    let tasks = [
        task(DeliveryMode::Group, None),
        task(DeliveryMode::Zone, Some("dc1")),
        task(DeliveryMode::Broadcast, None),
        TaskMessage {
            shard: 3,
            shard_total: 4,
            run_timeout_ms: None,
            ..task(DeliveryMode::Sharded, None)
        },
    ];
    for task in &tasks {
        schemas.check("task", &value(&task.to_vec()), &format!("{task:?}"));
    }
    let replies = replies();
    for reply in &replies {
        let name = value(&reply.to_vec())["type"].as_str().unwrap().to_string();
        schemas.check(&name, &value(&reply.to_vec()), &format!("{reply:?}"));
        schemas.check("reply", &value(&reply.to_vec()), &format!("{reply:?}"));
    }
    let bodies: Vec<Vec<u8>> = replies.iter().map(Reply::to_vec).collect();
    schemas.check("batch", &value(&ReplyBatch::body_of(&bodies)), "a batch");
    let typed = ReplyBatch {
        v: 1,
        kind: chime_consumer::protocol::BatchKind::Batch,
        replies: replies.clone(),
    };
    schemas.check(
        "batch",
        &serde_json::to_value(&typed).unwrap(),
        "a typed batch",
    );

    let history = vec![
        AttemptRecord {
            attempt: 1,
            event: "ack_timeout".into(),
            at: at("2026-11-21T10:00:30.012345Z"),
            consumer: None,
            error: Some("no ack within 30s".into()),
            retry_at: None,
        },
        AttemptRecord {
            attempt: 2,
            event: "failed".into(),
            at: at("2026-11-21T10:00:31Z"),
            consumer: Some("orders-7f9c-12".into()),
            error: Some("database unavailable".into()),
            retry_at: Some(at("2026-11-21T10:00:33.5Z")),
        },
    ];
    for record in &history {
        schemas.check(
            "attempt_record",
            &serde_json::to_value(record).unwrap(),
            "a history record",
        );
    }
    let mut dead = DeadLetterMessage::new(
        task(DeliveryMode::Zone, Some("dc2")),
        "failed 2 of 2 attempts",
        at("2026-11-21T10:00:42.325999Z"),
        history,
    );
    schemas.check("dead_letter", &value(&dead.to_vec()), "a dead letter");
    dead.node = Some("sched-1-5f3c9e01".into());
    dead.history.clear();
    schemas.check("dead_letter", &value(&dead.to_vec()), "a dead letter");

    let mut notice = CancelMessage::new(
        Uuid::now_v7(),
        "orders",
        at("2026-11-21T10:00:03.120999Z"),
        "ops-alice",
    );
    schemas.check("cancel", &value(&notice.to_vec()), "a cancel notice");
    notice.by = None;
    schemas.check("cancel", &value(&notice.to_vec()), "a cancel notice");
}

#[test]
fn the_schemas_refuse_what_the_protocol_refuses() {
    let schemas = Schemas::load();
    let base = |reply: &Reply| value(&reply.to_vec());
    let replies = replies();
    let (ack, heartbeat, presence, observe) = (&replies[0], &replies[7], &replies[8], &replies[10]);
    let task = value(&task(DeliveryMode::Group, None).to_vec());
    let with = |mut v: Value, key: &str, new: Value| {
        v[key] = new;
        v
    };
    let without = |mut v: Value, key: &str| {
        v.as_object_mut().unwrap().remove(key);
        v
    };
    let refused = [
        ("ack", with(base(ack), "v", json!(2)), "another version"),
        ("ack", without(base(ack), "acked_at"), "a missing field"),
        (
            "ack",
            with(base(ack), "consumer", json!("web 1")),
            "a space in consumer",
        ),
        (
            "ack",
            with(base(ack), "consumer", json!("x".repeat(129))),
            "a long consumer",
        ),
        (
            "ack",
            with(base(ack), "acked_at", json!("2026-11-21T10:00:00.123456Z")),
            "nanoseconds",
        ),
        (
            "ack",
            with(base(ack), "acked_at", json!("2026-11-21T10:00:00Z")),
            "no milliseconds",
        ),
        (
            "ack",
            with(base(ack), "task_id", json!("not-a-uuid")),
            "a bad uuid",
        ),
        (
            "ack",
            with(base(ack), "attempt", json!(-1)),
            "a negative attempt",
        ),
        (
            "reply",
            with(base(ack), "type", json!("batch")),
            "an unknown type",
        ),
        (
            "heartbeat",
            with(base(heartbeat), "progress", json!({"percent": 100.5})),
            "percent over 100",
        ),
        (
            "heartbeat",
            with(base(heartbeat), "progress", json!({"percent": -1})),
            "negative percent",
        ),
        (
            "presence",
            with(base(presence), "group", json!("a.b")),
            "a dot in a group",
        ),
        (
            "presence",
            with(base(presence), "zone", json!("x".repeat(129))),
            "a long zone",
        ),
        (
            "observe",
            with(base(observe), "patterns", json!([])),
            "no pattern",
        ),
        (
            "observe",
            with(base(observe), "patterns", json!(vec!["#"; 65])),
            "65 patterns",
        ),
        (
            "observe",
            with(base(observe), "patterns", json!(["shop..x"])),
            "an empty word",
        ),
        (
            "observe",
            with(base(observe), "patterns", json!(["shop.a*"])),
            "a partial wildcard",
        ),
        (
            "task",
            with(task.clone(), "mode", json!("zone")),
            "zone mode without a zone",
        ),
        (
            "task",
            with(task.clone(), "zone", json!("dc1")),
            "a zone without zone mode",
        ),
        (
            "task",
            with(task.clone(), "mode", json!("fanout")),
            "an unknown mode",
        ),
        (
            "task",
            with(task.clone(), "shard_total", json!(0)),
            "no items",
        ),
        ("task", with(task.clone(), "app", json!("")), "an empty app"),
        (
            "result",
            json!({"v": 1, "type": "result", "task_id": Uuid::nil(), "attempt": 1,
            "consumer": "c", "finished_at": "2026-11-21T10:00:00.000Z", "status": "failed"}),
            "a failure without its error",
        ),
        (
            "result",
            json!({"v": 1, "type": "result", "task_id": Uuid::nil(), "attempt": 1,
            "consumer": "c", "finished_at": "2026-11-21T10:00:00.000Z", "status": "done"}),
            "an unknown status",
        ),
        (
            "batch",
            json!({"v": 1, "type": "batch", "replies": [
            {"v": 1, "type": "batch", "replies": []}]}),
            "a batch in a batch",
        ),
        (
            "dead_letter",
            json!({"v": 1, "type": "dead_letter", "reason": "x",
            "dead_at": "2026-11-21T10:00:00.000Z", "task": task, "history": [{"attempt": 1}]}),
            "a history record without its event",
        ),
    ];
    for (name, instance, what) in refused {
        assert!(
            !schemas.is_valid(name, &instance),
            "{name} accepts {what}: {instance}"
        );
    }
    // Readers ignore unknown fields, and the published schemas allow them; the strict
    // copies this test checks the code's messages with do not, at any depth.
    let extra = with(base(ack), "extra", json!(1));
    assert!(schemas.is_valid("ack", &extra));
    assert!(!schemas.strict["ack"].is_valid(&extra));
    let mut deep = value(
        &DeadLetterMessage::new(
            serde_json::from_value(task.clone()).unwrap(),
            "x",
            at("2026-11-21T10:00:00Z"),
            Vec::new(),
        )
        .to_vec(),
    );
    assert!(schemas.strict["dead_letter"].is_valid(&deep));
    deep["task"]["extra"] = json!(1);
    assert!(!schemas.strict["dead_letter"].is_valid(&deep));
    let odd = with(base(heartbeat), "progress", json!({"percent": 5, "eta": 3}));
    assert!(!schemas.strict["heartbeat"].is_valid(&odd));
}
