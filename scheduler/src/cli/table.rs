//! Human-readable tables for `chimectl`.

use comfy_table::{Table, presets::NOTHING};

use crate::api::dto::{JobResponse, RunResponse};

fn table(header: &[&str]) -> Table {
    let mut table = Table::new();
    table
        .load_preset(NOTHING)
        .set_header(header.iter().copied());
    table
}

fn schedule(job: &JobResponse) -> String {
    let s = &job.spec.schedule;
    match (&s.cron, &s.every, &s.at) {
        (Some(cron), _, _) => format!("cron {cron} ({})", s.timezone.as_deref().unwrap_or("UTC")),
        (_, Some(every), _) => format!("every {every}"),
        (_, _, Some(at)) => format!("at {at}"),
        _ => "-".into(),
    }
}

fn or_dash(value: Option<&str>) -> String {
    value.unwrap_or("-").to_string()
}

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        format!("{}…", text.chars().take(max - 1).collect::<String>())
    }
}

/// Jobs, one per line.
pub fn jobs(jobs: &[JobResponse]) -> String {
    let mut t = table(&[
        "ID",
        "APP",
        "NAME",
        "SCHEDULE",
        "GROUP",
        "PAUSED",
        "NEXT FIRE",
    ]);
    for job in jobs {
        t.add_row(vec![
            job.id.to_string(),
            job.spec.app.clone(),
            job.spec.name.clone(),
            schedule(job),
            job.spec.target.group.clone(),
            job.spec.paused.to_string(),
            or_dash(job.next_fire_at.as_deref()),
        ]);
    }
    format!("{t}\n")
}

/// One job, field by field.
pub fn job_detail(job: &JobResponse) -> String {
    let mut t = Table::new();
    t.load_preset(NOTHING);
    let s = &job.spec;
    let rows = [
        ("id", job.id.to_string()),
        ("app", s.app.clone()),
        ("name", s.name.clone()),
        ("schedule", schedule(job)),
        ("group", s.target.group.clone()),
        ("payload", s.payload.to_string()),
        ("ack_timeout", s.ack_timeout.clone()),
        ("max_attempts", s.max_attempts.to_string()),
        (
            "misfire",
            serde_json::to_value(s.misfire)
                .map(|v| v.as_str().unwrap_or_default().to_string())
                .unwrap_or_default(),
        ),
        ("paused", s.paused.to_string()),
        ("version", job.version.to_string()),
        ("next_fire_at", or_dash(job.next_fire_at.as_deref())),
        ("created_at", job.created_at.clone()),
        ("updated_at", job.updated_at.clone()),
    ];
    for (key, value) in rows {
        t.add_row(vec![key.to_string(), value]);
    }
    format!("{t}\n")
}

fn result_text(run: &RunResponse) -> String {
    match (&run.output, &run.error) {
        (_, Some(error)) => format!("error: {error}"),
        (Some(output), None) => output.to_string(),
        (None, None) => "-".into(),
    }
}

/// Runs, one per line.
pub fn runs(runs: &[RunResponse]) -> String {
    let mut t = table(&[
        "RUN",
        "FIRE TIME",
        "TRIGGER",
        "ATTEMPT",
        "STATE",
        "CONSUMER",
        "FINISHED",
        "RESULT",
    ]);
    for run in runs {
        t.add_row(vec![
            run.id.to_string(),
            run.fire_time.clone(),
            serde_json::to_value(run.trigger)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            run.attempt.to_string(),
            run.state.to_string(),
            or_dash(run.consumer.as_deref()),
            or_dash(run.finished_at.as_deref()),
            shorten(&result_text(run), 60),
        ]);
    }
    format!("{t}\n")
}

/// One run, field by field.
pub fn run_detail(run: &RunResponse) -> String {
    let mut t = Table::new();
    t.load_preset(NOTHING);
    let rows = [
        ("id", run.id.to_string()),
        ("job_id", run.job_id.to_string()),
        ("fire_time", run.fire_time.clone()),
        ("state", run.state.to_string()),
        ("attempt", run.attempt.to_string()),
        ("shard", format!("{}/{}", run.shard, run.shard_total)),
        ("created_at", run.created_at.clone()),
        ("dispatched_at", or_dash(run.dispatched_at.as_deref())),
        ("acked_at", or_dash(run.acked_at.as_deref())),
        ("finished_at", or_dash(run.finished_at.as_deref())),
        ("consumer", or_dash(run.consumer.as_deref())),
        ("payload", run.payload.to_string()),
        (
            "output",
            run.output.as_ref().map_or("-".into(), |o| o.to_string()),
        ),
        ("error", or_dash(run.error.as_deref())),
    ];
    for (key, value) in rows {
        t.add_row(vec![key.to_string(), value]);
    }
    format!("{t}\n")
}
