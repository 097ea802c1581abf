//! Which tasks get an observer copy on `chime.topics`. With `observer_copies =
//! "registered"` (the default) only tasks whose `<app>.<job>` matches a pattern some
//! observer registered within [`OBSERVER_TTL_MS`]: a copy nobody receives would cost the
//! broker as much as the task itself. The registrations are read from the store every
//! [`REFRESH`], so every node picks up a new observer within about a second. Until the
//! first read succeeds every task gets a copy, so a start-up never loses one.
//!
//! Metrics: `chime_observed_patterns` (-1 while every task gets a copy).

use std::{collections::HashMap, sync::Arc, time::Duration};

use chrono::Utc;
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::{debug, warn};

use chime_consumer::protocol::{OBSERVER_TTL_MS, topic::topic_matches, topology};

use crate::{store::Store, telemetry};

/// How often the registered patterns are read again.
pub const REFRESH: Duration = Duration::from_secs(1);
/// Most topics whose verdict is remembered; past this the memory starts over, so a
/// million jobs firing once a day do not keep a million entries.
const MAX_VERDICTS: usize = 10_000;

/// Which tasks get an observer copy (setting `observer_copies`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObserverCopies {
    /// Only tasks a registered observer pattern matches (`registered`, the default).
    Registered,
    /// Every task (`all`), for observers that bind their queue without registering.
    All,
}

impl ObserverCopies {
    /// The choice named `name` in the configuration: `registered` or `all`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "registered" => Some(ObserverCopies::Registered),
            "all" => Some(ObserverCopies::All),
            _ => None,
        }
    }
}

/// The patterns copies are published for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Patterns {
    /// Every task gets a copy.
    Everything,
    /// Tasks matching one of these.
    Only(Arc<[String]>),
}

/// Answers "does this task get a copy?", remembering the answer per topic until the
/// registered patterns change.
pub(super) struct ObservedTopics {
    patterns: Patterns,
    updates: Option<watch::Receiver<Patterns>>,
    verdicts: HashMap<String, bool>,
    _refresh: Option<DropGuard>,
}

impl ObservedTopics {
    /// Starts following the registrations in `store` (for `Registered`); stops when
    /// dropped.
    pub(super) fn start(store: Arc<dyn Store>, copies: ObserverCopies) -> Self {
        let mut topics = Self {
            patterns: Patterns::Everything,
            updates: None,
            verdicts: HashMap::new(),
            _refresh: None,
        };
        metrics::gauge!(telemetry::OBSERVED_PATTERNS).set(-1.0);
        if copies == ObserverCopies::Registered {
            let (tx, rx) = watch::channel(Patterns::Everything);
            let stop = CancellationToken::new();
            topics._refresh = Some(stop.clone().drop_guard());
            topics.updates = Some(rx);
            tokio::spawn(refresh(store, tx, stop));
        }
        topics
    }

    /// Whether a task of job `job` in app `app` gets an observer copy.
    pub(super) fn wants_copy(&mut self, app: &str, job: &str) -> bool {
        if let Some(updates) = &mut self.updates
            && updates.has_changed().unwrap_or(false)
        {
            self.patterns = updates.borrow_and_update().clone();
            self.verdicts.clear();
        }
        let patterns = match &self.patterns {
            Patterns::Everything => return true,
            Patterns::Only(patterns) if patterns.is_empty() => return false,
            Patterns::Only(patterns) => patterns,
        };
        let key = topology::topic_routing_key(app, job);
        if let Some(&verdict) = self.verdicts.get(&key) {
            return verdict;
        }
        let verdict = patterns.iter().any(|p| topic_matches(p, &key));
        if self.verdicts.len() >= MAX_VERDICTS {
            self.verdicts.clear();
        }
        self.verdicts.insert(key, verdict);
        verdict
    }
}

/// Reads the registered patterns every [`REFRESH`] and passes on changes.
async fn refresh(store: Arc<dyn Store>, tx: watch::Sender<Patterns>, stop: CancellationToken) {
    let ttl = chrono::Duration::milliseconds(OBSERVER_TTL_MS as i64);
    loop {
        match store.observed_patterns(Utc::now() - ttl).await {
            Ok(mut patterns) => {
                patterns.sort();
                metrics::gauge!(telemetry::OBSERVED_PATTERNS).set(patterns.len() as f64);
                let patterns = Patterns::Only(patterns.into());
                tx.send_if_modified(|current| {
                    let changed = *current != patterns;
                    if changed {
                        debug!(?patterns, "observer patterns changed");
                        *current = patterns;
                    }
                    changed
                });
            }
            // The last known patterns stay in force.
            Err(error) => warn!(%error, "cannot read observer registrations"),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(REFRESH) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn only(patterns: &[&str]) -> ObservedTopics {
        ObservedTopics {
            patterns: Patterns::Only(patterns.iter().map(|p| p.to_string()).collect()),
            updates: None,
            verdicts: HashMap::new(),
            _refresh: None,
        }
    }

    #[test]
    fn copies_only_what_a_pattern_matches() {
        let mut topics = only(&["shop.*", "*.audit-me"]);
        assert!(topics.wants_copy("shop", "close-orders"));
        assert!(topics.wants_copy("billing", "audit-me"));
        assert!(!topics.wants_copy("billing", "close-month"));
        // Asked again: the remembered verdict.
        assert!(!topics.wants_copy("billing", "close-month"));
        assert!(!only(&[]).wants_copy("shop", "close-orders"));
    }

    #[test]
    fn a_change_of_patterns_is_picked_up() {
        let (tx, rx) = watch::channel(Patterns::Only(Arc::from(Vec::new())));
        let mut topics = only(&[]);
        topics.updates = Some(rx);
        assert!(!topics.wants_copy("shop", "close-orders"));
        tx.send(Patterns::Only(Arc::from(vec!["shop.#".to_string()])))
            .unwrap();
        assert!(topics.wants_copy("shop", "close-orders"));
        tx.send(Patterns::Everything).unwrap();
        assert!(topics.wants_copy("billing", "anything"));
    }
}
