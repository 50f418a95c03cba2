//! The `Idempotency-Key` header: a bare token or an RFC 8941 string, one key per request. Apart
//! from the body's parsing: its own grammar and problem types. The key itself is never stored:
//! hashed with the caller's scope it is the operation id (`caller::operation_id`), the payment's
//! `sourceEventId`.

/// Why an `Idempotency-Key` header was refused (each a problem type of its own: a client
/// branches on it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// Missing, or its key breaks the key grammar (length, characters).
    Invalid(String),
    /// It opens an RFC 8941 string (`"`) that is not a well-formed one.
    Malformed(String),
    /// More than one key: two headers (API Gateway's payload 2.0 joins them with commas).
    Multiple(String),
}

impl KeyError {
    pub fn problem_type(&self) -> crate::problem::ProblemType {
        use crate::problem::ProblemType;
        match self {
            KeyError::Invalid(_) => ProblemType::InvalidIdempotencyKey,
            KeyError::Malformed(_) => ProblemType::MalformedIdempotencyKey,
            KeyError::Multiple(_) => ProblemType::MultipleIdempotencyKeys,
        }
    }

    pub fn detail(&self) -> &str {
        match self {
            KeyError::Invalid(d) | KeyError::Malformed(d) | KeyError::Multiple(d) => d,
        }
    }

    pub(crate) fn multiple() -> Self {
        KeyError::Multiple(
            "more than one Idempotency-Key (two headers arrive comma-joined): send exactly one"
                .into(),
        )
    }
}

impl std::fmt::Display for KeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.detail())
    }
}

impl std::error::Error for KeyError {}

/// An `Idempotency-Key`: 1..=255 printable ASCII characters without spaces, sent either as an
/// RFC 8941 string (`"…"`, as draft-ietf-httpapi-idempotency-key-header defines the field,
/// with `\"` and `\\` its only escapes) or bare. `"abc"` and `abc` are the same key.
///
/// A bare key cannot hold a comma: API Gateway's payload 2.0 joins duplicate headers with
/// commas, so `a,b` may be two keys, and is refused rather than guessed at (a key that needs a
/// comma is sent as a string, `"a,b"`, whose comma is inside it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    pub fn parse(raw: Option<&[u8]>) -> Result<Self, KeyError> {
        let invalid = |why: &str| KeyError::Invalid(why.to_owned());
        let raw = raw.ok_or_else(|| invalid("the Idempotency-Key header is required"))?;
        let text =
            std::str::from_utf8(raw).map_err(|_| invalid("Idempotency-Key must be ASCII"))?;
        // RFC 8941 discards the spaces around a field's value; a bare key keeps its grammar.
        let trimmed = text.trim_matches(' ');
        let key = if trimmed.starts_with('"') {
            unquote(trimmed)?
        } else if text.contains(',') {
            return Err(KeyError::multiple());
        } else {
            text.to_owned()
        };
        if key.is_empty() || key.len() > 255 {
            return Err(invalid("Idempotency-Key must be 1..255 characters"));
        }
        if !key.bytes().all(|b| (0x21..=0x7e).contains(&b)) {
            return Err(invalid(
                "Idempotency-Key must be printable ASCII without spaces",
            ));
        }
        Ok(Self(key))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The content of an RFC 8941 sf-string (`text` starts with its opening quote): `DQUOTE
/// *( %x20-21 / %x23-5B / %x5D-7E / "\\" ( DQUOTE / "\\" ) ) DQUOTE`, then nothing but
/// spaces. A comma after it is a second value (two headers, joined); a `;` would open
/// parameters, which this field does not define.
fn unquote(text: &str) -> Result<String, KeyError> {
    let malformed = |why: &str| KeyError::Malformed(format!("quoted Idempotency-Key: {why}"));
    let mut key = String::with_capacity(text.len());
    let mut chars = text.char_indices().skip(1);
    let rest = loop {
        match chars.next() {
            None => return Err(malformed("no closing quote")),
            Some((_, '\\')) => match chars.next() {
                Some((_, c @ ('"' | '\\'))) => key.push(c),
                _ => return Err(malformed(r#"only \" and \\ are escapes"#)),
            },
            Some((i, '"')) => break &text[i + 1..],
            Some((_, c @ ' '..='~')) => key.push(c),
            Some((_, c)) => {
                return Err(malformed(&format!(
                    "U+{:04X} is not a printable ASCII character",
                    u32::from(c)
                )));
            }
        }
    };
    let rest = rest.trim_start_matches([' ', '\t']);
    match rest.chars().next() {
        None => Ok(key),
        Some(',') => Err(KeyError::multiple()),
        Some(';') => Err(malformed("takes no parameters")),
        Some(_) => Err(malformed("characters after the closing quote")),
    }
}

#[cfg(test)]
mod tests;
