//! `chimectl job next JOB [--count N]`: a job's next fires, in UTC and in its time zone.

use std::io::Write;

use anyhow::Context;

use super::{client::Client, table::table, terminal::write_json};
use crate::api::dto::PreviewResponse;

/// Prints job `id`'s next `count` fires.
pub async fn next(
    client: &Client,
    id: uuid::Uuid,
    count: u32,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let preview: PreviewResponse = client
        .get(&format!("/v1/jobs/{id}/preview?count={count}"))
        .await?;
    if json {
        return write_json(out, &preview);
    }
    write!(out, "{}", render(&preview)).context("writing output")
}

/// The table, with a note when the job is paused or fires no more.
fn render(preview: &PreviewResponse) -> String {
    let local = format!("LOCAL ({})", preview.timezone);
    let jittered = preview.fires.iter().any(|f| f.due.is_some());
    let mut t = if jittered {
        table(&["AT (UTC)", &local, "WITH JITTER (UTC)"])
    } else {
        table(&["AT (UTC)", &local])
    };
    for fire in &preview.fires {
        let mut row = vec![fire.at.clone(), fire.local.clone()];
        if jittered {
            row.push(fire.due.clone().unwrap_or_default());
        }
        t.add_row(row);
    }
    let mut text = format!("{t}\n");
    if preview.paused == Some(true) {
        text.push_str("paused: none of these fires until the job is resumed\n");
    }
    if preview.fires.is_empty() {
        text.push_str("the schedule fires no more\n");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::dto::UpcomingFireResponse;

    #[test]
    fn the_table_names_the_time_zone_and_says_when_paused() {
        let preview = PreviewResponse {
            timezone: "Europe/Paris".into(),
            paused: Some(true),
            fires: vec![UpcomingFireResponse {
                at: "2026-03-28T01:30:00.000Z".into(),
                local: "2026-03-28T02:30:00.000+01:00".into(),
                due: None,
            }],
            description: "every day at 02:30:00, Europe/Paris".into(),
        };
        let text = render(&preview);
        assert!(text.contains("LOCAL (Europe/Paris)"), "{text}");
        assert!(text.contains("2026-03-28T02:30:00.000+01:00"), "{text}");
        assert!(text.contains("paused"), "{text}");
        let done = PreviewResponse {
            timezone: "UTC".into(),
            paused: Some(false),
            fires: vec![],
            description: "once at 2026-03-28T01:30:00.000Z".into(),
        };
        assert!(render(&done).contains("fires no more"));
    }
}
