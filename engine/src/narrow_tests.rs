use super::*;
use proptest::prelude::*;
use serde_json::json;

fn search_tool() -> Value {
    json!({
        "type": "object",
        "properties": {
            "owner": {"type": "string"},
            "repo": {"type": "string", "maxLength": 100},
            "state": {"type": "string", "enum": ["open", "closed", "all"]},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100},
            "connection_mode": {"type": "string", "enum": ["primary", "read_replica"]},
            "labels": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["owner", "repo"]
    })
}

fn policy(v: Value) -> InvocationPolicy {
    serde_json::from_value(v).unwrap()
}

fn ok(schema: &Value, args: Value) -> bool {
    compile(schema).unwrap().is_valid(&args)
}

/// Seed: "a schema overlay that narrows the advertised schema so the agent literally cannot
/// request fields the policy forbids"
#[test]
fn overlay_forbids_fields() {
    let p = policy(
        json!({"schema_overlay": {"additionalProperties": false, "properties": {"limit": {"maximum": 10}}}}),
    );
    let n = narrow(&search_tool(), Some(&p), &Map::new()).unwrap();
    assert!(ok(
        &n.schema,
        json!({"owner": "a", "repo": "b", "limit": 10})
    ));
    assert!(!ok(
        &n.schema,
        json!({"owner": "a", "repo": "b", "limit": 11})
    ));
    assert!(!ok(
        &n.schema,
        json!({"owner": "a", "repo": "b", "extra": 1})
    ));
    // The stricter bound wins whichever side has it.
    let looser = policy(json!({"schema_overlay": {"properties": {"limit": {"maximum": 1000}}}}));
    let n = narrow(&search_tool(), Some(&looser), &Map::new()).unwrap();
    assert_eq!(n.schema["properties"]["limit"]["maximum"], json!(100));
}

/// Seed: "Invocation policy — fixed arguments …" and "A pinned connection_mode becomes a
/// server-fixed argument"
#[test]
fn fixed_arguments_and_connection_mode_leave_the_schema_and_are_merged() {
    let p =
        policy(json!({"fixed_arguments": {"owner": "acme"}, "connection_mode": "read_replica"}));
    let n = narrow(&search_tool(), Some(&p), &Map::new()).unwrap();
    assert!(n.schema["properties"].get("owner").is_none());
    assert!(n.schema["properties"].get("connection_mode").is_none());
    assert_eq!(n.schema["required"], json!(["repo"]));
    // The agent cannot send them itself.
    assert!(!ok(&n.schema, json!({"repo": "b", "owner": "evil"})));
    assert!(!ok(
        &n.schema,
        json!({"repo": "b", "connection_mode": "primary"})
    ));
    let args = json!({"repo": "b"});
    let effective = n.effective_arguments(args.as_object().unwrap());
    assert_eq!(
        Value::Object(effective),
        json!({"repo": "b", "owner": "acme", "connection_mode": "read_replica"})
    );
}

#[test]
fn fixed_values_the_tool_rejects_fail_closed() {
    let p = policy(json!({"connection_mode": "writer"}));
    assert_eq!(
        narrow(&search_tool(), Some(&p), &Map::new()),
        Err(NarrowError::FixedArgumentRejected("connection_mode".into()))
    );
    let closed = json!({"type": "object", "properties": {"a": {}}, "additionalProperties": false});
    let p = policy(json!({"fixed_arguments": {"b": 1}}));
    assert!(narrow(&closed, Some(&p), &Map::new()).is_err());
}

/// Seed: "allowed enum values"
#[test]
fn allowed_values_intersect_enums() {
    let p = policy(json!({"allowed_values": {"state": ["open", "merged"], "owner": ["acme", 7]}}));
    let n = narrow(&search_tool(), Some(&p), &Map::new()).unwrap();
    assert_eq!(n.schema["properties"]["state"]["enum"], json!(["open"]));
    assert_eq!(n.schema["properties"]["owner"]["enum"], json!(["acme"]));
    assert!(!ok(
        &n.schema,
        json!({"owner": "acme", "repo": "r", "state": "closed"})
    ));
    let none = policy(json!({"allowed_values": {"state": ["merged"]}}));
    assert_eq!(
        narrow(&search_tool(), Some(&none), &Map::new()),
        Err(NarrowError::NoAllowedValue("state".into()))
    );
}

/// Seed: "requires_idempotency adds and enforces a non-empty idempotency_key"
#[test]
fn idempotency_key_is_required_and_non_empty() {
    let p = policy(json!({"requires_idempotency": true}));
    let n = narrow(&search_tool(), Some(&p), &Map::new()).unwrap();
    assert!(n.adds_idempotency_key);
    assert!(!ok(&n.schema, json!({"owner": "a", "repo": "b"})));
    assert!(!ok(
        &n.schema,
        json!({"owner": "a", "repo": "b", "idempotency_key": ""})
    ));
    assert!(ok(
        &n.schema,
        json!({"owner": "a", "repo": "b", "idempotency_key": "k1"})
    ));
    let effective = n.effective_arguments(
        json!({"owner": "a", "repo": "b", "idempotency_key": "k1"})
            .as_object()
            .unwrap(),
    );
    assert!(
        n.upstream_arguments(&effective)
            .get(IDEMPOTENCY_KEY)
            .is_none()
    );
}

#[test]
fn contradictions_fail_closed() {
    let p = policy(json!({"schema_overlay": {"properties": {"limit": {"type": "string"}}}}));
    assert!(matches!(
        narrow(&search_tool(), Some(&p), &Map::new()),
        Err(NarrowError::OverlayConflict(_))
    ));
    assert_eq!(
        narrow(&json!({"type": "string"}), None, &Map::new()),
        Err(NarrowError::NotAnObjectSchema)
    );
}

#[test]
fn the_cache_compiles_once_and_reports_paths() {
    let cache = ValidatorCache::new();
    let schema = search_tool();
    let a = cache.get("h", &schema).unwrap();
    let b = cache.get("h", &schema).unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    let err = cache
        .validate(
            "h",
            &schema,
            &json!({"owner": "a", "repo": "b", "limit": 0}),
        )
        .unwrap_err();
    assert!(err.contains("/limit"), "{err}");
}

fn arb_policy() -> impl Strategy<Value = InvocationPolicy> {
    (
        prop::option::of(prop_oneof![Just(json!("acme")), Just(json!("other"))]),
        prop::option::of(proptest::sample::subsequence(
            vec!["open", "closed", "all", "merged"],
            1..4,
        )),
        prop::option::of(0i64..150),
        prop::option::of(0usize..120),
        any::<bool>(),
        any::<bool>(),
        prop::option::of(prop_oneof![Just("primary"), Just("read_replica")]),
    )
        .prop_map(|(owner, states, max_limit, max_repo, closed, idem, conn)| {
            let mut p = InvocationPolicy::default();
            if let Some(o) = owner {
                p.fixed_arguments.insert("owner".into(), o);
            }
            if let Some(s) = states {
                p.allowed_values
                    .insert("state".into(), s.into_iter().map(|x| json!(x)).collect());
            }
            let mut overlay = json!({"properties": {}});
            if let Some(m) = max_limit {
                overlay["properties"]["limit"] = json!({"maximum": m});
            }
            if let Some(m) = max_repo {
                overlay["properties"]["repo"] = json!({"maxLength": m});
            }
            if closed {
                overlay["additionalProperties"] = json!(false);
            }
            p.schema_overlay = Some(overlay);
            p.requires_idempotency = idem;
            p.connection_mode = conn.map(str::to_owned);
            p
        })
}

fn arb_args() -> impl Strategy<Value = Value> {
    (
        prop::option::of(prop_oneof![
            Just(json!("acme")),
            Just(json!(3)),
            Just(json!("x"))
        ]),
        prop::option::of("[a-z]{0,130}"),
        prop::option::of(prop_oneof![
            Just(json!("open")),
            Just(json!("closed")),
            Just(json!("merged")),
            Just(json!(1))
        ]),
        prop::option::of(-5i64..200),
        prop::option::of(prop_oneof![
            Just(json!("k")),
            Just(json!("")),
            Just(json!(5))
        ]),
        prop::option::of(prop_oneof![Just(json!("primary")), Just(json!("writer"))]),
        prop::option::of(Just(json!(true))),
    )
        .prop_map(|(owner, repo, state, limit, key, conn, extra)| {
            let mut m = Map::new();
            if let Some(v) = owner {
                m.insert("owner".into(), v);
            }
            if let Some(v) = repo {
                m.insert("repo".into(), json!(v));
            }
            if let Some(v) = state {
                m.insert("state".into(), v);
            }
            if let Some(v) = limit {
                m.insert("limit".into(), json!(v));
            }
            if let Some(v) = key {
                m.insert(IDEMPOTENCY_KEY.into(), v);
            }
            if let Some(v) = conn {
                m.insert("connection_mode".into(), v);
            }
            if let Some(v) = extra {
                m.insert("extra".into(), v);
            }
            Value::Object(m)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// A narrowed schema never accepts what the original rejects: whatever the agent may send
    /// under the narrowed schema, the effective arguments the tool receives are valid for the
    /// tool's own schema.
    #[test]
    fn narrowing_never_widens(p in arb_policy(), args in arb_args()) {
        let original = search_tool();
        let Ok(n) = narrow(&original, Some(&p), &Map::new()) else { return Ok(()) };
        if compile(&n.schema).unwrap().is_valid(&args) {
            let effective = n.effective_arguments(args.as_object().unwrap());
            let upstream = Value::Object(n.upstream_arguments(&effective));
            prop_assert!(compile(&original).unwrap().is_valid(&upstream), "narrowed accepted {args} but the tool rejects {upstream}");
        }
    }
}
