//! `chimectl dlq ...`: list the dead-letter queues, peek at one, replay its messages in
//! batches, and purge it after asking.

use std::io::Write;

use anyhow::{Context, bail};
use clap::Subcommand;

use super::{
    client::Client,
    dlq_table,
    terminal::{Terminal, write_json},
};
use crate::api::dto::{DlqItems, ReplayReport, ReplayRequest};

/// Most messages one replay request asks for, so each answers well within the client's
/// timeout and progress shows between them.
const REPLAY_BATCH: u32 = 100;

/// `chimectl dlq ...`. QUEUE is a dead-letter queue such as `chime.group.orders.dlq`.
#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// List the dead-letter queues: depth, oldest message, commonest reasons.
    #[command(visible_alias = "list")]
    Ls,
    /// Show the messages at the head of a dead-letter queue, leaving them in place.
    #[command(visible_alias = "show", aliases = ["messages", "inspect"])]
    Peek {
        /// The dead-letter queue.
        queue: String,
        /// How many messages.
        #[arg(short = 'n', long = "limit", default_value_t = 10)]
        n: usize,
    },
    /// Publish dead-lettered tasks to their group again, each as its run's next attempt.
    #[command(visible_alias = "retry", aliases = ["redrive", "requeue"])]
    Replay {
        /// The dead-letter queue.
        queue: String,
        /// Only messages of this job (`app/name`, or a name in app `default`).
        #[arg(long)]
        job: Option<String>,
        /// Replay at most this many (default: every message in the queue now).
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        limit: Option<u32>,
    },
    /// Remove every message of a dead-letter queue.
    #[command(aliases = ["clear", "empty"])]
    Purge {
        /// The dead-letter queue.
        queue: String,
        /// Do not ask for confirmation.
        #[arg(short = 'y', long)]
        yes: bool,
    },
}

pub(super) async fn dlq(
    client: &Client,
    command: DlqCommand,
    json: bool,
    out: &mut dyn Write,
    terminal: &mut Terminal<'_>,
) -> anyhow::Result<()> {
    match command {
        DlqCommand::Ls => {
            let items = client.dlq_list().await?;
            if json {
                write_json(out, &DlqItems { items })
            } else {
                write!(out, "{}", dlq_table::dlq_queues(&items)).context("writing output")
            }
        }
        DlqCommand::Peek { queue, n } => {
            let items = client.dlq_peek(&queue, n).await?;
            if json {
                write_json(out, &DlqItems { items })
            } else {
                write!(out, "{}", dlq_table::dlq_messages(&items)).context("writing output")
            }
        }
        DlqCommand::Replay { queue, job, limit } => {
            let report = replay(client, &queue, job, limit, terminal).await?;
            if json {
                write_json(out, &report)
            } else {
                write!(out, "{}", dlq_table::replay_summary(&queue, &report))
                    .context("writing output")
            }
        }
        DlqCommand::Purge { queue, yes } => {
            if !yes {
                confirm_purge(client, &queue, terminal).await?;
            }
            let purged = client.dlq_purge(&queue).await?;
            if json {
                write_json(out, &purged)
            } else {
                writeln!(
                    out,
                    "purged {} from {}",
                    messages(purged.purged),
                    purged.queue
                )
                .context("writing output")
            }
        }
    }
}

/// Replays in batches of at most [`REPLAY_BATCH`], reporting progress after each.
async fn replay(
    client: &Client,
    queue: &str,
    job: Option<String>,
    limit: Option<u32>,
    terminal: &mut Terminal<'_>,
) -> anyhow::Result<ReplayReport> {
    let mut tally = ReplayTally::new(limit);
    loop {
        let batch = tally.next_batch();
        if batch == 0 {
            return Ok(tally.total);
        }
        let request = ReplayRequest {
            job: job.clone(),
            limit: Some(batch),
        };
        let report = client
            .dlq_replay(queue, &request)
            .await
            .with_context(|| format!("replay stopped after {}", messages(tally.total.replayed)))?;
        tally.add(&report);
        writeln!(
            terminal.err,
            "replayed {} of at most {} (remaining in queue: {})",
            tally.total.replayed,
            tally.target.unwrap_or(tally.total.replayed),
            tally.total.remaining
        )
        .context("writing progress")?;
        terminal.err.flush().context("writing progress")?;
    }
}

/// The sum of a replay's batches, and how big the next one is.
#[derive(Debug)]
struct ReplayTally {
    /// Messages to replay in all: the limit asked for, else what the queue held when the
    /// replay began (known after the first batch). Messages that come back to the queue
    /// while it runs (replayed and failed again) are not replayed twice.
    target: Option<u32>,
    total: ReplayReport,
    done: bool,
}

impl ReplayTally {
    fn new(limit: Option<u32>) -> Self {
        Self {
            target: limit,
            total: ReplayReport::default(),
            done: false,
        }
    }

    /// The limit of the next request; 0 when the replay is over.
    fn next_batch(&self) -> u32 {
        if self.done {
            return 0;
        }
        match self.target {
            Some(target) => target.saturating_sub(self.total.replayed).min(REPLAY_BATCH),
            None => REPLAY_BATCH,
        }
    }

    /// Adds one batch's report. A batch that replays nothing has looked at the whole
    /// queue, which ends the replay.
    fn add(&mut self, batch: &ReplayReport) {
        if self.target.is_none() {
            self.target = Some(batch.replayed + batch.remaining);
        }
        self.total.replayed += batch.replayed;
        self.total.discarded += batch.discarded;
        // Skipped messages stay at the head of the queue, so every batch sees them again:
        // the largest count is how many there are.
        for (reason, &count) in &batch.skipped {
            let seen = self.total.skipped.entry(reason.clone()).or_default();
            *seen = (*seen).max(count);
        }
        self.total.remaining = batch.remaining;
        if batch.replayed == 0 {
            self.done = true;
        }
    }
}

/// Asks before a purge; anything but `y` or `yes` aborts.
async fn confirm_purge(
    client: &Client,
    queue: &str,
    terminal: &mut Terminal<'_>,
) -> anyhow::Result<()> {
    let depth = client
        .dlq_list()
        .await?
        .into_iter()
        .find(|summary| summary.queue == queue)
        .map(|summary| summary.depth);
    let question = match depth {
        Some(depth) => format!("purge {} from {queue}? [y/N] ", messages(depth)),
        None => {
            // Not listed (its group has no job now): let the server say whether it is a
            // dead-letter queue that exists before asking.
            client.dlq_peek(queue, 1).await?;
            format!("purge every message from {queue}? [y/N] ")
        }
    };
    write!(terminal.err, "{question}").context("writing the question")?;
    terminal.err.flush().context("writing the question")?;
    let mut answer = String::new();
    terminal
        .input
        .read_line(&mut answer)
        .context("reading the answer")?;
    if !is_yes(&answer) {
        bail!("aborted");
    }
    Ok(())
}

fn is_yes(answer: &str) -> bool {
    matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

fn messages(n: u32) -> String {
    if n == 1 {
        "1 message".into()
    } else {
        format!("{n} messages")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn skipped(pairs: &[(&str, u32)]) -> BTreeMap<String, u32> {
        pairs.iter().map(|(r, n)| (r.to_string(), *n)).collect()
    }

    fn batch(replayed: u32, remaining: u32, skips: &[(&str, u32)]) -> ReplayReport {
        ReplayReport {
            replayed,
            discarded: 1,
            skipped: skipped(skips),
            remaining,
        }
    }

    #[test]
    fn a_limited_replay_stops_at_its_limit() {
        let mut tally = ReplayTally::new(Some(250));
        assert_eq!(tally.next_batch(), 100);
        tally.add(&batch(100, 400, &[("origin unknown", 2)]));
        tally.add(&batch(100, 300, &[("origin unknown", 2)]));
        assert_eq!(tally.next_batch(), 50);
        tally.add(&batch(50, 250, &[("origin unknown", 2)]));
        assert_eq!(tally.next_batch(), 0);
        assert_eq!(
            tally.total,
            ReplayReport {
                replayed: 250,
                discarded: 3,
                skipped: skipped(&[("origin unknown", 2)]),
                remaining: 250,
            }
        );
    }

    #[test]
    fn an_unlimited_replay_takes_what_the_queue_held() {
        let mut tally = ReplayTally::new(None);
        assert_eq!(tally.next_batch(), 100);
        tally.add(&batch(100, 50, &[]));
        assert_eq!(tally.target, Some(150));
        assert_eq!(tally.next_batch(), 50);
        // The replayed messages fail again and come back; they are not replayed again.
        tally.add(&batch(50, 100, &[]));
        assert_eq!(tally.next_batch(), 0);
        assert_eq!(tally.total.replayed, 150);
    }

    #[test]
    fn a_batch_that_replays_nothing_ends_the_replay() {
        let mut tally = ReplayTally::new(Some(1000));
        tally.add(&batch(0, 7, &[("run unknown (job deleted)", 7)]));
        assert_eq!(tally.next_batch(), 0);
        assert_eq!(tally.total.remaining, 7);
    }

    #[test]
    fn only_yes_confirms() {
        for yes in ["y\n", "Y", " yes \n", "YES"] {
            assert!(is_yes(yes), "{yes:?}");
        }
        for no in ["", "\n", "n\n", "no", "yep", "y y"] {
            assert!(!is_yes(no), "{no:?}");
        }
    }
}
