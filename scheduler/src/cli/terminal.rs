//! Where `chimectl`'s commands talk to the user: the [`Terminal`] for progress, questions
//! and answers, and the `--json` output writer.

use std::io::{BufRead, Write};

use anyhow::Context;

/// Where a command writes progress and questions (`err`) and reads answers (`input`).
pub struct Terminal<'a> {
    /// Progress lines and questions; kept apart from the output so `--json` stays JSON.
    pub err: &'a mut dyn Write,
    /// Answers to questions.
    pub input: &'a mut dyn BufRead,
}

/// Writes `value` as the API's pretty-printed JSON, one document per call.
pub(super) fn write_json(out: &mut dyn Write, value: &impl serde::Serialize) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(value).context("encoding JSON")?;
    writeln!(out, "{text}").context("writing output")
}
