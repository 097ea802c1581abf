//! Reading request bodies and query strings into typed values, with errors that name the
//! offending field.

use axum::body::Body;
use serde::de::DeserializeOwned;

use super::error::{ApiError, ErrorCode};

/// The path of the one route with a larger body limit: bulk job import.
pub const BATCH_PATH: &str = "/v1/jobs/batch";

/// The body limit of [`BATCH_PATH`]: room for 10 000 typical jobs.
pub const BATCH_BODY_LIMIT: usize = 16 * 1024 * 1024;

/// The body limit of a request to `path`, given the limit of every other route: 16 MiB
/// (or that limit if larger) for bulk job import, that limit elsewhere.
pub fn body_limit_for(path: &str, limit: usize) -> usize {
    if path == BATCH_PATH {
        limit.max(BATCH_BODY_LIMIT)
    } else {
        limit
    }
}

/// Reads a body of at most `limit` bytes.
pub async fn read_body(body: Body, limit: usize) -> Result<axum::body::Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|_| {
        ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("request body is over the limit of {limit} bytes"),
        )
    })
}

/// Whether a body holds nothing but JSON whitespace (space, tab, line feed, carriage
/// return), which actions with optional arguments take as "no arguments". Other ASCII
/// whitespace (form feed, vertical tab) is not JSON and is refused as invalid JSON.
pub fn is_blank(bytes: &[u8]) -> bool {
    bytes
        .iter()
        .all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
}

/// Reads the whole body of an action that takes no arguments (pause, resume, trigger)
/// and accepts only nothing, whitespace or an empty JSON object `{}`. Reading it all
/// before answering keeps the connection usable; refusing anything else before acting
/// means a client that sent arguments learns they were not understood.
pub async fn read_no_arguments(body: Body, limit: usize) -> Result<(), ApiError> {
    let bytes = read_body(body, limit).await?;
    if is_blank(&bytes) {
        return Ok(());
    }
    match parse_json::<serde_json::Value>(&bytes)? {
        serde_json::Value::Object(fields) if fields.is_empty() => Ok(()),
        serde_json::Value::Object(fields) => {
            let name = fields.keys().next().map_or("body", String::as_str);
            Err(ApiError::field(
                ErrorCode::InvalidField,
                name,
                format!(
                    "unknown field `{name}`: this action takes no arguments (send no body or {{}})"
                ),
            ))
        }
        _ => Err(ApiError::field(
            ErrorCode::InvalidField,
            "body",
            "this action takes no arguments: send no body or {}",
        )),
    }
}

/// Parses JSON into `T`; a type error names the field's dotted path.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let parsed = serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            ApiError::new(
                ErrorCode::InvalidJson,
                format!("request body is not valid JSON: {inner}"),
            )
        } else {
            field_error(&path, &inner.to_string())
        }
    })?;
    // Every body is a JSON object; serde would also read a struct from an array of its
    // fields in order (`[null]`), which no client means (schemathesis found a replay that
    // took `[null]` for "no arguments").
    if bytes
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        .is_some_and(|b| *b == b'[')
    {
        return Err(ApiError::field(
            ErrorCode::InvalidField,
            "body",
            "the request body must be a JSON object, not an array",
        ));
    }
    Ok(parsed)
}

/// Deserializes an already-parsed JSON value into `T`, naming the field on error.
pub fn from_value<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        field_error(&path, &e.into_inner().to_string())
    })
}

fn field_error(path: &str, message: &str) -> ApiError {
    let parent = if path == "." { "" } else { path };
    // serde reports a missing field at its parent; name the field itself.
    let field = match backticked(message, "missing field `") {
        Some(name) if parent.is_empty() => name.to_string(),
        Some(name) => format!("{parent}.{name}"),
        None => parent.to_string(),
    };
    let field = if field.is_empty() {
        "body".to_string()
    } else {
        field
    };
    ApiError::field(ErrorCode::InvalidField, field, message.to_string())
}

fn backticked<'a>(message: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = message.strip_prefix(prefix)?;
    rest.split('`').next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[test]
    fn a_body_that_is_an_array_is_refused_naming_the_body() {
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Args {
            limit: Option<u32>,
        }
        let error = parse_json::<Args>(b" [null]").unwrap_err();
        assert_eq!(error.field.as_deref(), Some("body"), "{error:?}");
        assert!(parse_json::<Args>(br#"{"limit": 3}"#).is_ok());
    }

    #[test]
    fn only_json_whitespace_is_a_blank_body() {
        assert!(is_blank(b""));
        assert!(is_blank(b" \t\r\n"));
        // Form feed and vertical tab are ASCII whitespace but not JSON's (schemathesis
        // found a replay that took a lone form feed for "no arguments").
        assert!(!is_blank(b"\x0c"));
        assert!(!is_blank(b" \x0b "));
        assert!(!is_blank(b"{}"));
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Outer {
        name: String,
        inner: Inner,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Inner {
        group: String,
    }

    #[test]
    fn errors_name_the_field() {
        let err = parse_json::<Outer>(br#"{"name": "x", "inner": {}}"#).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("inner.group"));
        let err = parse_json::<Outer>(br#"{"inner": {"group": "g"}}"#).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("name"));
        let err = parse_json::<Outer>(br#"{"name": 5, "inner": {"group": "g"}}"#).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("name"));
        let err = parse_json::<Outer>(br#"{"name": "x", "inner": {"group": "g", "mode": 1}}"#)
            .unwrap_err();
        assert_eq!(err.field.as_deref(), Some("inner.mode"));
        assert!(
            err.message.contains("unknown field `mode`"),
            "{}",
            err.message
        );
        let err = parse_json::<Outer>(b"{not json").unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidJson);
        // Nesting past serde_json's 128 levels is refused as not JSON (docs/api.md).
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let err = parse_json::<serde_json::Value>(deep.as_bytes()).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidJson, "{}", err.message);
    }

    #[test]
    fn only_the_batch_route_takes_bigger_bodies() {
        assert_eq!(body_limit_for("/v1/jobs", 1024), 1024);
        assert_eq!(body_limit_for("/v1/jobs/batch/", 1024), 1024);
        assert_eq!(body_limit_for(BATCH_PATH, 1024), BATCH_BODY_LIMIT);
        assert_eq!(body_limit_for(BATCH_PATH, 64 << 20), 64 << 20);
    }

    #[tokio::test]
    async fn actions_take_no_arguments() {
        let read = |text: &'static str| read_no_arguments(Body::from(text), 1024);
        for fine in ["", "  \n", "{}", " { } "] {
            assert_eq!(read(fine).await, Ok(()), "{fine:?}");
        }
        let err = read(r#"{"force": true}"#).await.unwrap_err();
        assert_eq!(
            (err.code, err.field.as_deref()),
            (ErrorCode::InvalidField, Some("force"))
        );
        let err = read("[1]").await.unwrap_err();
        assert_eq!(err.field.as_deref(), Some("body"));
        assert_eq!(read("{").await.unwrap_err().code, ErrorCode::InvalidJson);
        let big = read_no_arguments(Body::from(vec![b' '; 2048]), 1024).await;
        assert_eq!(big.unwrap_err().code, ErrorCode::PayloadTooLarge);
    }
}
