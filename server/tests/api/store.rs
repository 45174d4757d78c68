//! Store functions, identical on SQLite and PostgreSQL.

use aperture_core::store::tokens::NewToken;
use aperture_core::store::{self, Store, now_ms};
use tower_sessions::session::{Id, Record};
use tower_sessions::{ExpiredDeletion, SessionStore};

use crate::on_both_backends;

async fn migrations_are_idempotent(store: &Store) {
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();
}
on_both_backends!(migrations_run_twice, migrations_are_idempotent);

/// Issue 45 item 2, the upgrade: users made before users had ids get an immutable `usr_` id
/// each (distinct, 128 bits as new ones), and tokens made before keep the person who made them,
/// whom approvals still refuse.
async fn upgraded(db: crate::helpers::Db) {
    let Some(db) = crate::helpers::TestDb::new(db).await else {
        return;
    };
    let store = Store::connect(&db.url).await.unwrap();
    let folder = match store.kind() {
        store::DbKind::Sqlite => "sqlite",
        store::DbKind::Postgres => "postgres",
    };
    let all = sqlx::migrate::Migrator::new(std::path::PathBuf::from(format!(
        "{}/../migrations/{folder}",
        env!("CARGO_MANIFEST_DIR")
    )))
    .await
    .unwrap();
    let mut before = sqlx::migrate::Migrator::new(std::path::PathBuf::from(format!(
        "{}/../migrations/{folder}",
        env!("CARGO_MANIFEST_DIR")
    )))
    .await
    .unwrap();
    before.migrations = all
        .migrations
        .iter()
        .filter(|m| m.version < 25)
        .cloned()
        .collect::<Vec<_>>()
        .into();
    before.run(store.pool()).await.unwrap();
    sqlx::query("INSERT INTO tenants (id, created_at) VALUES ('a', 0)")
        .execute(store.pool())
        .await
        .unwrap();
    for name in ["alice", "bob"] {
        sqlx::query(
            "INSERT INTO users (tenant_id, username, password_hash, scopes, created_by, created_at) \
             VALUES ('a', $1, 'h', '[]', 'operator', 0)",
        )
        .bind(name)
        .execute(store.pool())
        .await
        .unwrap();
    }
    sqlx::query(
        "INSERT INTO api_tokens (id, tenant_id, actor_id, scopes, secret_sha256, created_by, created_at) \
         VALUES ('tok_old', 'a', 'bot', '[]', 'old', 'user:alice', 0)",
    )
    .execute(store.pool())
    .await
    .unwrap();
    store.migrate().await.unwrap();
    let alice = store::users::find(&store, "a", "alice")
        .await
        .unwrap()
        .unwrap();
    let bob = store::users::find(&store, "a", "bob")
        .await
        .unwrap()
        .unwrap();
    for id in [&alice.id, &bob.id] {
        assert!(
            id.starts_with("usr_")
                && id.len() == 36
                && id[4..]
                    .bytes()
                    .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()),
            "{id}"
        );
    }
    assert_ne!(alice.id, bob.id);
    let token = store::tokens::find_by_secret_hash(&store, "old")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(token.created_by, "user:alice");
    assert_eq!(token.creating_person(), "user:alice");
    store.close().await;
}

#[tokio::test]
async fn users_made_before_ids_get_one_on_sqlite() {
    upgraded(crate::helpers::Db::Sqlite).await;
}

#[tokio::test]
async fn users_made_before_ids_get_one_on_postgres() {
    upgraded(crate::helpers::Db::Postgres).await;
}

async fn tenants(store: &Store) {
    assert!(store::tenants::ensure(store, "acme").await.unwrap());
    assert!(!store::tenants::ensure(store, "acme").await.unwrap());
    assert!(store::tenants::exists(store, "acme").await.unwrap());
    assert!(!store::tenants::exists(store, "other").await.unwrap());
}
on_both_backends!(tenants_are_created_once, tenants);

async fn users(store: &Store) {
    store::tenants::ensure(store, "a").await.unwrap();
    store::tenants::ensure(store, "b").await.unwrap();
    let scopes = vec!["agent_tool_exposure:read".to_owned()];
    let alice = store::users::insert(
        store,
        "a",
        "alice",
        "$argon2id$x",
        &scopes,
        "operator",
        &["default".to_owned()],
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(alice.scopes, scopes);
    // Same name, other tenant: allowed. Same tenant: refused without error.
    assert!(
        store::users::insert(
            store,
            "b",
            "alice",
            "h",
            &scopes,
            "operator",
            &["default".to_owned()]
        )
        .await
        .unwrap()
        .is_some()
    );
    assert!(
        store::users::insert(
            store,
            "a",
            "alice",
            "h",
            &scopes,
            "operator",
            &["default".to_owned()]
        )
        .await
        .unwrap()
        .is_none()
    );
    assert_eq!(store::users::count_all(store).await.unwrap(), 2);
    assert_eq!(store::users::count(store, "a").await.unwrap(), 1);
    let new_scopes = vec![
        "agent_tool_exposure:admin".to_owned(),
        "github:read".to_owned(),
    ];
    let updated = store::users::set_scopes(store, "a", "alice", &new_scopes)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(updated.scopes, new_scopes);
    assert!(
        store::users::set_scopes(store, "a", "bob", &new_scopes)
            .await
            .unwrap()
            .is_none()
    );
    // Tenant b's alice kept her scopes.
    assert_eq!(
        store::users::find(store, "b", "alice")
            .await
            .unwrap()
            .unwrap()
            .scopes,
        scopes
    );
    assert_eq!(store::users::list(store, "a").await.unwrap().len(), 1);

    let hour = 3_600_000;
    let now = store::now_ms();
    for client in ["198.51.100.1", "198.51.100.1", "198.51.100.2"] {
        store::users::record_sign_in_failure(store, "a", "alice", client, now, hour)
            .await
            .unwrap();
    }
    store::users::record_sign_in_failure(store, "a", "nobody", "198.51.100.1", now, hour)
        .await
        .unwrap();
    let seen = store::users::sign_in_failures(store, "a", "alice", "198.51.100.1", now - hour)
        .await
        .unwrap();
    assert_eq!((seen.account, seen.pair, seen.last_at), (3, 2, Some(now)));
    let other = store::users::sign_in_failures(store, "b", "alice", "198.51.100.1", now - hour)
        .await
        .unwrap();
    assert_eq!((other.account, other.pair, other.last_at), (0, 0, None));
    // Outside the window nothing counts any more.
    let later = store::users::sign_in_failures(store, "a", "alice", "198.51.100.1", now + 1)
        .await
        .unwrap();
    assert_eq!(later.account, 0);
    // One slot per account: the first attempt takes it, the next waits until it is free.
    assert_eq!(
        store::users::claim_sign_in_slot(store, "a", "alice", now, 5_000)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store::users::claim_sign_in_slot(store, "a", "alice", now + 1_000, 5_000)
            .await
            .unwrap(),
        Some(4_000)
    );
    assert_eq!(
        store::users::claim_sign_in_slot(store, "a", "alice", now + 5_000, 0)
            .await
            .unwrap(),
        None
    );
    // Unknown users are counted per tenant and hour; ended hours are claimed once.
    assert_eq!(
        store::users::count_unknown_user_failure(store, "a", 0)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store::users::count_unknown_user_failure(store, "a", 0)
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        store::users::claim_unknown_user_hours(store, hour, now)
            .await
            .unwrap(),
        vec![("a".to_owned(), 0, 2)]
    );
    assert!(
        store::users::claim_unknown_user_hours(store, hour, now)
            .await
            .unwrap()
            .is_empty()
    );
    store::users::unknown_user_hours_done(store, "a", 0)
        .await
        .unwrap();
}
on_both_backends!(users_are_per_tenant, users);

async fn tokens(store: &Store) {
    store::tenants::ensure(store, "a").await.unwrap();
    store::tenants::ensure(store, "b").await.unwrap();
    let scopes = vec!["agent_tool_exposure:run".to_owned()];
    let row = store::tokens::insert(
        store,
        NewToken {
            id: "tok_1",
            tenant_id: "a",
            actor_id: "bot",
            name: Some("ci"),
            scopes: &scopes,
            secret_sha256: "ab",
            created_by: "usr_0123",
            created_by_actor: "user:admin",
            expires_at: Some(now_ms() + 60_000),
            environments: &[],
        },
    )
    .await
    .unwrap();
    assert_eq!(row.name.as_deref(), Some("ci"));
    assert!(row.revoked_at.is_none());
    let found = store::tokens::find_by_secret_hash(store, "ab")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(found.id, "tok_1");
    assert_eq!(found.created_by, "usr_0123");
    assert_eq!(found.creating_person(), "user:admin");
    assert!(
        store::tokens::find_by_secret_hash(store, "cd")
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(store::tokens::count_active(store, "a").await.unwrap(), 1);

    store::tokens::touch(store, "tok_1").await.unwrap();
    assert!(
        store::tokens::find_by_secret_hash(store, "ab")
            .await
            .unwrap()
            .unwrap()
            .last_used_at
            .is_some()
    );

    // Another tenant cannot revoke it.
    assert!(
        store::tokens::revoke(store, "b", "tok_1")
            .await
            .unwrap()
            .is_none()
    );
    let revoked = store::tokens::revoke(store, "a", "tok_1")
        .await
        .unwrap()
        .unwrap();
    let first = revoked.revoked_at.unwrap();
    let again = store::tokens::revoke(store, "a", "tok_1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        again.revoked_at,
        Some(first),
        "revoking twice keeps the first time"
    );
    assert_eq!(store::tokens::count_active(store, "a").await.unwrap(), 0);
    assert_eq!(store::tokens::list(store, "a").await.unwrap().len(), 1);
    assert!(store::tokens::list(store, "b").await.unwrap().is_empty());

    // The secret hash is unique.
    let duplicate = store::tokens::insert(
        store,
        NewToken {
            id: "tok_2",
            tenant_id: "a",
            actor_id: "bot",
            name: None,
            scopes: &scopes,
            secret_sha256: "ab",
            created_by: "operator",
            created_by_actor: "operator",
            expires_at: None,
            environments: &[],
        },
    )
    .await;
    assert!(duplicate.is_err());
}
on_both_backends!(tokens_store_only_hashes_and_stay_in_their_tenant, tokens);

async fn sessions(store: &Store) {
    let sessions = aperture::auth::dashboard::DbSessionStore::new(store.clone());
    let mut data = std::collections::HashMap::new();
    data.insert("k".to_owned(), serde_json::json!({"v": 1}));
    let mut record = Record {
        id: Id::default(),
        data: data.clone(),
        expiry_date: time::OffsetDateTime::now_utc() + time::Duration::minutes(30),
    };
    sessions.create(&mut record).await.unwrap();
    let loaded = sessions.load(&record.id).await.unwrap().unwrap();
    assert_eq!(loaded.data, data);

    record.data.insert("k".to_owned(), serde_json::json!(2));
    sessions.save(&record).await.unwrap();
    assert_eq!(
        sessions.load(&record.id).await.unwrap().unwrap().data["k"],
        serde_json::json!(2)
    );

    let mut expired = Record {
        id: Id::default(),
        data: data.clone(),
        expiry_date: time::OffsetDateTime::now_utc() - time::Duration::seconds(1),
    };
    sessions.create(&mut expired).await.unwrap();
    assert!(
        sessions.load(&expired.id).await.unwrap().is_none(),
        "expired sessions do not load"
    );
    sessions.delete_expired().await.unwrap();
    let (left,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM dashboard_sessions")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(left, 1);

    sessions.delete(&record.id).await.unwrap();
    assert!(sessions.load(&record.id).await.unwrap().is_none());
}
on_both_backends!(sessions_round_trip_and_expire, sessions);

/// Issue 3 (speed): a tool's fingerprints are written with it, follow every rewrite, and rows
/// written before they were stored get them computed when read.
async fn tool_fingerprints(store: &Store) {
    use engine::catalog::Fingerprints;
    use engine::descriptor::{ToolDescriptor, ToolSource};
    store::tenants::ensure(store, "a").await.unwrap();
    let mut tool = ToolDescriptor {
        name: "search".into(),
        version: "1".into(),
        title: Some("Search".into()),
        description: None,
        input_schema: serde_json::json!({"type": "object", "properties": {"q": {"type": "string"}}}),
        output_schema: None,
        annotations: None,
        family: None,
        risk: vec!["read".into()],
        required_scope: None,
        source: ToolSource::Builtin,
        dry_run_argument: None,
        price_cents: None,
    };
    store::catalog::upsert(store, "a", &tool).await.unwrap();
    let read = store::catalog::list_fingerprinted(store, "a")
        .await
        .unwrap();
    assert_eq!(read[0].tool, tool);
    assert_eq!(read[0].fingerprints, Fingerprints::of(&tool));
    let first = read[0].fingerprints.clone();

    tool.version = "2".into();
    tool.description = Some("finds".into());
    store::catalog::upsert(store, "a", &tool).await.unwrap();
    let again = store::catalog::find_fingerprinted(store, "a", "search")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.fingerprints, Fingerprints::of(&tool));
    assert_ne!(again.fingerprints.definition_hash, first.definition_hash);
    assert_ne!(again.fingerprints.schema_hash, first.schema_hash);

    sqlx::query("UPDATE tools SET definition_hash = NULL, schema_hash = NULL")
        .execute(store.pool())
        .await
        .unwrap();
    let legacy = store::catalog::list_fingerprinted(store, "a")
        .await
        .unwrap();
    assert_eq!(legacy[0].fingerprints, Fingerprints::of(&tool));
}
on_both_backends!(
    tool_fingerprints_are_stored_with_the_tool,
    tool_fingerprints
);

/// A sync and an admin's `PUT /tools/{name}` each read a tool row, change their part and write
/// it back: the second to write must not put back what it read over the first one's change
/// (CI once lost an admin's risk labels to a sync of the same tool that had read the row first).
async fn tool_writes_do_not_undo_each_other(store: &Store) {
    use engine::descriptor::{ToolDescriptor, ToolSource};
    store::tenants::ensure(store, "a").await.unwrap();
    let listed = ToolDescriptor {
        name: "mcp__srv__echo".into(),
        version: "1".into(),
        title: None,
        description: Some("echoes".into()),
        input_schema: serde_json::json!({"type": "object"}),
        output_schema: None,
        annotations: None,
        family: None,
        risk: vec![],
        required_scope: None,
        source: ToolSource::Builtin,
        dry_run_argument: None,
        price_cents: None,
    };
    // Two syncs find no row; the first inserts, the second's insert is refused.
    assert!(
        store::catalog::find_revised(store, "a", &listed.name)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        store::catalog::write_if(store, "a", &listed, None)
            .await
            .unwrap()
    );
    assert!(
        !store::catalog::write_if(store, "a", &listed, None)
            .await
            .unwrap()
    );

    // A sync and an admin read the same revision; the admin writes first.
    let sync_read = store::catalog::find_revised(store, "a", &listed.name)
        .await
        .unwrap()
        .unwrap();
    let admin_read = store::catalog::find_revised(store, "a", &listed.name)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(sync_read.revision, admin_read.revision);
    let mut described = admin_read.tool.clone();
    described.risk = vec!["read".into()];
    assert!(
        store::catalog::write_if(store, "a", &described, Some(admin_read.revision))
            .await
            .unwrap()
    );
    // The sync's write of what it read (plus a new description) is refused ...
    let mut synced = sync_read.tool.clone();
    synced.description = Some("echoes, now louder".into());
    assert!(
        !store::catalog::write_if(store, "a", &synced, Some(sync_read.revision))
            .await
            .unwrap()
    );
    let now = store::catalog::find(store, "a", &listed.name)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(now.risk, vec!["read".to_owned()]);
    assert_eq!(now.description.as_deref(), Some("echoes"));
    // ... and done again on the row as it is now, it keeps both changes.
    let again = store::catalog::find_revised(store, "a", &listed.name)
        .await
        .unwrap()
        .unwrap();
    assert!(again.revision > sync_read.revision);
    let mut synced = again.tool.clone();
    synced.description = Some("echoes, now louder".into());
    assert!(
        store::catalog::write_if(store, "a", &synced, Some(again.revision))
            .await
            .unwrap()
    );
    let now = store::catalog::find(store, "a", &listed.name)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(now.risk, vec!["read".to_owned()]);
    assert_eq!(now.description.as_deref(), Some("echoes, now louder"));
    // The operator's unconditional upsert moves the revision too.
    store::catalog::upsert(store, "a", &now).await.unwrap();
    assert!(
        !store::catalog::write_if(store, "a", &now, Some(again.revision + 1))
            .await
            .unwrap()
    );
}
on_both_backends!(
    a_sync_and_an_admin_never_undo_each_other_s_tool_writes,
    tool_writes_do_not_undo_each_other
);

/// Issue 4 (speed): the calls' read cache holds an entry until anything it was read from
/// changes — whoever writes, since only the database's triggers tell it (these writes go
/// through plain store functions, which never touch the cache).
async fn read_cache(store: &Store) {
    use aperture_core::store::cache;
    use aperture_core::store::exposure::{ManifestRow, SessionRow};
    use aperture_core::store::upstreams::UpstreamRow;
    use engine::descriptor::{ToolDescriptor, ToolSource};
    use std::sync::Arc;
    store::tenants::ensure(store, "a").await.unwrap();
    let upstream = UpstreamRow {
        id: "ups_1".into(),
        tenant_id: "a".into(),
        name: "files".into(),
        transport: "streamable_http".into(),
        spec: "{}".into(),
        endpoint: "https://files.example/mcp".into(),
        fingerprint: "sha256:one".into(),
        status: "registered".into(),
        last_error: None,
        last_synced_at: None,
        created_by: "operator".into(),
        created_at: 0,
        credential_version: 0,
    };
    assert!(store::upstreams::insert(store, &upstream).await.unwrap());
    let mut tool = ToolDescriptor {
        name: "mcp__files__read".into(),
        version: "1".into(),
        title: None,
        description: Some("reads".into()),
        input_schema: serde_json::json!({"type": "object"}),
        output_schema: None,
        annotations: None,
        family: None,
        risk: vec!["read".into()],
        required_scope: None,
        source: ToolSource::Mcp {
            upstream_id: "ups_1".into(),
            server: "files".into(),
            tool: "read".into(),
        },
        dry_run_argument: None,
        price_cents: None,
    };
    store::catalog::upsert(store, "a", &tool).await.unwrap();

    // Read twice with nothing changed: the second read is the same entry.
    let fresh = cache::fresh(store).await.unwrap();
    let first = cache::tool(store, &fresh, "a", &tool.name)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.tool.tool, tool);
    assert_eq!(first.upstream.as_ref().unwrap().fingerprint, "sha256:one");
    let fresh = cache::fresh(store).await.unwrap();
    let again = cache::tool(store, &fresh, "a", &tool.name)
        .await
        .unwrap()
        .unwrap();
    assert!(
        Arc::ptr_eq(&first, &again),
        "an unchanged tool is served from memory"
    );
    // Other tenants never see it.
    assert!(
        cache::tool(store, &fresh, "b", &tool.name)
            .await
            .unwrap()
            .is_none()
    );

    // A changed definition.
    tool.description = Some("reads files".into());
    store::catalog::upsert(store, "a", &tool).await.unwrap();
    let fresh = cache::fresh(store).await.unwrap();
    let changed = cache::tool(store, &fresh, "a", &tool.name)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        changed.tool.tool.description.as_deref(),
        Some("reads files")
    );
    assert_ne!(
        changed.tool.fingerprints.definition_hash,
        first.tool.fingerprints.definition_hash
    );

    // The upstream re-registered elsewhere, then removed.
    sqlx::query("UPDATE upstreams SET fingerprint = 'sha256:two' WHERE id = 'ups_1'")
        .execute(store.pool())
        .await
        .unwrap();
    let fresh = cache::fresh(store).await.unwrap();
    let moved = cache::tool(store, &fresh, "a", &tool.name)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(moved.upstream.as_ref().unwrap().fingerprint, "sha256:two");
    assert!(store::upstreams::delete(store, "a", "ups_1").await.unwrap());
    let fresh = cache::fresh(store).await.unwrap();
    let orphan = cache::tool(store, &fresh, "a", &tool.name)
        .await
        .unwrap()
        .unwrap();
    assert!(orphan.upstream.is_none());

    // A session's grant, then the session revoked.
    let session = SessionRow {
        id: "ses_1".into(),
        tenant_id: "a".into(),
        environment: "default".into(),
        actor_id: "agent".into(),
        preset: None,
        entity: None,
        parent_id: None,
        fork_tools: None,
        created_at: 0,
        revoked_at: None,
    };
    store::exposure::insert_session(store, &session)
        .await
        .unwrap();
    store::exposure::insert_manifest(
        store,
        &ManifestRow {
            id: "man_1".into(),
            tenant_id: "a".into(),
            session_id: "ses_1".into(),
            lease_id: "lea_1".into(),
            lease_expires_at: 10,
            issued_at: 0,
            manifest: "not a manifest".into(),
            document: "{}".into(),
            signature: "".into(),
        },
        Default::default(),
    )
    .await
    .unwrap();
    let fresh = cache::fresh(store).await.unwrap();
    let grant = cache::grant(store, &fresh, "a", "man_1")
        .await
        .unwrap()
        .unwrap();
    assert!(grant.session.as_ref().unwrap().revoked_at.is_none());
    assert!(
        grant.manifest.is_none(),
        "an unparsable manifest is no grant"
    );
    assert!(matches!(grant.allowlist, Ok(None)));
    assert!(
        cache::grant(store, &fresh, "b", "man_1")
            .await
            .unwrap()
            .is_none()
    );
    let fresh = cache::fresh(store).await.unwrap();
    let same = cache::grant(store, &fresh, "a", "man_1")
        .await
        .unwrap()
        .unwrap();
    assert!(Arc::ptr_eq(&grant, &same));
    assert!(
        store::exposure::revoke_session(store, "a", "ses_1")
            .await
            .unwrap()
    );
    let fresh = cache::fresh(store).await.unwrap();
    let revoked = cache::grant(store, &fresh, "a", "man_1")
        .await
        .unwrap()
        .unwrap();
    assert!(revoked.session.as_ref().unwrap().revoked_at.is_some());

    // A token: noting its use keeps the entry, revoking it does not.
    let scopes = vec!["agent_tool_exposure:run".to_owned()];
    store::tokens::insert(
        store,
        NewToken {
            id: "tok_1",
            tenant_id: "a",
            actor_id: "agent",
            name: None,
            scopes: &scopes,
            secret_sha256: "hash-1",
            created_by: "operator",
            created_by_actor: "operator",
            expires_at: None,
            environments: &[],
        },
    )
    .await
    .unwrap();
    let fresh = cache::fresh(store).await.unwrap();
    let token = cache::token(store, &fresh, "hash-1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(token.row.id, "tok_1");
    assert!(token.last_used_at().is_none());
    store::tokens::touch(store, "tok_1").await.unwrap();
    let fresh = cache::fresh(store).await.unwrap();
    let touched = cache::token(store, &fresh, "hash-1")
        .await
        .unwrap()
        .unwrap();
    assert!(
        Arc::ptr_eq(&token, &touched),
        "last_used_at is not followed"
    );
    store::tokens::revoke(store, "a", "tok_1").await.unwrap();
    let fresh = cache::fresh(store).await.unwrap();
    let revoked = cache::token(store, &fresh, "hash-1")
        .await
        .unwrap()
        .unwrap();
    assert!(revoked.row.revoked_at.is_some());
    assert!(
        cache::token(store, &fresh, "hash-2")
            .await
            .unwrap()
            .is_none()
    );

    // A tool removed from the catalog.
    let removed = store::catalog::remove_missing(store, "a", "ups_1", &[])
        .await
        .unwrap();
    assert_eq!(removed, vec![tool.name.clone()]);
    let fresh = cache::fresh(store).await.unwrap();
    assert!(
        cache::tool(store, &fresh, "a", &tool.name)
            .await
            .unwrap()
            .is_none()
    );
}
on_both_backends!(the_read_cache_follows_every_change, read_cache);

/// Issue 5: rate buckets counted in the shared database: per tenant and bucket, per calendar
/// minute, never over-admitting under concurrency.
async fn rate_buckets(store: &Store) {
    use aperture_core::store::rate_buckets::take;
    let minute = 1_800_000_000_000_i64; // the start of a minute
    for _ in 0..3 {
        assert!(take(store, "a", "gh", 3, minute + 10).await.unwrap());
    }
    assert!(!take(store, "a", "gh", 3, minute + 20).await.unwrap());
    assert!(!take(store, "a", "gh", 3, minute + 59_999).await.unwrap());
    // Other buckets and other tenants count apart.
    assert!(take(store, "a", "slack", 3, minute + 30).await.unwrap());
    assert!(take(store, "b", "gh", 3, minute + 30).await.unwrap());
    // The next minute starts again; a node whose clock lags a minute counts against it and
    // never resets it.
    assert!(take(store, "a", "gh", 3, minute + 60_000).await.unwrap());
    assert!(take(store, "a", "gh", 3, minute + 50).await.unwrap());
    assert!(take(store, "a", "gh", 3, minute + 60_001).await.unwrap());
    assert!(!take(store, "a", "gh", 3, minute + 60).await.unwrap());
    assert!(!take(store, "a", "gh", 3, minute + 60_002).await.unwrap());

    // Fifty at once against a limit of ten: exactly ten pass.
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..50 {
        let store = store.clone();
        set.spawn(async move { take(&store, "a", "burst", 10, minute + 5).await.unwrap() });
    }
    let passed = set.join_all().await.into_iter().filter(|ok| *ok).count();
    assert_eq!(passed, 10);
}
on_both_backends!(rate_buckets_count_per_minute_across_callers, rate_buckets);

/// The embedded SQLite is built without memory statistics (`.cargo/config.toml`): with them,
/// every allocation and free of every connection takes one process-wide mutex, so the journal
/// writer's commits queue behind the background verifier's, the checkpointer's and the
/// readers' allocations.
#[tokio::test]
async fn the_embedded_sqlite_takes_no_lock_to_count_its_memory() {
    let db = crate::helpers::TestDb::new(crate::helpers::Db::Sqlite)
        .await
        .unwrap();
    let store = Store::connect(&db.url).await.unwrap();
    let without: i64 =
        sqlx::query_scalar("SELECT sqlite_compileoption_used('DEFAULT_MEMSTATUS=0')")
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(
        without, 1,
        "SQLite was built with SQLITE_DEFAULT_MEMSTATUS on"
    );
    store.close().await;
}
