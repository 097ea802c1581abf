//! The web console in a real browser: headless Chromium (Debian's `chromium` and
//! `chromium-driver`) against a real `chimed`, RabbitMQ, a consumer and both stores.
//! Screenshots of every page land in `target/console-screenshots/` (CI keeps them).
//!
//! Each scenario drives the console as an operator would: by labels, buttons and links,
//! waiting on what the page shows, never on fixed sleeps.

mod support;

mod dlq;
mod jobs;
mod pages;
mod readonly;
mod runs;
mod signin;
