//! JSON Schema validation of the documents the product writes (decision records, incident
//! reports, notices) against their published schemas in `docs/`: draft 2020-12, with `format`
//! and `pattern` checked.

use serde_json::Value;

/// A schema under `docs/`, read from the repository.
pub fn load(name: &str) -> Value {
    let path = format!("{}/../docs/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path} is not JSON: {e}"))
}

/// The violations of `instance` against `schema` (empty: valid).
pub fn violations(schema: &Value, instance: &Value) -> Vec<String> {
    let validator = jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(schema)
        .unwrap_or_else(|e| panic!("not a valid JSON Schema: {e}"));
    validator
        .iter_errors(instance)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}
