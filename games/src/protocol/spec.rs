//! Spec documents: the protocol id, and rule validation against declared parameters.
//!
//! A spec is a JSON object in the `spec.json` format of the Aigenora protocol reference:
//! `name`, `spec_version` ("1.0"), `type`, `messages`, `flow`, `rules` (text),
//! `parameters` (integer, boolean or enum, with `min`/`max` and an optional `default`).
//!
//! The **protocol id** is the reference's: SHA-256 (lowercase hex) of the *contract
//! subset*, serialized as Python's `json.dumps(subset, sort_keys=True,
//! ensure_ascii=False, separators=(",", ":"))` ([`super::specjson`]). The subset keeps
//! `messages`, `rules`, `choices`, `commit_reveal` and `timing` as they are; `parameters`
//! when it is an object, without the `default` of each entry; and `flow` reduced to what
//! changes the wire (`phases`, a non-default `mode`, and that mode's settings). A title, a
//! description or a default therefore never changes the id; a rule always does.
//!
//! [`hash_document`] hashes any JSON object, as `aigenora protocol hash` does, and only
//! warns about an unknown `spec_version`. [`Spec::load`], which makes a spec playable,
//! refuses one, and refuses parameter types it cannot check. Rules that a spec cannot
//! express (a win length bounded by the board, an odd best-of) stay with each game.
//!
//! Given rules are refused with a [`RuleError`]: the parameter and a [`RuleFault`]. It
//! becomes text (`rows:range`, the `bad_rules` detail) only where a [`Refusal`] is made.

use super::specjson::{self, SpecValue};
use crate::reason::{Reason, Refusal};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fmt;

/// The only `spec_version` this reader understands.
pub const SPEC_VERSION: &str = "1.0";

/// Why a spec document cannot be hashed or loaded.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("not valid JSON: {0}")]
    Json(#[from] specjson::ReadError),
    #[error("a spec must be a JSON object")]
    NotObject,
    #[error("unsupported spec_version {0} (supported: \"{SPEC_VERSION}\", a string)")]
    Version(String),
    #[error("parameter {name}: {fault}")]
    Parameter { name: String, fault: ParamFault },
}

/// What is wrong with a parameter's declaration in a spec (its text follows the name in
/// [`SpecError::Parameter`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParamFault {
    /// `parameters` itself is not an object.
    #[error("must be an object")]
    NotAnObject,
    /// A parameter's entry is not an object.
    #[error("not an object")]
    EntryNotAnObject,
    #[error("min and max must be integers")]
    BoundNotInteger,
    #[error("an enum needs a non-empty values array")]
    NoEnumValues,
    #[error("type must be integer, boolean or enum")]
    UnknownType,
    /// The declared default would itself be refused by [`Param::check`].
    #[error("default outside the declared type or range")]
    BadDefault,
}

/// Given rules that a protocol refuses: the parameter, and what is wrong with its value.
/// It is produced where the rules are checked ([`Spec::validate`], and each game's checks
/// beyond the spec), and turned into the `bad_rules` detail only at the edge, where a
/// [`Refusal`] is made: its text is that detail, `{param}:{fault}` (`rows:range`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{param}:{fault}")]
pub struct RuleError {
    pub param: String,
    pub fault: RuleFault,
}

impl RuleError {
    pub fn new(param: impl Into<String>, fault: RuleFault) -> Self {
        RuleError {
            param: param.into(),
            fault,
        }
    }
}

/// What is wrong with one given rule; [`RuleFault::code`] is its wire text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RuleFault {
    /// A field no parameter declares.
    Unknown,
    /// A parameter without a default, not given.
    Missing,
    /// A value of another JSON type than the parameter's.
    Type,
    /// An integer outside the declared bounds, or outside what the game can play.
    Range,
    /// A value that is not one of an enum's values.
    Value,
    /// An even count where the game needs an odd one (a best-of).
    Odd,
}

impl RuleFault {
    /// The text after the parameter's name in a `bad_rules` detail.
    pub fn code(self) -> &'static str {
        match self {
            RuleFault::Unknown => "unknown",
            RuleFault::Missing => "missing",
            RuleFault::Type => "type",
            RuleFault::Range => "range",
            RuleFault::Value => "value",
            RuleFault::Odd => "odd",
        }
    }
}

impl fmt::Display for RuleFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

impl From<RuleError> for Refusal {
    /// Refused rules are a `bad_rules` refusal whose detail names the parameter and the fault.
    fn from(err: RuleError) -> Self {
        Refusal::with(Reason::BadRules, err.to_string())
    }
}

/// The id of a spec file, and the `spec_version` it names when this reader does not know it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hashed {
    pub id: String,
    pub unknown_version: Option<String>,
}

/// Hashes the text of any JSON object the way `aigenora protocol hash` does.
pub fn hash_document(text: &str) -> Result<Hashed, SpecError> {
    let value = specjson::parse(text)?;
    let doc = value.as_object().ok_or(SpecError::NotObject)?;
    Ok(Hashed {
        id: protocol_id(doc),
        unknown_version: unknown_version(doc),
    })
}

/// The reference reads `spec.get("spec_version") or "1.0"`: an absent or falsy version
/// means 1.0. Anything else but the text "1.0" is unknown; it is returned as JSON text.
pub fn unknown_version(doc: &BTreeMap<String, SpecValue>) -> Option<String> {
    match doc.get("spec_version") {
        None => None,
        Some(v) if !v.is_truthy() => None,
        Some(SpecValue::Str(s)) if s == SPEC_VERSION => None,
        Some(v) => Some(v.dumps()),
    }
}

/// SHA-256, lowercase hex, of the serialized contract subset.
pub fn protocol_id(doc: &BTreeMap<String, SpecValue>) -> String {
    let text = contract_subset(doc).dumps();
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The part of a spec that the protocol id covers (see the module docs).
pub fn contract_subset(doc: &BTreeMap<String, SpecValue>) -> SpecValue {
    let mut subset = BTreeMap::new();
    for key in ["messages", "rules", "choices", "commit_reveal", "timing"] {
        if let Some(v) = doc.get(key) {
            subset.insert(key.to_string(), v.clone());
        }
    }
    if let Some(flow) = doc.get("flow").and_then(flow_subset) {
        subset.insert("flow".to_string(), flow);
    }
    if let Some(SpecValue::Object(params)) = doc.get("parameters") {
        let stripped = params
            .iter()
            .map(|(name, entry)| {
                let entry = match entry {
                    SpecValue::Object(fields) => {
                        let mut fields = fields.clone();
                        fields.remove("default");
                        SpecValue::Object(fields)
                    }
                    other => other.clone(),
                };
                (name.clone(), entry)
            })
            .collect();
        subset.insert("parameters".to_string(), SpecValue::Object(stripped));
    }
    SpecValue::Object(subset)
}

/// `flow` as the id sees it, or `None` when nothing of it counts.
fn flow_subset(flow: &SpecValue) -> Option<SpecValue> {
    let flow = flow.as_object()?;
    let mut kept = BTreeMap::new();
    if let Some(phases) = flow.get("phases").filter(|p| p.is_truthy()) {
        kept.insert("phases".to_string(), phases.clone());
    }
    if let Some(SpecValue::Str(mode)) = flow.get("mode") {
        if !mode.is_empty() && mode != "session_loop" {
            kept.insert("mode".to_string(), SpecValue::Str(mode.clone()));
            let settings = match mode.as_str() {
                "simultaneous_round" => Some("round"),
                "authoritative_realtime" => Some("realtime"),
                "authoritative_group" => Some("group"),
                _ => None,
            };
            if let Some(key) = settings {
                if let Some(v @ SpecValue::Object(_)) = flow.get(key) {
                    kept.insert(key.to_string(), v.clone());
                }
            }
        }
    }
    (!kept.is_empty()).then_some(SpecValue::Object(kept))
}

/// What a declared parameter accepts.
#[derive(Clone, Debug, PartialEq)]
pub enum ParamKind {
    Integer { min: Option<i64>, max: Option<i64> },
    Boolean,
    Enum(Vec<Value>),
}

/// One declared parameter of a playable spec.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: String,
    pub kind: ParamKind,
    pub default: Option<Value>,
}

impl Param {
    fn parse(name: &str, entry: &Value) -> Result<Param, SpecError> {
        let bad = |fault| SpecError::Parameter {
            name: name.to_string(),
            fault,
        };
        let entry = entry.as_object().ok_or(bad(ParamFault::EntryNotAnObject))?;
        let bound = |key: &str| match entry.get(key) {
            None => Ok(None),
            Some(v) => v.as_i64().map(Some).ok_or(bad(ParamFault::BoundNotInteger)),
        };
        let kind = match entry.get("type").and_then(Value::as_str) {
            Some("integer") => ParamKind::Integer {
                min: bound("min")?,
                max: bound("max")?,
            },
            Some("boolean") => ParamKind::Boolean,
            Some("enum") => ParamKind::Enum(
                entry
                    .get("values")
                    .and_then(Value::as_array)
                    .filter(|v| !v.is_empty())
                    .ok_or(bad(ParamFault::NoEnumValues))?
                    .clone(),
            ),
            _ => return Err(bad(ParamFault::UnknownType)),
        };
        let param = Param {
            name: name.to_string(),
            kind,
            default: entry.get("default").cloned(),
        };
        if let Some(default) = &param.default {
            param
                .check(default)
                .map_err(|_| bad(ParamFault::BadDefault))?;
        }
        Ok(param)
    }

    /// Checks one given value against this parameter's declaration.
    pub fn check(&self, value: &Value) -> Result<(), RuleError> {
        let fail = |fault| Err(RuleError::new(&self.name, fault));
        match &self.kind {
            ParamKind::Integer { min, max } => {
                let Some(n) = value.as_i64() else {
                    // A u64 beyond i64 is an integer, just far out of any range.
                    return if value.is_u64() {
                        fail(RuleFault::Range)
                    } else {
                        fail(RuleFault::Type)
                    };
                };
                if min.is_some_and(|m| n < m) || max.is_some_and(|m| n > m) {
                    return fail(RuleFault::Range);
                }
            }
            ParamKind::Boolean if !value.is_boolean() => return fail(RuleFault::Type),
            ParamKind::Enum(values) if !values.contains(value) => return fail(RuleFault::Value),
            _ => {}
        }
        Ok(())
    }
}

/// A spec loaded as a playable protocol.
#[derive(Clone, Debug)]
pub struct Spec {
    doc: Value,
    id: String,
    params: Vec<Param>,
}

impl Spec {
    /// Loads a spec's text, refusing an unknown `spec_version` and parameters this reader
    /// cannot validate.
    pub fn load(text: &str) -> Result<Spec, SpecError> {
        let value = specjson::parse(text)?;
        let map = value.as_object().ok_or(SpecError::NotObject)?;
        if let Some(version) = unknown_version(map) {
            return Err(SpecError::Version(version));
        }
        let id = protocol_id(map);
        let doc: Value = serde_json::from_str(text).map_err(|_| SpecError::NotObject)?;
        let params = match doc.get("parameters") {
            None => Vec::new(),
            Some(Value::Object(entries)) => entries
                .iter()
                .map(|(name, entry)| Param::parse(name, entry))
                .collect::<Result<_, _>>()?,
            Some(_) => {
                return Err(SpecError::Parameter {
                    name: "parameters".to_string(),
                    fault: ParamFault::NotAnObject,
                })
            }
        };
        Ok(Spec { doc, id, params })
    }

    /// The whole document, as shipped.
    pub fn doc(&self) -> &Value {
        &self.doc
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// Validates given rules against the declared parameters and fills in defaults. Unknown
    /// fields are refused; a parameter without a default must be given.
    pub fn validate(&self, given: &Map<String, Value>) -> Result<Map<String, Value>, RuleError> {
        if let Some(unknown) = given
            .keys()
            .find(|k| !self.params.iter().any(|p| &p.name == *k))
        {
            return Err(RuleError::new(unknown, RuleFault::Unknown));
        }
        let mut rules = Map::new();
        for param in &self.params {
            let value = match given.get(&param.name).or(param.default.as_ref()) {
                Some(v) => v,
                None => return Err(RuleError::new(&param.name, RuleFault::Missing)),
            };
            param.check(value)?;
            rules.insert(param.name.clone(), value.clone());
        }
        Ok(rules)
    }
}

/// Reads an integer rule that [`Spec::validate`] has already checked.
pub(crate) fn int_rule(rules: &Map<String, Value>, name: &str, fallback: i64) -> i64 {
    rules.get(name).and_then(Value::as_i64).unwrap_or(fallback)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SPEC: &str = r#"{"name": "T", "spec_version": "1.0", "rules": ["r"],
        "parameters": {"n": {"type": "integer", "min": 1, "max": 5, "default": 2},
                       "b": {"type": "boolean", "default": false},
                       "e": {"type": "enum", "values": ["a", "b"]}}}"#;

    fn check(given: Value, expected: Result<Value, &str>) {
        let spec = Spec::load(SPEC).expect("test spec loads");
        let given = given.as_object().cloned().unwrap_or_default();
        let got = spec.validate(&given);
        let refusal = got.clone().map_err(Refusal::from);
        let shown = got.map(Value::Object).map_err(|e| e.to_string());
        assert_eq!(
            shown,
            expected.clone().map_err(str::to_string),
            "given {given:?}"
        );
        // The text is the `bad_rules` detail the edge sends.
        if let (Err(refusal), Err(detail)) = (refusal, expected) {
            assert_eq!(refusal, Refusal::with(Reason::BadRules, detail));
        }
    }

    #[test]
    fn validates_against_declared_parameters() {
        check(json!({"e": "a"}), Ok(json!({"n": 2, "b": false, "e": "a"})));
        check(
            json!({"e": "b", "n": 5, "b": true}),
            Ok(json!({"n": 5, "b": true, "e": "b"})),
        );
        check(json!({}), Err("e:missing"));
        check(json!({"e": "c"}), Err("e:value"));
        check(json!({"e": "a", "n": 6}), Err("n:range"));
        check(json!({"e": "a", "n": 0}), Err("n:range"));
        check(json!({"e": "a", "n": u64::MAX}), Err("n:range"));
        check(json!({"e": "a", "n": "3"}), Err("n:type"));
        check(json!({"e": "a", "b": 1}), Err("b:type"));
        check(json!({"e": "a", "x": 1}), Err("x:unknown"));
    }

    #[test]
    fn id_ignores_titles_and_defaults_but_not_rules() {
        let id = |text: &str| hash_document(text).expect("hashes").id;
        let base = id(SPEC);
        assert_eq!(base, id(&SPEC.replace("\"T\"", "\"Other title\"")));
        assert_eq!(base, id(&SPEC.replace("\"default\": 2", "\"default\": 3")));
        assert_ne!(base, id(&SPEC.replace("\"max\": 5", "\"max\": 6")));
        assert_ne!(base, id(&SPEC.replace("[\"r\"]", "[\"s\"]")));
    }

    #[test]
    fn unknown_version_warns_on_hash_and_refuses_on_load() {
        let text = SPEC.replace("\"1.0\"", "\"2.0\"");
        let hashed = hash_document(&text).expect("hashes");
        assert_eq!(hashed.unknown_version.as_deref(), Some("\"2.0\""));
        assert!(matches!(Spec::load(&text), Err(SpecError::Version(_))));
        let falsy = SPEC.replace("\"1.0\"", "\"\"");
        assert_eq!(hash_document(&falsy).expect("hashes").unknown_version, None);
    }

    #[test]
    fn flow_subset_follows_the_reference() {
        let subset = |flow: &str| {
            let text = format!("{{\"flow\": {flow}}}");
            let doc = specjson::parse(&text).expect("parses");
            contract_subset(doc.as_object().expect("object")).dumps()
        };
        assert_eq!(subset("{}"), "{}");
        assert_eq!(subset(r#"{"mode": "session_loop", "phases": []}"#), "{}");
        assert_eq!(
            subset(r#"{"mode": "simultaneous_round", "round": {"a": 1}, "group": {}}"#),
            r#"{"flow":{"mode":"simultaneous_round","round":{"a":1}}}"#
        );
        assert_eq!(
            subset(r#"{"mode": "free", "round": {"a": 1}, "phases": [1]}"#),
            r#"{"flow":{"mode":"free","phases":[1]}}"#
        );
    }
}
