//! The one timestamp format Chime writes on the wire: RFC 3339 with milliseconds, in UTC
//! (`2026-11-21T10:00:00.000Z`). The HTTP API, `chimectl` and the dead-letter views all
//! format times through [`timestamp`], so they agree.

use chrono::{DateTime, SecondsFormat, Utc};

/// RFC 3339 with milliseconds, UTC.
pub fn timestamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_milliseconds_and_z() {
        let at: DateTime<Utc> = "2026-11-21T10:00:01Z".parse().unwrap();
        assert_eq!(timestamp(at), "2026-11-21T10:00:01.000Z");
    }
}
