//! API tokens: stored by hash, names unique (revoked ones included), revocation kept.

use chime_scheduler::{
    domain::access::{ApiToken, AppScope, Role},
    store::StoredToken,
};

use super::*;

fn token(name: &str, role: Role, apps: AppScope, hash: &str) -> StoredToken {
    StoredToken {
        token: ApiToken {
            id: Uuid::now_v7(),
            name: name.into(),
            role,
            apps,
            created_at: t("2026-11-27T10:00:00Z"),
            created_by: "bootstrap".into(),
            revoked_at: None,
        },
        secret_sha256: hash.into(),
    }
}

pub(super) async fn tokens_round_trip_and_revoke(store: &dyn Store) {
    let shop = token(
        "shop-ops",
        Role::Operator,
        AppScope::Only(["shop".to_string(), "web".to_string()].into()),
        "aa",
    );
    let admin = token("ci", Role::Admin, AppScope::All, "bb");
    assert!(store.insert_token(&shop).await.unwrap());
    assert!(store.insert_token(&admin).await.unwrap());
    let taken = token("ci", Role::Reader, AppScope::All, "cc");
    assert!(
        !store.insert_token(&taken).await.unwrap(),
        "names are unique"
    );
    assert_eq!(
        store.list_tokens().await.unwrap(),
        vec![admin.clone(), shop.clone()]
    );

    let at = t("2026-11-27T11:00:00Z");
    let revoked = store.revoke_token("shop-ops", at).await.unwrap().unwrap();
    assert_eq!(revoked.revoked_at, Some(at));
    // A second revocation keeps the first time.
    let again = store
        .revoke_token("shop-ops", t("2026-11-27T12:00:00Z"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.revoked_at, Some(at));
    assert_eq!(store.revoke_token("nobody", at).await.unwrap(), None);
    let listed = store.list_tokens().await.unwrap();
    assert_eq!(listed[1].token.revoked_at, Some(at));
    assert_eq!(listed[1].secret_sha256, "aa");
    // A revoked name stays taken.
    assert!(
        !store
            .insert_token(&token("shop-ops", Role::Reader, AppScope::All, "dd"))
            .await
            .unwrap()
    );
}
