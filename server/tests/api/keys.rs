//! Issue 45 (item 12): what `/.well-known/aperture/keys` publishes. A row inserted into the
//! database's `signing_keys` publishes nothing; the node's own keys and those of the
//! `APERTURE_PUBLISHED_KEYS` file are published, and `aperture keys rotate` appends the outgoing
//! key to that file, so what it signed still verifies after its key file is gone.

use engine::receipt::{JwkSet, Signer};
use serde_json::json;

use crate::cli::aperture;
use crate::helpers::{Db, Requests, SIGNING_KEY, TestApp, TestDb};

async fn published(app: &TestApp) -> Vec<String> {
    let set = app.get_raw("/.well-known/aperture/keys").await.json();
    let set: JwkSet = serde_json::from_value(set).unwrap();
    set.keys.into_iter().map(|k| k.kid).collect()
}

#[tokio::test]
async fn only_the_node_s_own_keys_and_the_published_file_s_are_published() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("published.jwks");
    let retired = Signer::from_seed(&[7; 32]).jwk();
    std::fs::write(&file, json!({"keys": [retired]}).to_string()).unwrap();
    let app = TestApp::spawn_with(Db::Sqlite, {
        let file = file.clone();
        move |c| c.published_keys = file
    })
    .await
    .unwrap();
    let own = Signer::from_seed(&hex::decode(SIGNING_KEY).unwrap().try_into().unwrap()).jwk();
    // An attacker with the database adds a key of theirs.
    let forger = Signer::from_seed(&[13; 32]).jwk();
    aperture_core::store::keys::record(&app.store, &forger.kid, &forger.x)
        .await
        .unwrap();
    let kids = published(&app).await;
    assert!(kids.contains(&own.kid), "{kids:?}");
    assert!(kids.contains(&retired.kid), "{kids:?}");
    assert!(
        !kids.contains(&forger.kid),
        "a database row was published: {kids:?}"
    );
    // The row is in the database; only what is published ignores it.
    let stored = aperture_core::keys::published(&app.store).await.unwrap();
    assert!(
        stored.keys.iter().any(|k| k.kid == forger.kid),
        "the row is there"
    );
}

#[tokio::test]
async fn keys_rotate_appends_the_outgoing_key_to_the_published_file() {
    let db = TestDb::new(Db::Sqlite).await.unwrap();
    assert!(aperture(&db, &["migrate"], None).status.success());
    let dir = db.data_dir().join("keys");
    for _ in 0..2 {
        let out = aperture(&db, &["keys", "rotate"], None);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(std::time::Duration::from_millis(3));
    }
    let file = dir.join("published.jwks");
    let set: JwkSet = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(
        set.keys.len(),
        1,
        "the first key, outgoing at the second rotation"
    );
    let first = set.keys[0].kid.clone();
    // Its key file goes (the node now signs with a key from the environment): still published.
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "ed25519") {
            std::fs::remove_file(path).unwrap();
        }
    }
    let store = aperture_core::store::Store::connect(&db.url).await.unwrap();
    let ring = aperture_core::keys::KeyRing::load(&store, &db.data_dir(), Some(SIGNING_KEY), &file)
        .await
        .unwrap();
    let kids: Vec<String> = ring
        .published()
        .await
        .unwrap()
        .keys
        .into_iter()
        .map(|k| k.kid)
        .collect();
    assert!(kids.contains(&first), "{kids:?}");
    assert!(
        kids.contains(&ring.signer().key_id().to_owned()),
        "{kids:?}"
    );
}
