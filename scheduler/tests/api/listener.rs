//! The API over a real TCP listener, served as `chimed` serves it
//! ([`chime_scheduler::daemon::http::serve`]): a client's round trip, and the errors only
//! the HTTP layer answers (a malformed request, too many headers) in the API's JSON.

use std::time::Duration;

use chime_scheduler::daemon::http::{HttpSettings, MAX_HEADERS, serve};
use serde_json::Value;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};
use tokio_util::sync::CancellationToken;

use crate::support::{ADMIN_TOKEN, TestApp, hourly};

/// Sends `request` as raw bytes and reads the whole answer (the server closes).
async fn raw_exchange(addr: std::net::SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request).await.expect("send");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("the server answers and closes")
        .expect("read");
    String::from_utf8_lossy(&answer).into_owned()
}

fn error_code(answer: &str) -> String {
    let (_, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    let body: Value = serde_json::from_str(body).expect("a JSON body");
    body["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn jobs_over_a_real_listener_round_trip_and_http_errors_are_json() {
    let app = TestApp::new().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let server = tokio::spawn(serve(
        listener,
        app.router.clone(),
        HttpSettings::default(),
        stop.clone(),
    ));
    let base = format!("http://{addr}");
    chime_scheduler::daemon::tls::install_crypto_provider();
    // Without a token: 401 in the API's JSON, with the scheme to use.
    let anonymous = reqwest::Client::new()
        .get(format!("{base}/v1/jobs"))
        .send()
        .await
        .expect("GET /v1/jobs");
    assert_eq!(anonymous.status().as_u16(), 401);
    assert!(
        anonymous.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .starts_with("Bearer")
    );
    let refused: Value = anonymous.json().await.unwrap();
    assert_eq!(refused["error"]["code"], "unauthorized");
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {ADMIN_TOKEN}").parse().unwrap(),
    );
    let client = reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap();

    // Create, then read back on the same (kept-alive) client.
    let created = client
        .post(format!("{base}/v1/jobs"))
        .json(&hourly("listener"))
        .send()
        .await
        .expect("POST /v1/jobs");
    assert_eq!(created.status().as_u16(), 201);
    let location = created.headers()["location"].to_str().unwrap().to_string();
    let job: Value = created.json().await.unwrap();
    let read = client
        .get(format!("{base}{location}"))
        .send()
        .await
        .expect("GET the job");
    assert_eq!(read.status().as_u16(), 200);
    assert_eq!(read.json::<Value>().await.unwrap(), job);
    let missing = client
        .get(format!("{base}/v1/jobs/{}", uuid::Uuid::now_v7()))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status().as_u16(), 404);
    assert_eq!(
        missing.json::<Value>().await.unwrap()["error"]["code"],
        "not_found"
    );

    // Errors hyper answers itself get the API's JSON too.
    let answer = raw_exchange(addr, b"NOT A REQUEST\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert_eq!(error_code(&answer), "bad_request");
    let mut many = String::from("GET /healthz HTTP/1.1\r\nhost: x\r\n");
    for i in 0..=MAX_HEADERS {
        many.push_str(&format!("x-h{i}: 1\r\n"));
    }
    many.push_str("\r\n");
    let answer = raw_exchange(addr, many.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
    assert_eq!(error_code(&answer), "headers_too_large");

    stop.cancel();
    tokio::time::timeout(Duration::from_secs(15), server)
        .await
        .expect("the server stops")
        .unwrap();
}
