//! Schema narrowing: the schema a tool is *advertised* with, derived from its own input schema
//! and the rule's invocation policy, and the validation of arguments against it.
//!
//! The advertised schema is the tool's schema with
//! 1. server-fixed arguments (including a pinned `connection_mode`, and the dry-run argument in
//!    `dry_run_only` mode) removed, and forbidden by `propertyNames`, so the agent literally
//!    cannot send them;
//! 2. `allowed_values` turned into (intersected) `enum`s;
//! 3. the `schema_overlay` merged in, each keyword taking the stricter of the two values and
//!    every original keyword kept, so the result can only accept less;
//! 4. a required, non-empty `idempotency_key` added when the policy requires idempotency.
//!
//! Arguments are validated against exactly this schema; the fixed arguments are then merged to
//! make the *effective* arguments, the ones `args_hash` covers and the tool receives.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use jsonschema::{Draft, Validator};
use serde_json::{Map, Value, json};

use crate::policy::InvocationPolicy;

/// The argument `requires_idempotency` adds.
pub const IDEMPOTENCY_KEY: &str = "idempotency_key";

/// Why a tool's schema cannot be narrowed by a policy (the tool is then not callable: fail
/// closed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NarrowError {
    /// The tool's input schema is not an object schema.
    #[error("the tool's input schema does not describe an object")]
    NotAnObjectSchema,
    /// A fixed argument's value is not accepted by the tool's own schema.
    #[error("fixed argument `{0}` is not accepted by the tool's schema")]
    FixedArgumentRejected(String),
    /// No allowed value survives the tool's own constraints.
    #[error("no allowed value of `{0}` is accepted by the tool's schema")]
    NoAllowedValue(String),
    /// The overlay contradicts the tool's schema (disjoint types, conflicting `const`).
    #[error("the schema overlay contradicts the tool's schema at {0}")]
    OverlayConflict(String),
    /// The tool's schema could not be compiled.
    #[error("the tool's input schema is invalid: {0}")]
    InvalidSchema(String),
}

/// The advertised schema and what the server adds to each call.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Narrowed {
    /// The schema advertised in the manifest; arguments are validated against it.
    pub schema: Value,
    /// What the server adds to each call.
    #[serde(flatten)]
    pub narrowing: Narrowing,
}

impl std::ops::Deref for Narrowed {
    type Target = Narrowing;

    fn deref(&self) -> &Narrowing {
        &self.narrowing
    }
}

/// What the server adds to each call of a narrowed tool (the schema itself is the manifest
/// entry's advertised input schema).
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize, serde::Deserialize)]
pub struct Narrowing {
    /// Arguments the server sets on every call.
    pub fixed_arguments: Map<String, Value>,
    /// Whether `idempotency_key` was added by the policy (and so is not the tool's own argument:
    /// it is stripped before the call reaches the tool).
    pub adds_idempotency_key: bool,
}

impl Narrowing {
    /// The effective arguments: what the agent sent plus the fixed arguments.
    pub fn effective_arguments(&self, arguments: &Map<String, Value>) -> Map<String, Value> {
        let mut effective = arguments.clone();
        for (k, v) in &self.fixed_arguments {
            effective.insert(k.clone(), v.clone());
        }
        effective
    }

    /// The arguments the tool itself receives: the effective ones without a policy-added
    /// idempotency key.
    pub fn upstream_arguments(&self, effective: &Map<String, Value>) -> Map<String, Value> {
        let mut args = effective.clone();
        if self.adds_idempotency_key {
            args.remove(IDEMPOTENCY_KEY);
        }
        args
    }
}

/// Compiles `schema` as JSON Schema 2020-12 (MCP's default dialect).
pub fn compile(schema: &Value) -> Result<Validator, String> {
    jsonschema::options()
        .with_draft(Draft::Draft202012)
        .build(schema)
        .map_err(|e| e.to_string())
}

fn accepts(schema: &Value, value: &Value) -> Result<bool, NarrowError> {
    compile(schema)
        .map(|v| v.is_valid(value))
        .map_err(NarrowError::InvalidSchema)
}

/// A property's schema with the root's definitions beside it, so `$ref`s inside still resolve.
fn property_schema(root: &Map<String, Value>, prop: &Value) -> Value {
    let mut schema = match prop {
        Value::Object(m) => m.clone(),
        Value::Bool(b) => return Value::Bool(*b),
        _ => Map::new(),
    };
    for defs in ["$defs", "definitions"] {
        if let Some(d) = root.get(defs) {
            schema.entry(defs.to_owned()).or_insert_with(|| d.clone());
        }
    }
    Value::Object(schema)
}

fn forbids_additional(root: &Map<String, Value>) -> bool {
    root.get("additionalProperties") == Some(&Value::Bool(false))
}

/// Narrows `input_schema` by `policy` (and `extra_fixed`, e.g. the dry-run argument).
pub fn narrow(
    input_schema: &Value,
    policy: Option<&InvocationPolicy>,
    extra_fixed: &Map<String, Value>,
) -> Result<Narrowed, NarrowError> {
    narrow_owned(input_schema.clone(), policy, extra_fixed)
}

/// [`narrow`], taking the tool's schema by value: a tool the policy leaves as it is (no
/// invocation policy, nothing fixed) is advertised with its own schema, moved, not copied.
pub fn narrow_owned(
    input_schema: Value,
    policy: Option<&InvocationPolicy>,
    extra_fixed: &Map<String, Value>,
) -> Result<Narrowed, NarrowError> {
    let Value::Object(schema) = input_schema else {
        return Err(NarrowError::NotAnObjectSchema);
    };
    if schema.get("type").is_some_and(|t| t != "object") {
        return Err(NarrowError::NotAnObjectSchema);
    }
    if policy.is_none() && extra_fixed.is_empty() {
        return finish(schema, Map::new(), false);
    }
    let original = &schema.clone();
    let mut schema = schema;
    let mut fixed = extra_fixed.clone();
    if let Some(p) = policy {
        for (k, v) in &p.fixed_arguments {
            fixed.insert(k.clone(), v.clone());
        }
        if let Some(mode) = &p.connection_mode {
            fixed.insert("connection_mode".into(), Value::String(mode.clone()));
        }
    }

    // 1. Fixed arguments: check them against the tool, then take them out of the agent's hands.
    if !fixed.is_empty() {
        let props = original.get("properties").and_then(Value::as_object);
        for (k, v) in &fixed {
            let accepted = match props.and_then(|p| p.get(k)) {
                Some(prop) => accepts(&property_schema(original, prop), v)?,
                None => !forbids_additional(original),
            };
            if !accepted {
                return Err(NarrowError::FixedArgumentRejected(k.clone()));
            }
        }
        if let Some(Value::Object(props)) = schema.get_mut("properties") {
            for k in fixed.keys() {
                props.remove(k);
            }
        }
        if let Some(Value::Array(required)) = schema.get_mut("required") {
            required.retain(|r| r.as_str().is_none_or(|r| !fixed.contains_key(r)));
        }
        let forbid = json!({"not": {"enum": fixed.keys().collect::<Vec<_>>()}});
        add_constraint(&mut schema, "propertyNames", forbid);
    }

    if let Some(p) = policy {
        // 2. Allowed values.
        for (k, values) in &p.allowed_values {
            let current = schema.get("properties").and_then(|ps| ps.get(k)).cloned();
            let prop_schema = match &current {
                Some(prop) => property_schema(original, prop),
                None if forbids_additional(original) => {
                    return Err(NarrowError::NoAllowedValue(k.clone()));
                }
                None => json!({}),
            };
            let validator = compile(&prop_schema).map_err(NarrowError::InvalidSchema)?;
            let kept: Vec<Value> = values
                .iter()
                .filter(|v| validator.is_valid(v))
                .cloned()
                .collect();
            if kept.is_empty() {
                return Err(NarrowError::NoAllowedValue(k.clone()));
            }
            let props = schema
                .entry("properties")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(props) = props {
                let entry = props.entry(k.clone()).or_insert_with(|| json!({}));
                match entry {
                    Value::Object(m) => {
                        m.insert("enum".into(), Value::Array(kept));
                    }
                    other => *other = json!({"enum": kept}),
                }
            }
        }

        // 3. Overlay.
        if let Some(overlay) = &p.schema_overlay {
            let mut root = Value::Object(schema);
            merge(&mut root, overlay, "")?;
            schema = match root {
                Value::Object(m) => m,
                _ => return Err(NarrowError::NotAnObjectSchema),
            };
        }

        // 4. Idempotency.
        if p.requires_idempotency {
            let had = original
                .get("properties")
                .and_then(|ps| ps.get(IDEMPOTENCY_KEY))
                .is_some();
            let props = schema
                .entry("properties")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(props) = props {
                let entry = props.entry(IDEMPOTENCY_KEY).or_insert_with(|| json!({}));
                merge(
                    entry,
                    &json!({"type": "string", "minLength": 1}),
                    IDEMPOTENCY_KEY,
                )?;
            }
            let required = schema.entry("required").or_insert_with(|| json!([]));
            if let Value::Array(r) = required
                && !r.iter().any(|x| x == IDEMPOTENCY_KEY)
            {
                r.push(json!(IDEMPOTENCY_KEY));
            }
            return finish(schema, fixed, !had);
        }
    }
    finish(schema, fixed, false)
}

fn finish(
    schema: Map<String, Value>,
    fixed: Map<String, Value>,
    adds_key: bool,
) -> Result<Narrowed, NarrowError> {
    // Not compiled here: the manifest build asks the [`ValidatorCache`] for each listed tool's
    // validator, which compiles each distinct advertised schema once for all sessions.
    let schema = Value::Object(schema);
    Ok(Narrowed {
        schema,
        narrowing: Narrowing {
            fixed_arguments: fixed,
            adds_idempotency_key: adds_key,
        },
    })
}

/// Adds `key: value` to `schema`, or, when `key` is already constrained, as one more `allOf`
/// member, so both constraints hold.
fn add_constraint(schema: &mut Map<String, Value>, key: &str, value: Value) {
    if schema.contains_key(key) {
        let all = schema.entry("allOf").or_insert_with(|| json!([]));
        if let Value::Array(a) = all {
            a.push(json!({ key: value }));
        }
    } else {
        schema.insert(key.to_owned(), value);
    }
}

fn type_set(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(a) => a
            .iter()
            .filter_map(|x| x.as_str().map(str::to_owned))
            .collect(),
        _ => vec![],
    }
}

/// Merges an overlay into a schema, keeping every original keyword and taking the stricter
/// value where both speak.
fn merge(target: &mut Value, overlay: &Value, at: &str) -> Result<(), NarrowError> {
    let Value::Object(over) = overlay else {
        return Ok(());
    };
    if *target == Value::Bool(true) {
        *target = json!({});
    }
    let Value::Object(t) = target else {
        // `false` accepts nothing already; nothing can narrow it further.
        return Ok(());
    };
    for (key, ov) in over {
        let here = if at.is_empty() {
            key.clone()
        } else {
            format!("{at}.{key}")
        };
        match key.as_str() {
            "type" => {
                let new = type_set(ov);
                let merged: Vec<String> = match t.get("type") {
                    None => new,
                    Some(old) => {
                        let old = type_set(old);
                        let mut out = Vec::new();
                        for n in &new {
                            // `integer` narrows `number`.
                            if old.contains(n)
                                || (n == "integer" && old.iter().any(|o| o == "number"))
                            {
                                out.push(n.clone());
                            }
                        }
                        out
                    }
                };
                match merged.as_slice() {
                    [] => return Err(NarrowError::OverlayConflict(here)),
                    [one] => {
                        t.insert("type".into(), json!(one));
                    }
                    many => {
                        t.insert("type".into(), json!(many));
                    }
                }
            }
            "properties" => {
                let Value::Object(ops) = ov else { continue };
                let props = t.entry("properties").or_insert_with(|| json!({}));
                if let Value::Object(props) = props {
                    for (name, sub) in ops {
                        let entry = props.entry(name.clone()).or_insert_with(|| json!({}));
                        merge(entry, sub, &format!("{here}.{name}"))?;
                    }
                }
            }
            "items" => {
                let entry = t.entry("items").or_insert_with(|| json!({}));
                merge(entry, ov, &here)?;
            }
            "required" => {
                let req = t.entry("required").or_insert_with(|| json!([]));
                if let (Value::Array(r), Value::Array(add)) = (req, ov) {
                    for a in add {
                        if !r.contains(a) {
                            r.push(a.clone());
                        }
                    }
                }
            }
            "enum" => {
                let Value::Array(new) = ov else { continue };
                let kept: Vec<Value> = match t.get("enum") {
                    Some(Value::Array(old)) => {
                        new.iter().filter(|v| old.contains(v)).cloned().collect()
                    }
                    _ => new.clone(),
                };
                if kept.is_empty() {
                    return Err(NarrowError::OverlayConflict(here));
                }
                t.insert("enum".into(), Value::Array(kept));
            }
            "const" => match t.get("const") {
                Some(old) if old != ov => return Err(NarrowError::OverlayConflict(here)),
                _ => {
                    t.insert("const".into(), ov.clone());
                }
            },
            "additionalProperties" | "uniqueItems" => {
                t.insert(key.clone(), ov.clone());
            }
            "minLength" | "minItems" | "minProperties" | "minimum" | "exclusiveMinimum" => {
                stricter(t, key, ov, |new, old| new > old);
            }
            "maxLength" | "maxItems" | "maxProperties" | "maximum" | "exclusiveMaximum" => {
                stricter(t, key, ov, |new, old| new < old);
            }
            "pattern" | "format" | "multipleOf" => match t.get(key) {
                Some(old) if old != ov => add_constraint(t, key, ov.clone()),
                Some(_) => {}
                None => {
                    t.insert(key.clone(), ov.clone());
                }
            },
            "title" | "description" => {
                t.insert(key.clone(), ov.clone());
            }
            // Anything else was refused when the policy was written; ignoring it here can only
            // leave the schema as strict as the tool made it.
            _ => {}
        }
    }
    Ok(())
}

fn stricter(
    t: &mut Map<String, Value>,
    key: &str,
    new: &Value,
    is_stricter: impl Fn(f64, f64) -> bool,
) {
    let Some(n) = new.as_f64() else { return };
    match t.get(key).and_then(Value::as_f64) {
        Some(old) if !is_stricter(n, old) => {}
        _ => {
            t.insert(key.to_owned(), new.clone());
        }
    }
}

/// Compiled validators of advertised schemas, keyed by `schemaHash`, each built on first use
/// (the first manifest that lists the schema), shared by every later manifest and call.
#[derive(Debug, Default)]
pub struct ValidatorCache {
    validators: RwLock<HashMap<String, Arc<Validator>>>,
}

/// Most validators kept; past that the cache starts over (schemas are few in practice).
const CACHE_LIMIT: usize = 10_000;

impl ValidatorCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many validators are compiled and kept.
    pub fn len(&self) -> usize {
        self.validators.read().map_or(0, |m| m.len())
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The validator of `schema`, whose hash is `hash`.
    pub fn get(&self, hash: &str, schema: &Value) -> Result<Arc<Validator>, String> {
        if let Ok(map) = self.validators.read()
            && let Some(v) = map.get(hash)
        {
            return Ok(v.clone());
        }
        let validator = Arc::new(compile(schema)?);
        if let Ok(mut map) = self.validators.write() {
            if map.len() >= CACHE_LIMIT {
                map.clear();
            }
            map.insert(hash.to_owned(), validator.clone());
        }
        Ok(validator)
    }

    /// Validates `instance`; the error lists at most five problems, each with its JSON pointer.
    pub fn validate(&self, hash: &str, schema: &Value, instance: &Value) -> Result<(), String> {
        let validator = self.get(hash, schema)?;
        if validator.is_valid(instance) {
            return Ok(());
        }
        let problems: Vec<String> = validator
            .iter_errors(instance)
            .take(5)
            .map(|e| {
                let at = e.instance_path().to_string();
                format!("{}: {}", if at.is_empty() { "/".to_owned() } else { at }, e)
            })
            .collect();
        Err(problems.join("; "))
    }
}

#[cfg(test)]
#[path = "narrow_tests.rs"]
mod tests;
