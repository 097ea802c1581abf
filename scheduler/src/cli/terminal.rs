//! Where `chimectl`'s commands talk to the user: the [`Terminal`] for progress, questions
//! and answers, and the `--json` output writer.

use std::{
    io::{BufRead, Write},
    path::Path,
};

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

/// The text of the file at `path`, or of `input` for `-`: standard input is read through
/// the [`Terminal`], which holds its lock (reading `std::io::stdin()` again would wait
/// for that lock forever).
pub(super) fn read_source(path: &Path, input: &mut dyn BufRead) -> anyhow::Result<String> {
    let mut text = String::new();
    if path.as_os_str() == "-" {
        input
            .read_to_string(&mut text)
            .context("reading standard input")?;
    } else {
        text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    }
    Ok(text)
}
