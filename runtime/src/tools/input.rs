//! A built-in tool's input is one Rust type: the JSON schema the model is shown and the parse
//! the handler runs both come from it, so the two cannot drift apart.
//!
//! The generated schema is normalised to the plain shape every provider accepts (an object with
//! `properties` and `required`, subschemas inlined, no `$schema`, title or Rust number formats),
//! and a parse error names the field at fault, because the model reads it and must fix that field.

use schemars::{JsonSchema, SchemaGenerator, generate::SchemaSettings};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// An input that does not fit its tool's input type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid input{}: {message}", at_field(field))]
pub struct InputError {
    /// The path of the offending field (`timeout_sec`, `steps[0].status`); empty when the
    /// object itself is at fault (a missing or unknown field, which the message names).
    pub field: String,
    pub(crate) message: String,
}

fn at_field(field: &str) -> String {
    if field.is_empty() {
        String::new()
    } else {
        format!(" at `{field}`")
    }
}

/// Parse a tool's input into its type.
pub fn parse_input<T: DeserializeOwned>(input: &Value) -> Result<T, InputError> {
    serde_path_to_error::deserialize(input).map_err(|e| {
        let path = e.path().to_string();
        InputError {
            // serde_path_to_error writes the root as `.`.
            field: if path == "." { String::new() } else { path },
            message: e.into_inner().to_string(),
        }
    })
}

/// The JSON schema of `T` as providers are shown it.
pub fn input_schema<T: JsonSchema>() -> Value {
    let generator: SchemaGenerator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.meta_schema = None;
            s.inline_subschemas = true;
        })
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    normalise(&mut schema);
    if let Value::Object(root) = &mut schema {
        root.remove("title");
        // Providers (and the schema step's validator) expect the list even when it is empty.
        root.entry("required")
            .or_insert_with(|| Value::Array(Vec::new()));
    }
    schema
}

/// Rust's integer and float widths, which schemars records as `format`; JSON Schema and the
/// providers know nothing of them.
const RUST_FORMATS: [&str; 12] = [
    "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64",
    "float", "double",
];

/// Strips Rust number formats and the doc comments of structs (written for Rust readers; the
/// tool's description speaks to the model, and fields' doc comments stay), and turns an
/// optional field's `["T", "null"]` type into `"T"` (an absent field is how the model leaves it
/// out), all the way down.
fn normalise(value: &mut Value) {
    match value {
        Value::Object(map) => {
            strip_rust_format(map);
            drop_null_type(map);
            if map.contains_key("properties") {
                map.remove("description");
            }
            map.values_mut().for_each(normalise);
        }
        Value::Array(items) => items.iter_mut().for_each(normalise),
        _ => {}
    }
}

fn strip_rust_format(map: &mut Map<String, Value>) {
    if map
        .get("format")
        .and_then(Value::as_str)
        .is_some_and(|f| RUST_FORMATS.contains(&f))
    {
        map.remove("format");
    }
}

fn drop_null_type(map: &mut Map<String, Value>) {
    let Some(Value::Array(types)) = map.get("type") else {
        return;
    };
    let kept: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
    if let [only] = kept.as_slice() {
        let only = only.clone();
        map.insert("type".into(), only);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    /// Why it exists.
    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct Sample {
        /// The name.
        name: String,
        #[schemars(range(min = 1))]
        count: Option<u64>,
        #[serde(default)]
        parts: Vec<Part>,
    }

    /// A Rust reader's note.
    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    struct Part {
        /// Between 0 and 1.
        #[schemars(range(min = 0.0, max = 1.0))]
        share: f64,
    }

    #[test]
    fn schema_is_plain_object_with_descriptions() {
        let schema = input_schema::<Sample>();
        assert_eq!(
            schema,
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "The name."},
                    "count": {"type": "integer", "minimum": 1},
                    "parts": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {"share": {
                                "type": "number", "minimum": 0.0, "maximum": 1.0,
                                "description": "Between 0 and 1.",
                            }},
                            "required": ["share"],
                            "additionalProperties": false,
                        },
                    },
                },
                "required": ["name"],
                "additionalProperties": false,
            })
        );
    }

    #[test]
    fn parse_errors_name_the_field() {
        let bad_type = parse_input::<Sample>(&json!({"name": "x", "count": "many"})).unwrap_err();
        assert_eq!(bad_type.field, "count");
        assert!(
            bad_type
                .to_string()
                .starts_with("invalid input at `count`: invalid type")
        );
        let missing = parse_input::<Sample>(&json!({})).unwrap_err();
        assert_eq!(missing.to_string(), "invalid input: missing field `name`");
        let unknown = parse_input::<Sample>(&json!({"name": "x", "colour": 1})).unwrap_err();
        assert!(
            unknown.message.contains("unknown field `colour`"),
            "{unknown}"
        );
        let nested = parse_input::<Sample>(&json!({"name": "x", "parts": [{"share": "half"}]}));
        assert_eq!(nested.unwrap_err().field, "parts[0].share");
        let ok = parse_input::<Sample>(&json!({"name": "x", "parts": [{"share": 0.5}]})).unwrap();
        assert_eq!((ok.name.as_str(), ok.count), ("x", None));
        assert_eq!(ok.parts.iter().map(|p| p.share).sum::<f64>(), 0.5);
    }
}
