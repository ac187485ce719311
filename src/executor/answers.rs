//! Structured output: whether an answer is what the plan's `response-format` asks — a JSON
//! object, or JSON valid under its schema. Checked by the recorder, off the I/O path, on the
//! answer's own text (reasoning and tool calls left out).

use crate::plan::ResponseFormat;

/// A plan's schema that cannot be compiled: where it came from, and the validator's reason.
#[derive(Debug, thiserror::Error)]
#[error("{shown} is not a usable JSON Schema: {why}")]
pub struct UnusableSchema {
    /// The schema as the plan names it (its file, or "the inline schema").
    pub shown: String,
    /// What the validator said.
    pub why: String,
}

/// What every answer of a run must be.
pub struct AnswerCheck {
    /// The schema's validator, for `json-schema`; `None` for any JSON object.
    schema: Option<jsonschema::Validator>,
}

impl AnswerCheck {
    /// The check of `format`; an error when its schema cannot be compiled (the plan parser
    /// refuses such a schema, so this is for a plan built in code).
    pub fn new(format: &ResponseFormat) -> Result<AnswerCheck, UnusableSchema> {
        let schema = match format {
            ResponseFormat::JsonObject => None,
            ResponseFormat::JsonSchema { schema, shown, .. } => Some(
                jsonschema::validator_for(schema).map_err(|e| UnusableSchema {
                    shown: shown.clone(),
                    why: e.to_string(),
                })?,
            ),
        };
        Ok(AnswerCheck { schema })
    }

    /// Whether `answer` is what was asked.
    pub fn holds(&self, answer: &str) -> bool {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(answer) else {
            return false;
        };
        match &self.schema {
            None => value.is_object(),
            Some(validator) => validator.is_valid(&value),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_objects_and_schemas() {
        let object = AnswerCheck::new(&ResponseFormat::JsonObject).unwrap();
        assert!(object.holds(r#" {"a": 1} "#));
        assert!(!object.holds("[1, 2]"));
        assert!(!object.holds(r#"{"a": 1"#));
        let schema = serde_json::json!({"type": "object", "required": ["answer"],
            "properties": {"answer": {"type": "string"}}});
        let with_schema = AnswerCheck::new(&ResponseFormat::JsonSchema {
            shown: "s.json".into(),
            sha256: String::new(),
            schema: std::sync::Arc::new(schema),
        })
        .unwrap();
        assert!(with_schema.holds(r#"{"answer": "yes"}"#));
        assert!(!with_schema.holds(r#"{"answer": 3}"#));
        assert!(!with_schema.holds(r#"{"other": "yes"}"#));
        let broken = AnswerCheck::new(&ResponseFormat::JsonSchema {
            shown: "bad.json".into(),
            sha256: String::new(),
            schema: std::sync::Arc::new(serde_json::json!({"type": 12})),
        });
        assert!(broken.is_err());
    }
}
