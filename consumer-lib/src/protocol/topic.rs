//! RabbitMQ topic-pattern matching, so the scheduler can tell without asking the broker
//! whether a task's `<app>.<job>` reaches any registered observer, and publish an
//! observer copy only then.

/// Whether topic pattern `pattern` matches routing key `key`, as a RabbitMQ topic exchange
/// decides it: words are separated by `.`, `*` matches exactly one word and `#` zero or
/// more words.
pub fn topic_matches(pattern: &str, key: &str) -> bool {
    let pattern: Vec<&str> = pattern.split('.').collect();
    let key: Vec<&str> = key.split('.').collect();
    words_match(&pattern, &key)
}

fn words_match(pattern: &[&str], key: &[&str]) -> bool {
    match pattern.split_first() {
        None => key.is_empty(),
        Some((&"#", rest)) => (0..=key.len()).any(|skip| words_match(rest, &key[skip..])),
        Some((&word, rest)) => match key.split_first() {
            Some((&first, key_rest)) => {
                (word == "*" || word == first) && words_match(rest, key_rest)
            }
            None => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn matches_like_a_topic_exchange() {
        for (pattern, key) in [
            ("#", "shop.close-orders"),
            ("shop.*", "shop.close-orders"),
            ("*.close-orders", "shop.close-orders"),
            ("shop.#", "shop.close-orders"),
            ("shop.#", "shop"),
            ("#.close-orders", "shop.close-orders"),
            ("shop.close-orders", "shop.close-orders"),
            ("*.*", "a.b"),
            ("#.#", "a.b"),
        ] {
            assert!(topic_matches(pattern, key), "{pattern} should match {key}");
        }
        for (pattern, key) in [
            ("shop.*", "billing.close-orders"),
            ("shop.*", "shop"),
            ("*", "shop.close-orders"),
            ("*.close-orders", "shop.open-orders"),
            ("shop.close", "shop.close-orders"),
            ("shop.close-orders.*", "shop.close-orders"),
        ] {
            assert!(
                !topic_matches(pattern, key),
                "{pattern} must not match {key}"
            );
        }
    }

    proptest! {
        #[test]
        fn hash_matches_every_key_and_a_key_matches_itself(
            app in "[a-z][a-z0-9_-]{0,8}", job in "[a-z][a-z0-9_-]{0,8}"
        ) {
            let key = format!("{app}.{job}");
            prop_assert!(topic_matches("#", &key));
            prop_assert!(topic_matches(&key, &key));
            let (any_job, any_app, other_app) =
                (format!("{app}.*"), format!("*.{job}"), format!("{app}x.*"));
            prop_assert!(topic_matches(&any_job, &key));
            prop_assert!(topic_matches(&any_app, &key));
            prop_assert!(!topic_matches(&other_app, &key));
        }
    }
}
