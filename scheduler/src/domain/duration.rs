//! Human-readable durations (`"30s"`, `"1m 30s"`, `"500ms"`) as they appear in the API,
//! configuration and stored job settings.

use std::{fmt, time::Duration};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A duration written and read in humantime form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HumanDuration(pub Duration);

impl HumanDuration {
    /// Parses `"30s"`, `"2m"`, `"1h30m"`, `"250ms"`.
    pub fn parse(text: &str) -> Result<Self, String> {
        humantime::parse_duration(text.trim())
            .map(HumanDuration)
            .map_err(|e| {
                format!("invalid duration {text:?}: {e} (examples: \"500ms\", \"30s\", \"5m\")")
            })
    }

    /// The duration.
    pub fn get(self) -> Duration {
        self.0
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", humantime::format_duration(self.0))
    }
}

impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        HumanDuration::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats() {
        assert_eq!(
            HumanDuration::parse("30s").unwrap().get(),
            Duration::from_secs(30)
        );
        assert_eq!(HumanDuration::parse("1m30s").unwrap().to_string(), "1m 30s");
        assert_eq!(
            HumanDuration::parse("250ms").unwrap().get(),
            Duration::from_millis(250)
        );
        assert!(
            HumanDuration::parse("soon")
                .unwrap_err()
                .contains("invalid duration")
        );
        assert!(HumanDuration::parse("-1s").is_err());
    }
}
