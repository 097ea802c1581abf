//! How the protocol writes an instant: RFC 3339 in UTC with exactly three fractional
//! digits (milliseconds), e.g. `2026-11-21T10:00:00.250Z`, whatever precision the clock
//! gave. Readers accept any RFC 3339 instant. Use as
//! `#[serde(serialize_with = "instant::serialize")]` (or `instant::serialize_option`).

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serializer;

/// `at` as the protocol writes it.
pub fn format(at: &DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Serialises `at` with [`format()`].
pub fn serialize<S: Serializer>(at: &DateTime<Utc>, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&format(at))
}

/// Serialises an optional instant with [`format()`] (`null` for none).
pub fn serialize_option<S: Serializer>(
    at: &Option<DateTime<Utc>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match at {
        Some(at) => serialize(at, serializer),
        None => serializer.serialize_none(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_are_written_with_milliseconds() {
        let at: DateTime<Utc> = "2026-11-21T10:00:00.123456789Z".parse().unwrap();
        assert_eq!(format(&at), "2026-11-21T10:00:00.123Z");
        let whole: DateTime<Utc> = "2026-11-21T10:00:05Z".parse().unwrap();
        assert_eq!(format(&whole), "2026-11-21T10:00:05.000Z");
    }
}
