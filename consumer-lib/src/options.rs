//! The checks the consumer's and the observer's builders share: the broker URL and the
//! concurrency and prefetch window. Each builder calls them at the same point of its own
//! checks, so which error a bad configuration reports is unchanged.

use crate::error::ConsumerError;

/// Checks `amqp_url` (`amqp://`, or `amqps://` with readable TLS files).
pub(crate) fn check_url(amqp_url: &str) -> Result<(), ConsumerError> {
    crate::connect::check_amqp_url(amqp_url).map_err(|reason| ConsumerError::InvalidOption {
        option: "amqp_url",
        reason,
    })
}

/// Checks `concurrency` (1 to 65535) and returns the prefetch: `prefetch` if given, else
/// twice the concurrency (at most 65535); it must be at least 1.
pub(crate) fn prefetch_for(
    concurrency: usize,
    prefetch: Option<u16>,
) -> Result<u16, ConsumerError> {
    if concurrency == 0 || concurrency > u16::MAX as usize {
        return Err(ConsumerError::InvalidOption {
            option: "concurrency",
            reason: "must be between 1 and 65535".into(),
        });
    }
    let prefetch = prefetch.unwrap_or_else(|| (concurrency * 2).min(u16::MAX as usize) as u16);
    if prefetch == 0 {
        return Err(ConsumerError::InvalidOption {
            option: "prefetch",
            reason: "must be at least 1".into(),
        });
    }
    Ok(prefetch)
}
