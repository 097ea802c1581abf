//! Connection URLs: hiding their secrets in anything printed, and the start-up check of
//! a broker URL. Every path that prints a broker or database URL (configuration errors,
//! start-up logs, connection errors) goes through [`redact`] or [`scrub`], so a password
//! — in the userinfo (`user:secret@`) or a query parameter (`?password=`) — never
//! reaches a log or an error. What a broker URL may say (`amqps://` and its TLS query
//! parameters) is parsed where connections are made, in the `connect` module.

/// `url` with its password and secret query parameters replaced by `***`:
/// `postgres://u:***@h/db?password=***&sslmode=disable`.
pub fn redact(url: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let mut out = match userinfo(base) {
        Some((start, end)) => match base[start..end].split_once(':') {
            Some((user, _)) => format!("{}{user}:***{}", &base[..start], &base[end..]),
            None => base.to_string(),
        },
        None => base.to_string(),
    };
    if let Some(query) = query {
        out.push('?');
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _)) if is_secret_key(key) => format!("{key}=***"),
                _ => pair.to_string(),
            })
            .collect();
        out.push_str(&pairs.join("&"));
    }
    out
}

/// `text` (an error message about `url`) with `url` redacted and every secret of `url`
/// (of four characters or more, as written and percent-decoded) replaced by `***`.
pub fn scrub(text: &str, url: &str) -> String {
    let mut out = text.replace(url, &redact(url));
    for secret in secrets(url) {
        if secret.chars().count() >= 4 {
            out = out.replace(&secret, "***");
        }
    }
    out
}

/// Byte range of the userinfo (`user:pass`) in `base` (a URL without its query; one
/// written without a scheme, `user:pass@host`, counts too).
fn userinfo(base: &str) -> Option<(usize, usize)> {
    let start = base.find("://").map_or(0, |scheme| scheme + 3);
    let at = base[start..].rfind('@')?;
    Some((start, start + at))
}

fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["pass", "secret", "token"].iter().any(|s| key.contains(s))
}

/// The secrets in `url`, as written and percent-decoded.
fn secrets(url: &str) -> Vec<String> {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let mut found = Vec::new();
    if let Some((start, end)) = userinfo(base)
        && let Some((_, password)) = base[start..end].split_once(':')
    {
        found.push(password.to_string());
    }
    for pair in query.split('&') {
        if let Some((key, value)) = pair.split_once('=')
            && is_secret_key(key)
        {
            found.push(value.to_string());
        }
    }
    let decoded: Vec<String> = found.iter().filter_map(|s| percent_decoded(s)).collect();
    found.extend(decoded);
    found.retain(|s| !s.is_empty());
    found
}

fn percent_decoded(text: &str) -> Option<String> {
    if !text.contains('%') && !text.contains('+') {
        return None;
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: Option<&u8>| b.and_then(|b| (*b as char).to_digit(16));
        match (bytes[i], hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) {
            (b'%', Some(hi), Some(lo)) => {
                out.push(u8::try_from(hi * 16 + lo).ok()?);
                i += 3;
            }
            (b'+', ..) => {
                out.push(b' ');
                i += 1;
            }
            (b, ..) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_userinfo_and_query_secrets() {
        assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
        assert_eq!(
            redact("postgres://u@h:5432/db?password=hunter2&sslmode=disable"),
            "postgres://u@h:5432/db?password=***&sslmode=disable"
        );
        assert_eq!(
            redact("amqp://guest:p@ss/w0rd@127.0.0.1:5672/%2f"),
            "amqp://guest:***@127.0.0.1:5672/%2f"
        );
        assert_eq!(redact("sqlite://chime.db"), "sqlite://chime.db");
        assert_eq!(
            redact("mysql://a:b@c?x=1&PassWord=z"),
            "mysql://a:***@c?x=1&PassWord=***"
        );
        assert_eq!(redact("not a url"), "not a url");
        assert_eq!(
            redact("guest:pw@localhost:5672"),
            "guest:***@localhost:5672"
        );
    }

    #[test]
    fn scrub_hides_secrets_in_any_form() {
        let url = "postgres://u:p%40ss-word@h/db?sslpassword=key-pass";
        let text = format!("failed for {url}: bad p@ss-word and p%40ss-word and key-pass");
        let scrubbed = scrub(&text, url);
        for secret in ["p@ss-word", "p%40ss-word", "key-pass"] {
            assert!(!scrubbed.contains(secret), "{scrubbed}");
        }
        assert!(scrubbed.contains("postgres://u:***@h/db"), "{scrubbed}");
    }
}
