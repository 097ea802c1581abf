//! Configuring an [`Observer`]: broker, name, patterns, handler and concurrency.

use std::{future::Future, sync::Arc, time::Duration};

use super::{
    Observer,
    settings::{ObserveFn, ObserveResult, Settings},
};
use crate::{
    error::ConsumerError,
    options,
    protocol::{
        MAX_OBSERVER_PATTERNS, TaskMessage,
        topology::{is_valid_name, is_valid_topic_pattern},
    },
};

/// Builds an [`Observer`]. Needs at least one pattern ([`ObserverBuilder::subscribe`]) and
/// a handler ([`ObserverBuilder::handler`]); every other option has a default.
pub struct ObserverBuilder {
    amqp_url: String,
    name: String,
    patterns: Vec<String>,
    handler: Option<Arc<ObserveFn>>,
    concurrency: usize,
    prefetch: Option<u16>,
    drain_timeout: Duration,
}

impl ObserverBuilder {
    pub(super) fn new(amqp_url: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            amqp_url: amqp_url.into(),
            name: name.into(),
            patterns: Vec::new(),
            handler: None,
            concurrency: 1,
            prefetch: None,
            drain_timeout: Duration::from_secs(30),
        }
    }

    /// Receives a copy of every task whose `<app>.<job>` matches topic pattern `pattern`:
    /// dot-separated words, each a name, `*` (exactly one word) or `#` (any number of
    /// words). Call once per pattern.
    pub fn subscribe(mut self, pattern: impl Into<String>) -> Self {
        let pattern = pattern.into();
        if !self.patterns.contains(&pattern) {
            self.patterns.push(pattern);
        }
        self
    }

    /// Runs `handler` on every copy received; the copy is acknowledged when it returns
    /// `Ok(())`. Any `Fn(TaskMessage) -> impl Future<Output = ObserveResult>`, such as an
    /// `async` closure or function.
    pub fn handler<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(TaskMessage) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ObserveResult> + Send + 'static,
    {
        self.handler = Some(Arc::new(move |task| Box::pin(handler(task))));
        self
    }

    /// How many copies are handled at once. Default 1: copies are handled one after the
    /// other, in queue order (redeliveries aside).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n;
        self
    }

    /// How many unacknowledged copies RabbitMQ may push ahead. Default twice the
    /// concurrency.
    pub fn prefetch(mut self, n: u16) -> Self {
        self.prefetch = Some(n);
        self
    }

    /// How long shutdown waits for running handlers before closing. Default 30 s.
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.drain_timeout = timeout;
        self
    }

    /// Checks the configuration and builds the observer.
    pub fn build(self) -> Result<Observer, ConsumerError> {
        options::check_url(&self.amqp_url)?;
        if !is_valid_name(&self.name) {
            return Err(ConsumerError::InvalidName {
                what: "observer",
                name: self.name,
            });
        }
        if self.patterns.is_empty() {
            return Err(ConsumerError::NoSubscriptions);
        }
        if self.patterns.len() > MAX_OBSERVER_PATTERNS {
            return Err(ConsumerError::InvalidOption {
                option: "subscribe",
                reason: format!("at most {MAX_OBSERVER_PATTERNS} patterns per observer"),
            });
        }
        if let Some(pattern) = self.patterns.iter().find(|p| !is_valid_topic_pattern(p)) {
            return Err(ConsumerError::InvalidPattern {
                pattern: pattern.clone(),
            });
        }
        let handler = self.handler.ok_or(ConsumerError::NoObserverHandler)?;
        let prefetch = options::prefetch_for(self.concurrency, self.prefetch)?;
        Ok(Observer {
            settings: Arc::new(Settings {
                amqp_url: self.amqp_url,
                name: self.name,
                patterns: self.patterns,
                concurrency: self.concurrency,
                prefetch,
                drain_timeout: self.drain_timeout,
            }),
            handler,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> ObserverBuilder {
        Observer::builder("amqp://localhost", "audit")
            .handler(|_task: TaskMessage| async { Ok(()) })
    }

    #[test]
    fn builds_with_defaults() {
        let observer = base()
            .subscribe("shop.*")
            .subscribe("billing.#")
            .subscribe("shop.*")
            .build()
            .unwrap();
        assert_eq!(observer.name(), "audit");
        assert_eq!(observer.queue(), "chime.observe.audit");
        assert_eq!(observer.patterns(), ["shop.*", "billing.#"]);
        assert_eq!(observer.settings.concurrency, 1);
        assert_eq!(observer.settings.prefetch, 2);
    }

    #[test]
    fn rejects_bad_configuration() {
        let tls = Observer::builder("amqp://app:s3cret-pw@mq/%2f?cacertfile=/ca.pem", "audit")
            .handler(|_task: TaskMessage| async { Ok(()) })
            .subscribe("shop.*")
            .build()
            .err()
            .expect("a TLS option on amqp:// refused")
            .to_string();
        assert!(
            tls.contains("use amqps://") && !tls.contains("s3cret-pw"),
            "{tls}"
        );
        assert!(matches!(
            base().build(),
            Err(ConsumerError::NoSubscriptions)
        ));
        assert!(matches!(
            base().subscribe("shop.*").subscribe("shop..x").build(),
            Err(ConsumerError::InvalidPattern { pattern }) if pattern == "shop..x"
        ));
        assert!(matches!(
            Observer::builder("amqp://localhost", "a.b")
                .subscribe("#")
                .handler(|_task: TaskMessage| async { Ok(()) })
                .build(),
            Err(ConsumerError::InvalidName {
                what: "observer",
                ..
            })
        ));
        assert!(matches!(
            Observer::builder("amqp://localhost", "audit")
                .subscribe("#")
                .build(),
            Err(ConsumerError::NoObserverHandler)
        ));
        assert!(matches!(
            base().subscribe("#").concurrency(0).build(),
            Err(ConsumerError::InvalidOption {
                option: "concurrency",
                ..
            })
        ));
        let too_many =
            (0..=MAX_OBSERVER_PATTERNS).fold(base(), |b, i| b.subscribe(format!("app{i}.*")));
        assert!(matches!(
            too_many.build(),
            Err(ConsumerError::InvalidOption {
                option: "subscribe",
                ..
            })
        ));
        assert!(matches!(
            base().subscribe("#").prefetch(0).build(),
            Err(ConsumerError::InvalidOption {
                option: "prefetch",
                ..
            })
        ));
    }
}
