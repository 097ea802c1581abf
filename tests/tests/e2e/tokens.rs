//! API tokens against real chimed processes: `chimectl token create|ls|revoke`, a
//! scoped token used through chimectl, and a revocation on one node of a PostgreSQL
//! cluster taking effect on the other within a few seconds.

use std::{process::Output, time::Duration};

use chime_tests::{Chimed, api::Api, binaries, chimed::ChimedConfig, wait};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Setup, StoreKind};

async fn chimectl(api: &Api, args: &[&str]) -> Output {
    let api = api.clone();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        binaries::chimectl(&api)
            .args(&args)
            .output()
            .expect("run chimectl")
    })
    .await
    .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chimectl_creates_uses_and_revokes_a_scoped_token() {
    let s = Setup::new(StoreKind::Sqlite).await;
    let admin = &s.chimed.api;
    let created = chimectl(
        admin,
        &[
            "--json", "token", "create", "--name", "shop-ci", "--role", "operator", "--app", "shop",
        ],
    )
    .await;
    assert!(created.status.success(), "{}", stderr(&created));
    let created: Value = serde_json::from_str(&stdout(&created)).unwrap();
    let secret = created["token"].as_str().unwrap().to_string();
    let shop = Api::new(admin.base()).with_token(Some(&secret));

    // The scoped token creates a job of its app, and is refused another app's.
    let add = |app: &'static str| {
        let shop = shop.clone();
        async move {
            chimectl(
                &shop,
                &[
                    "job", "add", "--app", app, "--name", "tidy", "--every", "1h", "--group", "g",
                ],
            )
            .await
        }
    };
    let ok = add("shop").await;
    assert!(ok.status.success(), "{}", stderr(&ok));
    let refused = add("billing").await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused)
            .contains("forbidden: token 'shop-ci' may not change jobs of app 'billing'"),
        "{}",
        stderr(&refused)
    );
    // Managing tokens is the admin's.
    let listing = chimectl(&shop, &["token", "ls"]).await;
    assert!(
        stderr(&listing).contains("forbidden"),
        "{}",
        stderr(&listing)
    );
    let listed = chimectl(admin, &["token", "ls"]).await;
    assert!(listed.status.success(), "{}", stderr(&listed));
    assert!(stdout(&listed).contains("shop-ci"), "{}", stdout(&listed));
    assert!(!stdout(&listed).contains(&secret), "the secret is listed");

    let revoked = chimectl(admin, &["token", "revoke", "shop-ci"]).await;
    assert!(revoked.status.success(), "{}", stderr(&revoked));
    let after = chimectl(&shop, &["job", "ls"]).await;
    assert_eq!(after.status.code(), Some(1));
    assert!(
        stderr(&after).contains("unauthorized"),
        "{}",
        stderr(&after)
    );
    assert!(!stderr(&after).contains(&secret), "the secret is echoed");

    // Without any token chimectl says where it looks for one.
    let anonymous = chimectl(&Api::new(admin.base()), &["job", "ls"]).await;
    assert!(
        stderr(&anonymous).contains("CHIME_TOKEN_FILE"),
        "{}",
        stderr(&anonymous)
    );
    // Nothing of the refused requests was stored.
    let (_, jobs) = admin.call(Method::GET, "/v1/jobs", None).await;
    assert_eq!(jobs["items"].as_array().unwrap().len(), 1, "{jobs}");

    // The audit trail names who did what; the job's versions list its creation.
    let trail = chimectl(admin, &["--json", "audit", "ls"]).await;
    assert!(trail.status.success(), "{}", stderr(&trail));
    let trail: Value = serde_json::from_str(&stdout(&trail)).unwrap();
    let done: Vec<(String, String)> = trail["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["actor"].as_str().unwrap().into(),
                e["action"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        done,
        [
            ("bootstrap".to_string(), "token.revoke".to_string()),
            ("shop-ci".to_string(), "job.create".to_string()),
            ("bootstrap".to_string(), "token.create".to_string()),
        ]
    );
    let versions = chimectl(admin, &["job", "versions", "shop/tidy"]).await;
    assert!(versions.status.success(), "{}", stderr(&versions));
    assert!(
        stdout(&versions).contains("job.create"),
        "{}",
        stdout(&versions)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_revoked_on_one_node_is_refused_by_the_other_within_seconds() {
    let s = Setup::new(StoreKind::Postgres).await;
    let other = Chimed::start(ChimedConfig::new(s.db.url(), &s.vhost.amqp_url())).await;
    let (status, created) = s
        .chimed
        .api
        .call(
            Method::POST,
            "/v1/tokens",
            Some(&json!({"name": "reader", "role": "reader", "apps": ["*"]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let secret = created["token"].as_str().unwrap();
    let on_other = Api::new(other.api.base()).with_token(Some(secret));
    // Created on the first node, it works on the second within its refresh time.
    wait::until(
        "the new token to work on the other node",
        Duration::from_secs(5),
        || async {
            (on_other.call(Method::GET, "/v1/jobs", None).await.0 == StatusCode::OK).then_some(())
        },
    )
    .await;
    let revoked_at = std::time::Instant::now();
    let (status, body) = s
        .chimed
        .api
        .call(Method::DELETE, "/v1/tokens/reader", None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    wait::until(
        "the other node to refuse the revoked token",
        Duration::from_secs(5),
        || async {
            (on_other.call(Method::GET, "/v1/jobs", None).await.0 == StatusCode::UNAUTHORIZED)
                .then_some(())
        },
    )
    .await;
    let took = revoked_at.elapsed();
    assert!(took <= Duration::from_secs(4), "revocation took {took:?}");
    other.stop().await;
}
