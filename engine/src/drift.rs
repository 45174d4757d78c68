//! Drift triage: what kind of change an upstream made to a tool, against the last definition the
//! tenant accepted (CONTRACT §14's classes). Rug pulls rewrite a tool after it was trusted; the
//! classes say what was rewritten so that a tenant can hold the risky kinds for review.
//!
//! - [`classify`]: every class a change falls into, in [`DriftClass`] order.
//! - [`flags`]: the risky content a definition carries at all (for a tool seen the first time).
//! - [`classify_item`] and [`item_flags`]: the same over the text of resources, resource
//!   templates and prompts.
//! - [`schema_relation`]: whether one input schema accepts more, fewer or other arguments than
//!   another (or says other things about them: a changed `default` or `examples` is "other"). It
//!   is conservative: it says `Wider` or `Narrower` only when every keyword that differs moves
//!   that way, so a widened schema is never called narrowed (property-tested).
//! - [`reveal_hidden`]: a text with its hidden characters made visible, for the diff an admin
//!   reads.
//!
//! [`classify`] and [`flags`] look for risky content (instructions, hidden characters,
//! addresses) in every string of the definition, member names included: a client may hand any
//! of it to a model, so a string left unread would be where an upstream hides what it means the
//! model to read.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::descriptor::ToolDescriptor;

/// A kind of change (CONTRACT §14).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriftClass {
    /// The title changed (`title` or `annotations.title`).
    Title,
    /// The description's text changed, or a text inside the schemas (a parameter's description
    /// or title): everything a model reads as prose.
    Description,
    /// Instruction-like text (addressed to the model) appeared in any string of the definition.
    InstructionsAdded,
    /// Zero-width, bidirectional-control or tag characters appeared in any string of the
    /// definition.
    HiddenCharacters,
    /// URLs or e-mail addresses appeared in any string of the definition.
    UrlsAdded,
    /// An annotation moved towards less safe (`readOnlyHint` or `idempotentHint` off,
    /// `destructiveHint` or `openWorldHint` on).
    AnnotationsWeakened,
    /// The input schema accepts more than before (and nothing less).
    InputWidened,
    /// The input schema accepts less than before (and nothing more).
    InputNarrowed,
    /// The input schema changed in a way that is neither, including its non-validating keywords
    /// other than prose (`default`, `examples`, `$comment`, `deprecated`, `readOnly`,
    /// `writeOnly`): a default decides what a call does when the argument is left out, and
    /// examples and comments steer the arguments a model writes.
    InputChanged,
    /// The output schema changed (anything but the text of its titles and descriptions).
    OutputChanged,
    /// The tool is gone.
    Removed,
}

impl DriftClass {
    /// Every class, in order.
    pub const ALL: [DriftClass; 11] = [
        Self::Title,
        Self::Description,
        Self::InstructionsAdded,
        Self::HiddenCharacters,
        Self::UrlsAdded,
        Self::AnnotationsWeakened,
        Self::InputWidened,
        Self::InputNarrowed,
        Self::InputChanged,
        Self::OutputChanged,
        Self::Removed,
    ];

    /// The contract's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Title => "title",
            Self::Description => "description",
            Self::InstructionsAdded => "instructions_added",
            Self::HiddenCharacters => "hidden_characters",
            Self::UrlsAdded => "urls_added",
            Self::AnnotationsWeakened => "annotations_weakened",
            Self::InputWidened => "input_widened",
            Self::InputNarrowed => "input_narrowed",
            Self::InputChanged => "input_changed",
            Self::OutputChanged => "output_changed",
            Self::Removed => "removed",
        }
    }

    /// From [`DriftClass::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// What a tenant does with a change of one class: let it into manifests at once, or hold the
/// tool for an admin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// The changed definition enters manifests at once.
    Accept,
    /// The tool is left out of manifests until an admin accepts the change.
    Hold,
}

impl Action {
    /// The contract's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Accept => "accept",
            Self::Hold => "hold",
        }
    }
}

/// A tenant's drift triage (`GET`/`PUT /catalog/drift`): an [`Action`] per class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    actions: [Action; 11],
}

impl Default for Settings {
    /// Hold everything except title-only changes.
    fn default() -> Self {
        let mut actions = [Action::Hold; 11];
        actions[DriftClass::Title as usize] = Action::Accept;
        Self { actions }
    }
}

/// A problem with a drift setting, at a path of the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingError {
    /// The document's key (a class), or the empty path for the document itself.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl Settings {
    /// What the tenant does with `class`.
    pub fn action(&self, class: DriftClass) -> Action {
        self.actions[class as usize]
    }

    /// Sets what the tenant does with `class`.
    pub fn set(&mut self, class: DriftClass, action: Action) {
        self.actions[class as usize] = action;
    }

    /// Whether a change of `classes` holds the tool: when any of them is held. A change of no
    /// class (nothing a model or caller reads changed) never does.
    pub fn holds(&self, classes: &[DriftClass]) -> bool {
        classes.iter().any(|c| self.action(*c) == Action::Hold)
    }

    /// Every class with its action, as the document `{"<class>": "accept" | "hold"}`.
    pub fn to_json(&self) -> Value {
        Value::Object(
            DriftClass::ALL
                .into_iter()
                .map(|c| (c.as_str().to_owned(), Value::from(self.action(c).as_str())))
                .collect(),
        )
    }

    /// Reads a document `{"<class>": "accept" | "hold"}`; a class it leaves out keeps its
    /// default. Every unknown class or value is an error at its key.
    pub fn from_json(document: &Value) -> Result<Self, Vec<SettingError>> {
        let Value::Object(map) = document else {
            return Err(vec![SettingError {
                path: String::new(),
                message: "an object of classes, each \"accept\" or \"hold\"".into(),
            }]);
        };
        let mut settings = Self::default();
        let mut errors = Vec::new();
        for (key, value) in map {
            let Some(class) = DriftClass::parse(key) else {
                errors.push(SettingError {
                    path: key.clone(),
                    message: format!(
                        "not a drift class (one of {})",
                        DriftClass::ALL.map(DriftClass::as_str).join(", ")
                    ),
                });
                continue;
            };
            match value.as_str() {
                Some("accept") => settings.set(class, Action::Accept),
                Some("hold") => settings.set(class, Action::Hold),
                _ => errors.push(SettingError {
                    path: key.clone(),
                    message: "\"accept\" or \"hold\"".into(),
                }),
            }
        }
        if errors.is_empty() {
            Ok(settings)
        } else {
            Err(errors)
        }
    }
}

/// The parts of a tool an upstream defines (what drift can change).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Definition {
    /// `title` (or `annotations.title`).
    pub title: Option<String>,
    /// `description`.
    pub description: Option<String>,
    /// `inputSchema`.
    pub input_schema: Value,
    /// `outputSchema`.
    pub output_schema: Option<Value>,
    /// `annotations`.
    pub annotations: Option<Value>,
}

impl From<&ToolDescriptor> for Definition {
    fn from(t: &ToolDescriptor) -> Self {
        Self {
            title: t.title.clone(),
            description: t.description.clone(),
            input_schema: t.input_schema.clone(),
            output_schema: t.output_schema.clone(),
            annotations: t.annotations.clone(),
        }
    }
}

impl Definition {
    /// From the stored form `{"title"?, "description"?, "input_schema", "output_schema"?,
    /// "annotations"?}`.
    pub fn from_stored(stored: &Value) -> Self {
        let text = |key: &str| stored.get(key).and_then(Value::as_str).map(str::to_owned);
        Self {
            title: text("title"),
            description: text("description"),
            input_schema: stored.get("input_schema").cloned().unwrap_or(Value::Null),
            output_schema: stored.get("output_schema").cloned(),
            annotations: stored.get("annotations").cloned(),
        }
    }

    /// The stored form (members that are absent left out).
    pub fn to_stored(&self) -> Value {
        let mut d = Map::new();
        if let Some(t) = &self.title {
            d.insert("title".into(), Value::String(t.clone()));
        }
        if let Some(t) = &self.description {
            d.insert("description".into(), Value::String(t.clone()));
        }
        d.insert("input_schema".into(), self.input_schema.clone());
        if let Some(o) = &self.output_schema {
            d.insert("output_schema".into(), o.clone());
        }
        if let Some(a) = &self.annotations {
            d.insert("annotations".into(), a.clone());
        }
        Value::Object(d)
    }

    /// `tool` with this definition in place of its own (name, version and descriptor kept).
    pub fn applied_to(&self, tool: &ToolDescriptor) -> ToolDescriptor {
        ToolDescriptor {
            title: self.title.clone(),
            description: self.description.clone(),
            input_schema: self.input_schema.clone(),
            output_schema: self.output_schema.clone(),
            annotations: self.annotations.clone(),
            ..tool.clone()
        }
    }

    /// Both places a title can be given. A client shows `title` when there is one and
    /// `annotations.title` otherwise, but either may reach a model, so a change of either one is
    /// a title change, also when the other hides it from display.
    fn titles(&self) -> (Option<&str>, Option<&Value>) {
        (
            self.title.as_deref(),
            self.annotations.as_ref().and_then(|a| a.get("title")),
        )
    }

    /// The prose of this definition: the description and the descriptions and titles inside
    /// the schemas (what [`DriftClass::Description`] is about).
    fn texts(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self.description.iter().map(String::as_str).collect();
        schema_texts(&self.input_schema, &mut out);
        if let Some(output) = &self.output_schema {
            schema_texts(output, &mut out);
        }
        out
    }

    /// Every string of this definition, member names included: where the detectors look, since
    /// a client may pass any of it to a model.
    fn strings(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self
            .title
            .iter()
            .chain(&self.description)
            .map(String::as_str)
            .collect();
        for value in [
            self.annotations.as_ref(),
            Some(&self.input_schema),
            self.output_schema.as_ref(),
        ]
        .into_iter()
        .flatten()
        {
            every_string(value, &mut out);
        }
        out
    }
}

/// Every string in `value` at any depth, object member names included. The one exception is a
/// `$schema` naming a published JSON Schema meta-schema: generated schemas carry it, and as a
/// fixed string it can hold no instruction or hidden character, while flagging its URL would
/// flag most tools and teach admins to ignore the flag. Any other `$schema` is read.
fn every_string<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| every_string(v, out)),
        Value::Object(map) => {
            for (k, v) in map {
                if k == "$schema" && v.as_str().is_some_and(is_meta_schema) {
                    continue;
                }
                out.push(k);
                every_string(v, out);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// The URIs of the published JSON Schema meta-schemas (drafts 4 to 2020-12), exactly.
fn is_meta_schema(uri: &str) -> bool {
    const META_SCHEMAS: &[&str] = &[
        "http://json-schema.org/draft-04/schema",
        "http://json-schema.org/draft-06/schema",
        "http://json-schema.org/draft-07/schema",
        "http://json-schema.org/schema",
        "https://json-schema.org/draft/2019-09/schema",
        "https://json-schema.org/draft/2020-12/schema",
    ];
    let uri = uri.strip_suffix('#').unwrap_or(uri);
    META_SCHEMAS.contains(&uri)
}

fn schema_texts<'a>(schema: &'a Value, out: &mut Vec<&'a str>) {
    match schema {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("description" | "title", Value::String(s)) => out.push(s),
                    _ => schema_texts(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| schema_texts(v, out)),
        _ => {}
    }
}

/// The classes of the change from `accepted` (the last definition the tenant accepted) to
/// `current` (`None`: the upstream no longer lists the tool). Empty when nothing a model or a
/// caller sees changed.
pub fn classify(accepted: &Definition, current: Option<&Definition>) -> Vec<DriftClass> {
    let Some(current) = current else {
        return vec![DriftClass::Removed];
    };
    let mut classes = BTreeSet::new();
    if accepted.titles() != current.titles() {
        classes.insert(DriftClass::Title);
    }
    if accepted.description != current.description || accepted.texts() != current.texts() {
        classes.insert(DriftClass::Description);
    }
    let (before, after) = (accepted.strings(), current.strings());
    classes.extend(detected_added(&before, &after));
    if annotations_weakened(accepted.annotations.as_ref(), current.annotations.as_ref()) {
        classes.insert(DriftClass::AnnotationsWeakened);
    }
    match schema_relation(&accepted.input_schema, &current.input_schema) {
        Relation::Equal => {}
        Relation::Wider => {
            classes.insert(DriftClass::InputWidened);
        }
        Relation::Narrower => {
            classes.insert(DriftClass::InputNarrowed);
        }
        Relation::Incomparable => {
            classes.insert(DriftClass::InputChanged);
        }
    }
    if strip_prose(accepted.output_schema.as_ref()) != strip_prose(current.output_schema.as_ref()) {
        classes.insert(DriftClass::OutputChanged);
    }
    classes.into_iter().collect()
}

/// The risky content `definition` carries at all (instruction-like text, hidden characters,
/// URLs or e-mail addresses, in any of its strings), as the classes a change adding it would
/// get: what a tool seen the first time is flagged with.
pub fn flags(definition: &Definition) -> Vec<DriftClass> {
    detected(&definition.strings())
}

/// A detector of risky content: what it finds in a text.
type Detector = fn(&str) -> BTreeSet<String>;

/// The detectors of risky content, each with the class its findings give.
const DETECTORS: [(DriftClass, Detector); 3] = [
    (DriftClass::InstructionsAdded, instruction_markers),
    (DriftClass::HiddenCharacters, hidden_characters),
    (DriftClass::UrlsAdded, addresses),
];

/// The classes of the detectors that find something in `texts`.
fn detected(texts: &[&str]) -> Vec<DriftClass> {
    DETECTORS
        .iter()
        .filter(|(_, find)| texts.iter().any(|t| !find(t).is_empty()))
        .map(|(class, _)| *class)
        .collect()
}

/// The classes of the detectors that find something in `after` they do not find in `before`.
fn detected_added<'a>(
    before: &'a [&str],
    after: &'a [&str],
) -> impl Iterator<Item = DriftClass> + 'a {
    DETECTORS
        .iter()
        .filter(|(_, find)| !added(before, after, *find).is_empty())
        .map(|(class, _)| *class)
}

/// The classes of the change of a resource, resource template or prompt (its definition as
/// listed) from `accepted` to `current`: drift triage over their text. `title` when `title`,
/// `name` (of a resource or template: what a client shows) or `annotations.title` changed;
/// `description` when its description or the prose of a prompt's arguments changed; the three
/// detectors over every string but its URI or URI template (the item's identity, which cannot
/// change under one key); `input_changed` when a prompt's arguments changed otherwise (names,
/// `required`). Anything else (a MIME type, a size) is no class: nothing a model reads as
/// prose or a caller sends.
pub fn classify_item(accepted: &Value, current: &Value) -> Vec<DriftClass> {
    let mut classes = BTreeSet::new();
    // A prompt's `name` is its key; a resource's or template's is what a client shows.
    let is_prompt = |v: &Value| v.get("uri").is_none() && v.get("uriTemplate").is_none();
    let shown = |v: &Value| {
        (
            v.get("title").cloned(),
            v.get("name").cloned().filter(|_| !is_prompt(v)),
            v.get("annotations").and_then(|a| a.get("title")).cloned(),
        )
    };
    if shown(accepted) != shown(current) {
        classes.insert(DriftClass::Title);
    }
    let prose = |v: &Value| {
        let mut out: Vec<String> = v
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .into_iter()
            .collect();
        if let Some(arguments) = v.get("arguments") {
            let mut texts = Vec::new();
            schema_texts(arguments, &mut texts);
            out.extend(texts.into_iter().map(str::to_owned));
        }
        out
    };
    if prose(accepted) != prose(current) {
        classes.insert(DriftClass::Description);
    }
    let (before, after) = (item_strings(accepted), item_strings(current));
    classes.extend(detected_added(&before, &after));
    if strip_prose(accepted.get("arguments")) != strip_prose(current.get("arguments")) {
        classes.insert(DriftClass::InputChanged);
    }
    classes.into_iter().collect()
}

/// The risky content a resource, template or prompt definition carries at all (as
/// [`flags`] for tools), its URI or URI template left out.
pub fn item_flags(definition: &Value) -> Vec<DriftClass> {
    detected(&item_strings(definition))
}

/// Every string of an item's definition, member names included, but the value of its top-level
/// `uri` or `uriTemplate` (its identity: a resource at `https://…` is not a URL added to text).
fn item_strings(definition: &Value) -> Vec<&str> {
    let mut out = Vec::new();
    match definition {
        Value::Object(map) => {
            for (k, v) in map {
                out.push(k.as_str());
                if k != "uri" && k != "uriTemplate" {
                    every_string(v, &mut out);
                }
            }
        }
        other => every_string(other, &mut out),
    }
    out
}

/// What `find` finds in `after` and not in `before`.
fn added(before: &[&str], after: &[&str], find: fn(&str) -> BTreeSet<String>) -> BTreeSet<String> {
    let old: BTreeSet<String> = before.iter().flat_map(|t| find(t)).collect();
    after
        .iter()
        .flat_map(|t| find(t))
        .filter(|f| !old.contains(f))
        .collect()
}

/// Whether `c` is hidden: zero-width characters, joiners, the BOM, bidirectional controls,
/// invisible separators and Unicode tag characters.
pub fn is_hidden(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
        | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2064}'
        | '\u{2066}'..='\u{206F}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FEFF}' | '\u{FFA0}'
        | '\u{E0000}'..='\u{E007F}')
}

fn hidden_characters(text: &str) -> BTreeSet<String> {
    text.chars()
        .filter(|c| is_hidden(*c))
        .map(|c| format!("U+{:04X}", u32::from(c)))
        .collect()
}

/// `text` with every hidden character written as `⟨U+XXXX⟩`.
pub fn reveal_hidden(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if is_hidden(c) {
            out.push_str(&format!("⟨U+{:04X}⟩", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// URLs (`scheme://…`, `www.…`) and e-mail addresses in `text`, lowercased.
fn addresses(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for token in text.split(|c: char| c.is_whitespace() || "\"'<>()[]{}`,;".contains(c)) {
        let token = token.trim_end_matches(['.', ':', '!', '?']);
        let lower = token.to_lowercase();
        let url = lower.find("://").is_some_and(|i| {
            i > 0
                && lower[..i]
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
                && lower.len() > i + 3
        }) || lower.starts_with("www.");
        let email = lower.split_once('@').is_some_and(|(user, domain)| {
            !user.is_empty()
                && domain.contains('.')
                && !domain.starts_with('.')
                && !domain.ends_with('.')
                && !domain.contains('@')
        });
        if url || email {
            out.insert(lower);
        }
    }
    out
}

/// Phrases addressed to the model rather than describing the tool: instructions to act before or
/// instead of answering, to keep something from the user, to read secrets or send data away.
const INSTRUCTION_MARKERS: &[&str] = &[
    "ignore previous",
    "ignore all previous",
    "ignore the above",
    "disregard",
    "before answering",
    "before responding",
    "before using",
    "before calling",
    "before you",
    "you must",
    "you should always",
    "always call",
    "always use",
    "always run",
    "do not tell",
    "don't tell",
    "do not mention",
    "don't mention",
    "do not inform",
    "without telling",
    "without asking",
    "the user must not",
    "system prompt",
    "<important>",
    "<instructions>",
    "[instructions]",
    "instead of",
    "read ~/",
    "~/.ssh",
    "id_rsa",
    ".env",
    "api key",
    "password",
    "private key",
    "send it to",
    "send them to",
    "send the",
    "upload",
    "exfiltrate",
    "curl ",
    "wget ",
];

fn instruction_markers(text: &str) -> BTreeSet<String> {
    // Hidden characters and case must not hide a phrase.
    let folded: String = text
        .chars()
        .filter(|c| !is_hidden(*c))
        .collect::<String>()
        .to_lowercase();
    let squeezed = folded.split_whitespace().collect::<Vec<_>>().join(" ");
    INSTRUCTION_MARKERS
        .iter()
        .filter(|m| squeezed.contains(*m))
        .map(|m| (*m).to_owned())
        .collect()
}

/// Whether an annotation moved towards less safe. MCP's defaults when absent: `readOnlyHint`
/// false, `destructiveHint` true, `idempotentHint` false, `openWorldHint` true.
fn annotations_weakened(before: Option<&Value>, after: Option<&Value>) -> bool {
    let hint = |a: Option<&Value>, name: &str, default: bool| {
        a.and_then(|a| a.get(name))
            .and_then(Value::as_bool)
            .unwrap_or(default)
    };
    let off =
        |name: &str, default: bool| hint(before, name, default) && !hint(after, name, default);
    let on = |name: &str, default: bool| !hint(before, name, default) && hint(after, name, default);
    off("readOnlyHint", false)
        || off("idempotentHint", false)
        || on("destructiveHint", true)
        || on("openWorldHint", true)
}

/// How a new input schema relates to an old one, as sets of arguments they accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    /// The same constraints.
    Equal,
    /// Accepts everything the old one did, and more.
    Wider,
    /// Accepts only what the old one did, and less.
    Narrower,
    /// Neither (or not decidable here), or the same arguments with other things said about them
    /// (a `default`, `examples`, a `$comment`, `deprecated`, `readOnly`, `writeOnly`).
    Incomparable,
}

impl Relation {
    fn and(self, other: Relation) -> Relation {
        match (self, other) {
            (Relation::Equal, r) | (r, Relation::Equal) => r,
            (a, b) if a == b => a,
            _ => Relation::Incomparable,
        }
    }

    fn flip(self) -> Relation {
        match self {
            Relation::Wider => Relation::Narrower,
            Relation::Narrower => Relation::Wider,
            r => r,
        }
    }
}

/// Whether member `key` with value `value` (absent: `None`) is prose a schema comparison leaves
/// to [`DriftClass::Description`]: a `title` or `description` that is a string (or absent), the
/// texts [`Definition::texts`] compares. Other non-validating keywords (`default`, `examples`,
/// `$comment`, `deprecated`, `readOnly`, `writeOnly`) are not: no other class would see a change
/// of them, and each tells a model or client something about the arguments.
fn is_prose(key: &str, value: Option<&Value>) -> bool {
    matches!(key, "title" | "description") && value.is_none_or(Value::is_string)
}

fn strip_prose(schema: Option<&Value>) -> Option<Value> {
    fn strip(v: &Value) -> Value {
        match v {
            Value::Object(map) => Value::Object(
                map.iter()
                    .filter(|(k, v)| !is_prose(k, Some(v)))
                    .map(|(k, v)| (k.clone(), strip(v)))
                    .collect(),
            ),
            Value::Array(items) => Value::Array(items.iter().map(strip).collect()),
            other => other.clone(),
        }
    }
    schema.map(strip)
}

/// How `new` relates to `old`. Conservative: keywords it does not know, changes it cannot
/// order, and changes of non-validating keywords other than prose (titles and descriptions that
/// are strings, left to [`DriftClass::Description`]) make the answer [`Relation::Incomparable`].
pub fn schema_relation(old: &Value, new: &Value) -> Relation {
    let (Value::Object(old), Value::Object(new)) = (old, new) else {
        return if strip_prose(Some(old)) == strip_prose(Some(new)) {
            Relation::Equal
        } else {
            Relation::Incomparable
        };
    };
    let mut rel = Relation::Equal;
    let keys: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    for key in keys {
        let (a, b) = (old.get(key), new.get(key));
        if a == b || (is_prose(key, a) && is_prose(key, b)) {
            continue;
        }
        let r = match key.as_str() {
            "type" => type_relation(a, b),
            "required" => set_relation(a, b, true),
            "enum" => set_relation(a, b, false),
            "const" => match (a, b) {
                (Some(_), None) => Relation::Wider,
                (None, Some(_)) => Relation::Narrower,
                _ => Relation::Incomparable,
            },
            "maxLength" | "maximum" | "exclusiveMaximum" | "maxItems" | "maxProperties" => {
                bound_relation(a, b, true)
            }
            "minLength" | "minimum" | "exclusiveMinimum" | "minItems" | "minProperties" => {
                bound_relation(a, b, false)
            }
            "pattern" | "format" | "multipleOf" | "uniqueItems" => match (a, b) {
                (Some(_), None) => Relation::Wider,
                (None, Some(_)) => Relation::Narrower,
                _ => Relation::Incomparable,
            },
            "items" => match (a, b) {
                (Some(a), Some(b)) => schema_relation(a, b),
                (Some(_), None) => Relation::Wider,
                (None, Some(_)) => Relation::Narrower,
                (None, None) => Relation::Equal,
            },
            "additionalProperties" => additional_relation(a, b),
            "properties" => Relation::Equal, // below, with additionalProperties in view
            _ => Relation::Incomparable,
        };
        rel = rel.and(r);
        if rel == Relation::Incomparable {
            return rel;
        }
    }
    rel.and(properties_relation(old, new))
}

fn properties_relation(old: &Map<String, Value>, new: &Map<String, Value>) -> Relation {
    let empty = Map::new();
    let props = |m: &Map<String, Value>| -> Map<String, Value> {
        m.get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty)
            .clone()
    };
    let (a, b) = (props(old), props(new));
    // What an undeclared property may be: anything (absent or `true`), nothing (`false`), or
    // a schema.
    let open = |m: &Map<String, Value>| match m.get("additionalProperties") {
        None | Some(Value::Bool(true)) => Some(true),
        Some(Value::Bool(false)) => Some(false),
        Some(_) => None,
    };
    let mut rel = Relation::Equal;
    for (name, schema) in &a {
        let r = match b.get(name) {
            Some(next) => schema_relation(schema, next),
            // Undeclared now: whatever `additionalProperties` of the new schema allows.
            None => match open(new) {
                Some(true) => Relation::Wider,
                Some(false) => Relation::Narrower,
                None => Relation::Incomparable,
            },
        };
        rel = rel.and(r);
    }
    for _ in b.keys().filter(|n| !a.contains_key(*n)) {
        let r = match open(old) {
            // Was forbidden, is allowed now (within its schema).
            Some(false) => Relation::Wider,
            // Was anything, is constrained now.
            Some(true) => Relation::Narrower,
            None => Relation::Incomparable,
        };
        rel = rel.and(r);
    }
    rel
}

fn additional_relation(a: Option<&Value>, b: Option<&Value>) -> Relation {
    let level = |v: Option<&Value>| match v {
        None | Some(Value::Bool(true)) => Some(1),
        Some(Value::Bool(false)) => Some(0),
        Some(_) => None,
    };
    match (level(a), level(b)) {
        (Some(x), Some(y)) if x == y => Relation::Equal,
        (Some(x), Some(y)) if y > x => Relation::Wider,
        (Some(_), Some(_)) => Relation::Narrower,
        _ => match (a, b) {
            (Some(a), Some(b)) => schema_relation(a, b),
            _ => Relation::Incomparable,
        },
    }
}

fn type_relation(a: Option<&Value>, b: Option<&Value>) -> Relation {
    let set = |v: Option<&Value>| -> Option<BTreeSet<String>> {
        match v? {
            Value::String(s) => Some([s.clone()].into()),
            Value::Array(items) => items
                .iter()
                .map(|i| i.as_str().map(str::to_owned))
                .collect(),
            _ => None,
        }
    };
    match (a, b) {
        (Some(_), None) => Relation::Wider,
        (None, Some(_)) => Relation::Narrower,
        _ => match (set(a), set(b)) {
            (Some(x), Some(y)) => inclusion(&x, &y),
            _ => Relation::Incomparable,
        },
    }
}

/// `x` → `y` as sets of allowed things: a superset is wider.
fn inclusion<T: Ord>(x: &BTreeSet<T>, y: &BTreeSet<T>) -> Relation {
    match (x.is_subset(y), y.is_subset(x)) {
        (true, true) => Relation::Equal,
        (true, false) => Relation::Wider,
        (false, true) => Relation::Narrower,
        (false, false) => Relation::Incomparable,
    }
}

/// `enum` (allowed values: more is wider; absent is everything) or `required` (demanded
/// members: more is narrower; absent is none).
fn set_relation(a: Option<&Value>, b: Option<&Value>, demands: bool) -> Relation {
    let set = |v: Option<&Value>| -> Option<BTreeSet<String>> {
        v?.as_array()
            .map(|items| items.iter().map(Value::to_string).collect())
    };
    if demands {
        let (x, y) = (
            set(a).or_else(|| a.is_none().then(BTreeSet::new)),
            set(b).or_else(|| b.is_none().then(BTreeSet::new)),
        );
        return match (x, y) {
            (Some(x), Some(y)) => inclusion(&x, &y).flip(),
            _ => Relation::Incomparable,
        };
    }
    match (a, b) {
        (Some(_), None) => Relation::Wider,
        (None, Some(_)) => Relation::Narrower,
        _ => match (set(a), set(b)) {
            (Some(x), Some(y)) => inclusion(&x, &y),
            _ => Relation::Incomparable,
        },
    }
}

/// An upper (`upper`) or lower bound: a looser bound, or none, is wider.
fn bound_relation(a: Option<&Value>, b: Option<&Value>, upper: bool) -> Relation {
    match (a.and_then(Value::as_f64), b.and_then(Value::as_f64), a, b) {
        (_, _, Some(_), None) => Relation::Wider,
        (_, _, None, Some(_)) => Relation::Narrower,
        (Some(x), Some(y), _, _) => {
            let looser = if upper { y > x } else { y < x };
            if x == y {
                Relation::Equal
            } else if looser {
                Relation::Wider
            } else {
                Relation::Narrower
            }
        }
        _ => Relation::Incomparable,
    }
}

#[cfg(test)]
#[path = "drift_tests.rs"]
mod tests;
