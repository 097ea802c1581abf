//! Signing in: a bad token is refused at the field, a good one opens the overview with
//! the token's name and role, and signing out forgets it.

use crate::support::{Console, StoreKind};

async fn sign_in_and_out(kind: StoreKind) {
    let console = Console::start_signed_out(kind).await;
    let browser = &console.browser;
    console
        .assert_no_console_errors("loading the sign-in page")
        .await;

    browser
        .fill("input[name=token]", "chime_not_a_real_token")
        .await;
    browser.click("button[type=submit]").await;
    let error = browser
        .wait_text(".field-error[data-field=token]", "the refusal", |t| {
            t.contains("not valid")
        })
        .await;
    assert!(!error.contains("chime_not_a_real_token"), "{error}");
    // The refused check is the one expected failed request.
    let errors = browser.console_errors().await;
    assert!(
        errors
            .iter()
            .all(|e| e.contains("/v1/me") && e.contains("401")),
        "{errors:#?}"
    );

    let token = console.chimed.token().to_string();
    console.sign_in(&token).await;
    browser
        .wait_text("#whoami", "the token's name and role", |t| {
            t.contains("admin")
        })
        .await;
    console.assert_no_console_errors("signing in").await;

    browser.click("#signout").await;
    browser.wait_page("signin").await;
    // The token is gone from the tab: a reload stays signed out.
    browser.open(&console.url("#/jobs")).await;
    browser.wait_page("signin").await;
}

crate::per_store!(sign_in_and_out);
