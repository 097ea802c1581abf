//! HTTP/1.1 over a plain TCP connection, byte for byte: for requests an HTTP client
//! library would refuse to send (bad header values, invalid UTF-8 in a path, hundreds of
//! headers) and for watching what the server does with a connection (answers on the
//! same connection, closes it, never resets it).

use std::time::Duration;

use serde_json::Value;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

/// One answer read off a connection.
#[derive(Debug, Clone)]
pub struct RawResponse {
    /// The status code.
    pub status: u16,
    /// Header lines, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Value::Null` if it is not JSON).
    pub json: Value,
    /// The body as text.
    pub body: String,
}

impl RawResponse {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A client connection to `127.0.0.1:port`.
#[derive(Debug)]
pub struct RawConnection {
    stream: TcpStream,
    buffer: Vec<u8>,
    /// An `authorization` header line added to each request sent, if any.
    authorization: Option<Vec<u8>>,
}

/// How long one answer may take before the test fails.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

impl RawConnection {
    /// Connects.
    pub async fn open(port: u16) -> Self {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("connect to chimed");
        Self {
            stream,
            buffer: Vec::new(),
            authorization: None,
        }
    }

    /// Connects; every request sent carries `Authorization: Bearer <token>` as its first
    /// header (inserted after the request line).
    pub async fn open_with_token(port: u16, token: &str) -> Self {
        let mut connection = Self::open(port).await;
        connection.authorization = Some(format!("authorization: Bearer {token}\r\n").into_bytes());
        connection
    }

    /// Sends raw bytes.
    pub async fn send(&mut self, bytes: &[u8]) {
        let line_end = find(bytes, b"\r\n").filter(|&end| {
            let line = &bytes[..end];
            line.ends_with(b" HTTP/1.1") || line.ends_with(b" HTTP/1.0")
        });
        match (&self.authorization, line_end) {
            (Some(header), Some(end)) => {
                let mut with = bytes[..end + 2].to_vec();
                with.extend_from_slice(header);
                with.extend_from_slice(&bytes[end + 2..]);
                self.stream.write_all(&with).await.expect("send request");
            }
            _ => self.stream.write_all(bytes).await.expect("send request"),
        }
    }

    /// Sends `request` and reads its answer.
    pub async fn exchange(&mut self, request: &[u8]) -> RawResponse {
        self.send(request).await;
        self.read_response().await
    }

    /// Reads one answer (with a `content-length` body); panics on a reset, on a close
    /// before a whole answer, or after [`ANSWER_TIMEOUT`].
    pub async fn read_response(&mut self) -> RawResponse {
        tokio::time::timeout(ANSWER_TIMEOUT, self.read_response_inner())
            .await
            .expect("an answer within 30 s")
    }

    async fn read_response_inner(&mut self) -> RawResponse {
        let head_end = loop {
            if let Some(end) = find(&self.buffer, b"\r\n\r\n") {
                break end;
            }
            self.fill().await;
        };
        let head = String::from_utf8_lossy(&self.buffer[..head_end]).into_owned();
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("a status line, got {status_line:?}"));
        let headers: Vec<(String, String)> = lines
            .filter_map(|line| line.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let length: usize = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        let start = head_end + 4;
        while self.buffer.len() < start + length {
            self.fill().await;
        }
        let body_bytes: Vec<u8> = self.buffer[start..start + length].to_vec();
        self.buffer.drain(..start + length);
        let body = String::from_utf8_lossy(&body_bytes).into_owned();
        RawResponse {
            status,
            headers,
            json: serde_json::from_slice(&body_bytes).unwrap_or(Value::Null),
            body,
        }
    }

    async fn fill(&mut self) {
        let mut chunk = [0u8; 8192];
        let n = self
            .stream
            .read(&mut chunk)
            .await
            .expect("read from chimed (no reset)");
        assert!(
            n > 0,
            "chimed closed the connection before a whole answer; got {:?}",
            String::from_utf8_lossy(&self.buffer)
        );
        self.buffer.extend_from_slice(&chunk[..n]);
    }

    /// Waits until the server closes the connection (end of file or a reset), up to
    /// `within`; returns whether it did. Bytes it sends meanwhile are discarded.
    pub async fn closed_within(&mut self, within: Duration) -> bool {
        let mut chunk = [0u8; 1024];
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
                Err(_) => return false,
                Ok(Ok(0) | Err(_)) => return true,
                Ok(Ok(_)) => {}
            }
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A request with `content-type: application/json` and a body (or none).
pub fn request(method: &str, path: &str, body: Option<&str>) -> Vec<u8> {
    let mut text = format!("{method} {path} HTTP/1.1\r\nhost: chimed\r\n");
    if let Some(body) = body {
        text.push_str(&format!(
            "content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        ));
    } else {
        text.push_str("\r\n");
    }
    text.into_bytes()
}
