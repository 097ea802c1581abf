//! A validation failure that names the offending field, as the API reports it, and the
//! wording of a choice among names.

/// Input that failed validation: which field (dotted path, e.g. `schedule.cron`) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// Dotted path of the field.
    pub field: String,
    /// What is wrong, in lowercase, naming the bad value where that helps.
    pub message: String,
}

impl FieldError {
    /// A failure of `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// The names a value may take, as an error message lists them: `"a", "b" or "c"`.
pub fn one_of(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
    match quoted.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_of_lists_names_with_or_before_the_last() {
        assert_eq!(one_of(&["allow"]), r#""allow""#);
        assert_eq!(one_of(&["allow", "forbid"]), r#""allow" or "forbid""#);
        assert_eq!(
            one_of(&["fire_once", "skip", "catch_up"]),
            r#""fire_once", "skip" or "catch_up""#
        );
    }
}
