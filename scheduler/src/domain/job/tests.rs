use super::*;
use crate::domain::schedule::ScheduleSpec;
use chrono::Duration;

fn spec(schedule: ScheduleSpec) -> JobSpec {
    JobSpec {
        app: "shop".into(),
        name: "close".into(),
        paused: false,
        settings: JobSettings {
            schedule: Schedule::from_spec(&schedule).unwrap(),
            target: Target::group("orders"),
            payload: Value::Null,
            ack_timeout: HumanDuration(limits::DEFAULT_ACK_TIMEOUT),
            max_attempts: 5,
            run_timeout: HumanDuration(limits::DEFAULT_RUN_TIMEOUT),
            backoff: Default::default(),
            misfire: MisfirePolicy::FireOnce,
            catch_up_limit: 10,
            overlap: OverlapPolicy::Allow,
            window: Default::default(),
            pause_after_failures: None,
        },
    }
}

fn every(s: &str) -> ScheduleSpec {
    ScheduleSpec {
        every: Some(s.into()),
        ..ScheduleSpec::default()
    }
}

#[test]
fn settings_round_trip_through_json() {
    let s = spec(every("30s")).settings;
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["schedule"], serde_json::json!({"every": "30s"}));
    assert_eq!(json["ack_timeout"], "30s");
    assert_eq!(json["misfire"], "fire_once");
    assert_eq!(serde_json::from_value::<JobSettings>(json).unwrap(), s);
}

#[test]
fn updates_keep_or_recompute_next_fire() {
    let t0: DateTime<Utc> = "2026-11-21T10:00:00Z".parse().unwrap();
    let job = Job::new(spec(every("30s")), t0);
    assert_eq!(job.next_fire_at, Some(t0 + Duration::seconds(30)));

    let mut payload_only = job.spec.clone();
    payload_only.settings.payload = serde_json::json!({"x": 1});
    let later = t0 + Duration::seconds(10);
    let j2 = job.updated(payload_only, later);
    assert_eq!((j2.version, j2.next_fire_at), (2, job.next_fire_at));

    let j3 = job.updated(spec(every("1m")), later);
    assert_eq!(j3.next_fire_at, Some(later + Duration::minutes(1)));

    let mut paused = job.spec.clone();
    paused.paused = true;
    let j4 = job.updated(paused, later);
    assert_eq!(j4.timer_entry(), None);
    let resumed_at = t0 + Duration::hours(1);
    let j5 = j4.updated(job.spec.clone(), resumed_at);
    assert_eq!(j5.next_fire_at, Some(resumed_at + Duration::seconds(30)));
}

#[test]
fn resumed_one_shot_keeps_its_instant() {
    let t0: DateTime<Utc> = "2026-11-21T10:00:00Z".parse().unwrap();
    let at = ScheduleSpec {
        at: Some("2026-11-21T11:00:00Z".into()),
        ..ScheduleSpec::default()
    };
    let mut paused = spec(at.clone());
    paused.paused = true;
    let job = Job::new(paused, t0);
    let resumed = job.updated(spec(at), t0 + Duration::hours(2));
    assert_eq!(
        resumed.next_fire_at,
        Some("2026-11-21T11:00:00Z".parse().unwrap())
    );
}

#[test]
fn fires_due_records_runs_and_advances() {
    let t0: DateTime<Utc> = "2026-11-21T10:00:00Z".parse().unwrap();
    let job = Job::new(spec(every("30s")), t0);
    let grace = Duration::seconds(5);
    let early_at = t0 + Duration::seconds(29);
    let early = job.fires_due(early_at, early_at, grace, &LiveZones::default());
    assert!(early.runs.is_empty());
    assert_eq!(early.next_fire_at, job.next_fire_at);
    let due_at = t0 + Duration::milliseconds(30_002);
    let due = job.fires_due(due_at, due_at, grace, &LiveZones::default());
    assert_eq!(due.runs.len(), 1);
    assert_eq!(due.runs[0].fire_time, t0 + Duration::seconds(30));
    assert_eq!(due.next_fire_at, Some(t0 + Duration::seconds(60)));
    let mut paused = job.clone();
    paused.spec.paused = true;
    assert!(
        paused
            .fires_due(
                t0 + Duration::hours(1),
                t0 + Duration::hours(1),
                grace,
                &LiveZones::default()
            )
            .runs
            .is_empty()
    );
    // Armed a second ahead: the run is recorded now, due (for the reconciler) at
    // its fire time, not before.
    let armed = job.fires_due(early_at, early_at + grace, grace, &LiveZones::default());
    assert_eq!(armed.runs.len(), 1);
    assert_eq!(armed.runs[0].fire_time, t0 + Duration::seconds(30));
    assert_eq!(armed.runs[0].created_at, early_at);
    assert_eq!(armed.runs[0].due_at, Some(t0 + Duration::seconds(30)));
    let task = job.task_message(&due.runs[0]);
    assert_eq!(
        (task.group.as_str(), task.job.as_str()),
        ("orders", "close")
    );
}

#[test]
fn settings_bounds() {
    let mut s = spec(every("30s")).settings;
    s.max_attempts = 0;
    assert_eq!(s.validate().unwrap_err().field, "max_attempts");
    s.max_attempts = 5;
    s.ack_timeout = HumanDuration(std::time::Duration::from_secs(3600));
    assert_eq!(s.validate().unwrap_err().field, "ack_timeout");
    s.ack_timeout = HumanDuration(limits::DEFAULT_ACK_TIMEOUT);
    s.target.group = "no spaces".into();
    assert_eq!(s.validate().unwrap_err().field, "target.group");
}

#[test]
fn payload_limit() {
    let big = Value::String("x".repeat(100));
    assert!(validate_payload_size(&big, 50).is_err());
    assert!(validate_payload_size(&big, 200).is_ok());
    assert!(validate_payload_text(&serde_json::json!({"k": ["a\u{0}b"]})).is_err());
    assert!(validate_payload_text(&serde_json::json!({"k": ["ab"]})).is_ok());
}

fn windowed(
    schedule: ScheduleSpec,
    start: Option<&str>,
    end: Option<&str>,
    jitter: Option<&str>,
) -> JobSpec {
    let mut spec = spec(schedule);
    spec.settings.window = Window::parse(start, end, jitter).unwrap();
    spec
}

#[test]
fn window_settings_round_trip_through_json_at_the_top_level() {
    let s = windowed(
        every("30s"),
        Some("2026-12-01T00:00:00Z"),
        Some("2026-12-02T00:00:00Z"),
        Some("30s"),
    )
    .settings;
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["start_at"], "2026-12-01T00:00:00Z");
    assert_eq!(json["jitter"], "30s");
    assert_eq!(serde_json::from_value::<JobSettings>(json).unwrap(), s);
    // Documents stored before the window existed read as no window.
    let mut old = serde_json::to_value(spec(every("30s")).settings).unwrap();
    old.as_object_mut().unwrap().remove("start_at");
    assert_eq!(
        serde_json::from_value::<JobSettings>(old).unwrap().window,
        Window::default()
    );
}

#[test]
fn a_job_fires_only_inside_its_window_and_then_finishes() {
    let t0: DateTime<Utc> = "2026-11-21T10:00:00Z".parse().unwrap();
    let job = Job::new(
        windowed(
            every("10s"),
            Some("2026-11-21T10:01:00Z"),
            Some("2026-11-21T10:01:25Z"),
            None,
        ),
        t0,
    );
    assert_eq!(
        job.next_fire_at,
        Some(t0 + Duration::seconds(60)),
        "waits for the start"
    );
    let grace = Duration::seconds(5);
    let live = LiveZones::default();
    let until = t0 + Duration::seconds(90);
    let now = t0 + Duration::seconds(60);
    let fires = job.fires_due(now, until, grace, &live);
    let times: Vec<_> = fires.runs.iter().map(|r| r.fire_time).collect();
    assert_eq!(
        times,
        [60, 70, 80].map(|s| t0 + Duration::seconds(s)),
        "nothing after end_at"
    );
    assert_eq!(fires.next_fire_at, None, "finished");
    // After an outage past the end, fire_once picks the last point inside the window.
    let late = job.fires_due(
        t0 + Duration::hours(1),
        t0 + Duration::hours(1),
        grace,
        &live,
    );
    assert!(late.misfired);
    assert_eq!(
        late.runs.iter().map(|r| r.fire_time).collect::<Vec<_>>(),
        [t0 + Duration::seconds(80)]
    );
    assert_eq!(late.next_fire_at, None);
}

#[test]
fn moving_the_window_recomputes_the_next_fire() {
    let t0: DateTime<Utc> = "2026-11-21T10:00:00Z".parse().unwrap();
    let job = Job::new(spec(every("30s")), t0);
    let later = t0 + Duration::seconds(10);
    let ended = job.updated(
        windowed(every("30s"), None, Some("2026-11-21T10:00:05Z"), None),
        later,
    );
    assert_eq!(ended.next_fire_at, None, "past its end: finished");
    assert!(reschedules(&job.spec, &ended.spec));
    let reopened = ended.updated(
        windowed(every("30s"), Some("2026-11-21T11:00:00Z"), None, None),
        later,
    );
    assert_eq!(reopened.next_fire_at, Some(t0 + Duration::hours(1)));
    // A jitter change alone moves nothing.
    let jittered = reopened.updated(
        windowed(every("30s"), Some("2026-11-21T11:00:00Z"), None, Some("5s")),
        later,
    );
    assert!(!reschedules(&reopened.spec, &jittered.spec));
    assert_eq!(jittered.next_fire_at, reopened.next_fire_at);
}

#[test]
fn jittered_runs_keep_their_nominal_fire_time_and_are_due_later() {
    let t0: DateTime<Utc> = "2026-11-21T10:00:00Z".parse().unwrap();
    let job = Job::new(windowed(every("10s"), None, None, Some("30s")), t0);
    let live = LiveZones::default();
    let now = t0 + Duration::seconds(10);
    let fires = job.fires_due(now, now, Duration::seconds(5), &live);
    let run = &fires.runs[0];
    assert_eq!(run.fire_time, now, "nominal");
    assert_eq!(
        run.id,
        chime_consumer::protocol::run_id(job.id, now, 0),
        "run ids stay deterministic"
    );
    let due = job.due_time(run.fire_time, RunTrigger::Schedule);
    assert!(due >= now && due <= now + Duration::seconds(30));
    assert_eq!(run.due_at, Some(due), "not overdue before it is due");
    let task = job.due_task(run);
    assert_eq!((task.due, task.fire_time), (due, now));
    // A manual trigger is not jittered.
    assert_eq!(job.due_time(now, RunTrigger::Manual), now);
}

#[test]
fn window_validation_names_the_field() {
    let mut s = windowed(every("30s"), None, None, None).settings;
    s.window.start_at = Some("2026-12-02T00:00:00Z".parse().unwrap());
    s.window.end_at = Some("2026-12-01T00:00:00Z".parse().unwrap());
    assert_eq!(s.validate().unwrap_err().field, "end_at");
    for (field, start, end, jitter) in [
        ("start_at", Some("tomorrow"), None, None),
        ("end_at", None, Some("2026-13-01T00:00:00Z"), None),
        ("jitter", None, None, Some("soon")),
        ("jitter", None, None, Some("2h")),
    ] {
        assert_eq!(Window::parse(start, end, jitter).unwrap_err().field, field);
    }
}
