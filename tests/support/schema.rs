//! A structural JSON Schema check for the documents the product writes (decision records,
//! incident reports): the keywords those schemas use; any other keyword is reported, so a
//! schema cannot silently use one this check ignores. `pattern` and `format` are left to the
//! tests' explicit assertions.

use serde_json::{Map, Value, json};

/// A schema under `docs/`, read from the repository.
pub fn load(name: &str) -> Value {
    let path = format!("{}/../docs/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path} is not JSON: {e}"))
}

/// Keywords that only annotate, or that this check leaves to the explicit assertions below
/// (`pattern`, `format`).
const NOT_CHECKED: &[&str] = &[
    "description",
    "title",
    "$schema",
    "$id",
    "pattern",
    "format",
];

/// The violations of `instance` against `schema` (empty: valid).
pub fn violations(schema: &Value, instance: &Value) -> Vec<String> {
    let mut found = Vec::new();
    check(schema, instance, "", &mut found);
    found
}

fn check(schema: &Value, instance: &Value, at: &str, found: &mut Vec<String>) {
    let Some(rules) = schema.as_object() else {
        found.push(format!("{at}: schema is not an object"));
        return;
    };
    for (keyword, rule) in rules {
        match keyword.as_str() {
            k if NOT_CHECKED.contains(&k) => {}
            "type" => {
                let ok = match rule.as_str() {
                    Some("object") => instance.is_object(),
                    Some("array") => instance.is_array(),
                    Some("string") => instance.is_string(),
                    Some("integer") => instance.is_i64() || instance.is_u64(),
                    Some("number") => instance.is_number(),
                    Some("boolean") => instance.is_boolean(),
                    other => {
                        found.push(format!("{at}: unsupported type {other:?}"));
                        true
                    }
                };
                if !ok {
                    found.push(format!("{at}: {instance} is not of type {rule}"));
                }
            }
            "const" => {
                if instance != rule {
                    found.push(format!("{at}: {instance} is not {rule}"));
                }
            }
            "enum" => {
                if !rule
                    .as_array()
                    .is_some_and(|values| values.contains(instance))
                {
                    found.push(format!("{at}: {instance} is not one of {rule}"));
                }
            }
            "minimum" => {
                if instance
                    .as_f64()
                    .zip(rule.as_f64())
                    .is_some_and(|(v, m)| v < m)
                {
                    found.push(format!("{at}: {instance} < {rule}"));
                }
            }
            "minLength" | "maxLength" => {
                let len = instance.as_str().map(|s| s.chars().count() as u64);
                let bound = rule.as_u64();
                let bad = match keyword.as_str() {
                    "minLength" => len.zip(bound).is_some_and(|(l, b)| l < b),
                    _ => len.zip(bound).is_some_and(|(l, b)| l > b),
                };
                if bad {
                    found.push(format!("{at}: {instance} breaks {keyword} {rule}"));
                }
            }
            "items" => {
                for (i, item) in instance.as_array().into_iter().flatten().enumerate() {
                    check(rule, item, &format!("{at}/{i}"), found);
                }
            }
            "minItems" => {
                let len = instance.as_array().map(|a| a.len() as u64);
                if len.zip(rule.as_u64()).is_some_and(|(l, m)| l < m) {
                    found.push(format!("{at}: {instance} has fewer than {rule} items"));
                }
            }
            "required" => {
                for key in rule.as_array().into_iter().flatten() {
                    let key = key.as_str().unwrap_or_default();
                    if instance.get(key).is_none() {
                        found.push(format!("{at}: missing required {key}"));
                    }
                }
            }
            "properties" => {
                let (Some(properties), Some(fields)) = (rule.as_object(), instance.as_object())
                else {
                    continue;
                };
                for (key, value) in fields {
                    if let Some(property) = properties.get(key) {
                        check(property, value, &format!("{at}/{key}"), found);
                    }
                }
            }
            "additionalProperties" => {
                let properties = rules.get("properties").and_then(Value::as_object);
                if rule == &json!(false) {
                    for key in instance.as_object().into_iter().flat_map(Map::keys) {
                        if !properties.is_some_and(|p| p.contains_key(key)) {
                            found.push(format!("{at}: {key} is not in the schema's properties"));
                        }
                    }
                } else if rule.is_object() {
                    // A map: every field not named in `properties` holds to `rule`.
                    for (key, value) in instance.as_object().into_iter().flatten() {
                        if !properties.is_some_and(|p| p.contains_key(key)) {
                            check(rule, value, &format!("{at}/{key}"), found);
                        }
                    }
                } else {
                    found.push(format!("{at}: unsupported additionalProperties {rule}"));
                }
            }
            "dependentRequired" => {
                for (key, needs) in rule.as_object().into_iter().flatten() {
                    if instance.get(key).is_some() {
                        for need in needs.as_array().into_iter().flatten() {
                            let need = need.as_str().unwrap_or_default();
                            if instance.get(need).is_none() {
                                found.push(format!("{at}: {key} without {need}"));
                            }
                        }
                    }
                }
            }
            "allOf" => {
                for sub in rule.as_array().into_iter().flatten() {
                    check(sub, instance, at, found);
                }
            }
            "not" => {
                if violations(rule, instance).is_empty() {
                    found.push(format!("{at}: matches what it must not: {rule}"));
                }
            }
            "if" => {
                let branch = match violations(rule, instance).is_empty() {
                    true => rules.get("then"),
                    false => rules.get("else"),
                };
                if let Some(branch) = branch {
                    check(branch, instance, at, found);
                }
            }
            "then" | "else" => {} // with "if"
            other => found.push(format!("{at}: keyword {other} is not checked here")),
        }
    }
}
