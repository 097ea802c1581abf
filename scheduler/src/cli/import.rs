//! `chimectl job import FILE`: creates many jobs through `POST /v1/jobs/batch`. FILE (or
//! standard input for `-`) is a JSON array of jobs, one JSON job, or NDJSON (one job per
//! line), each job as `POST /v1/jobs` takes it. The jobs go in requests of up to 10 000
//! (and under the route's 16 MiB body limit), in file order; each request is all or
//! none, so a refused request stores nothing of its own jobs, while the requests before
//! it stay stored and the ones after it are not sent.

use std::{
    io::{BufRead, Write},
    path::PathBuf,
};

use anyhow::{Context, anyhow};
use serde_json::Value;

use super::{
    Client,
    terminal::{read_source, write_json},
};
use crate::api::dto::{BatchItemError, JobBatchResponse, batch::MAX_BATCH_JOBS};

/// The most bytes of jobs one request carries: under the route's 16 MiB body limit.
const MAX_REQUEST_BYTES: usize = 15 * 1024 * 1024;

/// `chimectl job import` arguments.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// A JSON array of jobs, or NDJSON (one job per line); `-` reads standard input.
    /// Each job as `chimectl job add --file` takes it.
    pub file: PathBuf,
}

/// One job read from the file, and where it was.
#[derive(Debug, Clone, PartialEq)]
struct Item {
    /// `line 7` (NDJSON) or `item 3` (a JSON array, from 0).
    place: String,
    job: Value,
    /// Its size as sent, in bytes.
    size: usize,
}

/// Imports the jobs of `args.file`: prints `imported N jobs` (or the API's answer with
/// `--json`), or fails naming every refused job by its place in the file. `-` reads
/// `input` (standard input).
pub async fn import(
    client: &Client,
    args: &ImportArgs,
    json: bool,
    out: &mut dyn Write,
    input: &mut dyn BufRead,
) -> anyhow::Result<()> {
    let text = read_source(&args.file, input)?;
    let items =
        parse_jobs(&text).with_context(|| format!("reading jobs from {}", args.file.display()))?;
    if items.is_empty() {
        return Err(anyhow!("{} holds no jobs", args.file.display()));
    }
    let chunks = chunks(&items);
    let mut created = JobBatchResponse { items: Vec::new() };
    for (number, chunk) in chunks.iter().enumerate() {
        let jobs: Vec<Value> = chunk.iter().map(|item| item.job.clone()).collect();
        match client.create_jobs(&jobs).await? {
            Ok(answer) => created.items.extend(answer.items),
            Err(refused) => {
                if json {
                    write_json(out, &refused.body)?;
                }
                let stored = match created.items.len() {
                    0 => String::new(),
                    n => format!("; the {n} jobs of the {number} requests before it are stored"),
                };
                let mut message = format!(
                    "request {} of {} ({}, {} jobs) was refused, nothing of it was stored{stored}",
                    number + 1,
                    chunks.len(),
                    span(chunk),
                    chunk.len(),
                );
                if refused.refusal.errors.is_empty() {
                    message.push_str(&format!(": {}", refused.error));
                } else {
                    message.push_str(&format!("; {} jobs refused:", refused.refusal.refused));
                }
                for error in &refused.refusal.errors {
                    message.push_str(&format!("\n  {}", item_error(chunk, error)));
                }
                let listed = refused.refusal.errors.len();
                if refused.refusal.refused > listed {
                    message.push_str(&format!(
                        "\n  ... and {} more",
                        refused.refusal.refused - listed
                    ));
                }
                return Err(anyhow!(message));
            }
        }
    }
    if json {
        write_json(out, &created)
    } else {
        let requests = match chunks.len() {
            1 => String::new(),
            n => format!(" in {n} requests"),
        };
        writeln!(out, "imported {} jobs{requests}", created.items.len()).context("writing output")
    }
}

/// The jobs of `text`: a JSON array, one JSON object, or NDJSON (blank lines skipped).
fn parse_jobs(text: &str) -> anyhow::Result<Vec<Item>> {
    let item = |place: String, job: Value| Item {
        size: job.to_string().len(),
        place,
        job,
    };
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(jobs)) => {
            return Ok(jobs
                .into_iter()
                .enumerate()
                .map(|(i, job)| item(format!("item {i}"), job))
                .collect());
        }
        Ok(job @ Value::Object(_)) => return Ok(vec![item("item 0".into(), job)]),
        Ok(_) => return Err(anyhow!("expected a JSON array of jobs or one job per line")),
        Err(_) => {}
    }
    let mut items = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let job: Value = serde_json::from_str(line)
            .with_context(|| format!("line {} is not JSON", number + 1))?;
        items.push(item(format!("line {}", number + 1), job));
    }
    Ok(items)
}

/// `items` in requests of at most [`MAX_BATCH_JOBS`] jobs and [`MAX_REQUEST_BYTES`]
/// (a job bigger than that goes alone, for the server to refuse).
fn chunks(items: &[Item]) -> Vec<&[Item]> {
    let mut chunks = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, item) in items.iter().enumerate() {
        let full = i - start == MAX_BATCH_JOBS || bytes + item.size + 1 > MAX_REQUEST_BYTES;
        if full && i > start {
            chunks.push(&items[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += item.size + 1;
    }
    chunks.push(&items[start..]);
    chunks
}

/// Where a request's jobs were in the file: `lines 1-10000`.
fn span(chunk: &[Item]) -> String {
    match (chunk.first(), chunk.last()) {
        (Some(first), Some(last)) if chunk.len() > 1 => {
            format!("{} to {}", first.place, last.place)
        }
        (Some(first), _) => first.place.clone(),
        _ => "no jobs".into(),
    }
}

/// One refused job, by its place in the file: `line 18: invalid_field (schedule.cron): ...`.
fn item_error(chunk: &[Item], error: &BatchItemError) -> String {
    let place = chunk
        .get(error.index)
        .map_or_else(|| format!("job {}", error.index), |item| item.place.clone());
    let prefix = format!("jobs[{}]", error.index);
    let field = error
        .field
        .as_deref()
        .and_then(|f| f.strip_prefix(&prefix))
        .map(|f| f.trim_start_matches('.'))
        .filter(|f| !f.is_empty())
        .map(|f| format!(" ({f})"))
        .unwrap_or_default();
    format!("{place}: {}{field}: {}", error.code, error.message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn files_are_json_arrays_single_jobs_or_ndjson() {
        let array = parse_jobs(r#"[{"name": "a"}, {"name": "b"}]"#).unwrap();
        assert_eq!(
            array.iter().map(|i| i.place.as_str()).collect::<Vec<_>>(),
            ["item 0", "item 1"]
        );
        assert_eq!(array[1].job, json!({"name": "b"}));
        let one = parse_jobs("{\n  \"name\": \"a\"\n}\n").unwrap();
        assert_eq!(one.len(), 1);
        let lines = parse_jobs("{\"name\": \"a\"}\n\n{\"name\": \"b\"}\n").unwrap();
        assert_eq!(
            lines.iter().map(|i| i.place.as_str()).collect::<Vec<_>>(),
            ["line 1", "line 3"]
        );
        let bad = parse_jobs("{\"name\": \"a\"}\n{oops\n").unwrap_err();
        assert_eq!(bad.to_string(), "line 2 is not JSON");
        assert!(parse_jobs("42").is_err());
        assert!(parse_jobs("").unwrap().is_empty());
    }

    #[test]
    fn requests_hold_at_most_10000_jobs_and_15_mib() {
        let small = |i: usize| Item {
            place: format!("line {i}"),
            job: Value::Null,
            size: 10,
        };
        let items: Vec<Item> = (0..25_001).map(small).collect();
        let sizes: Vec<usize> = chunks(&items).iter().map(|c| c.len()).collect();
        assert_eq!(sizes, [10_000, 10_000, 5_001]);
        let mut big: Vec<Item> = (0..4).map(small).collect();
        for item in &mut big {
            item.size = 6 * 1024 * 1024;
        }
        let sizes: Vec<usize> = chunks(&big).iter().map(|c| c.len()).collect();
        assert_eq!(sizes, [2, 2]);
        big[0].size = 20 * 1024 * 1024;
        let sizes: Vec<usize> = chunks(&big).iter().map(|c| c.len()).collect();
        assert_eq!(sizes, [1, 2, 1]);
    }

    #[test]
    fn refused_jobs_are_named_by_their_place_in_the_file() {
        let items = parse_jobs("{\"name\": \"a\"}\n\n{\"name\": \"b\"}\n").unwrap();
        let error = BatchItemError {
            index: 1,
            code: "invalid_field".into(),
            message: "bad cron".into(),
            field: Some("jobs[1].schedule.cron".into()),
        };
        assert_eq!(
            item_error(&items, &error),
            "line 3: invalid_field (schedule.cron): bad cron"
        );
        assert_eq!(span(&items), "line 1 to line 3");
    }
}
