use super::*;

#[test]
fn when_the_key_is_missing_empty_long_or_unprintable_should_refuse() {
    assert!(IdempotencyKey::parse(None).is_err());
    assert!(IdempotencyKey::parse(Some(b"")).is_err());
    assert!(IdempotencyKey::parse(Some("k".repeat(256).as_bytes())).is_err());
    assert!(IdempotencyKey::parse(Some(b"has space")).is_err());
    assert!(IdempotencyKey::parse(Some(b"tab\t")).is_err());
    assert!(IdempotencyKey::parse(Some("k".repeat(255).as_bytes())).is_ok());
}

fn key(raw: &str) -> Result<String, KeyError> {
    IdempotencyKey::parse(Some(raw.as_bytes())).map(|k| k.as_str().to_owned())
}

#[test]
fn when_a_key_is_an_rfc_8941_string_should_be_the_same_key_as_the_bare_token() {
    assert_eq!(key(r#""abc""#), key("abc"));
    assert_eq!(key(r#""abc""#).as_deref(), Ok("abc"));
    assert_eq!(key(r#"  "abc"  "#).as_deref(), Ok("abc"), "spaces around");
    // `\"` and `\\` are the escapes: the same key as the bare form with those characters.
    assert_eq!(key(r#""a\"b\\c""#).as_deref(), Ok(r#"a"b\c"#));
    assert_eq!(key(r#""a\"b\\c""#), key(r#"a"b\c"#));
    // A comma inside the string is the key's own.
    assert_eq!(key(r#""a,b""#).as_deref(), Ok("a,b"));
    // 255 characters of key, whatever the quoting costs.
    assert!(key(&format!("\"{}\"", "k".repeat(255))).is_ok());
    assert!(key(&format!("\"{}\"", "\\\"".repeat(255))).is_ok());
}

#[test]
fn when_a_quoted_key_is_not_a_well_formed_string_should_refuse_it_as_malformed() {
    for raw in [
        r#""abc"#,
        r#""ab\c""#,
        r#""abc\"#,
        r#""abc"x"#,
        r#""abc" "d""#,
        r#""abc";p=1"#,
        "\"a\tb\"",
        "\"caf\u{e9}\"",
    ] {
        let error = key(raw).expect_err(raw);
        assert!(matches!(error, KeyError::Malformed(_)), "{raw}: {error:?}");
        assert_eq!(error.problem_type().slug(), "malformed-idempotency-key");
    }
    // Well-formed strings whose key breaks the grammar: invalid, not malformed.
    for raw in [r#""""#, r#""a b""#] {
        assert!(matches!(key(raw), Err(KeyError::Invalid(_))), "{raw}");
    }
    assert!(matches!(
        key(&format!("\"{}\"", "k".repeat(256))),
        Err(KeyError::Invalid(_))
    ));
}

#[test]
fn when_two_keys_arrive_comma_joined_should_refuse_them_as_multiple() {
    for raw in [
        "a,b",
        "a, b",
        "a,a",
        ",a",
        "a,",
        r#""a", "b""#,
        r#""a","b""#,
        r#""a" ,b"#,
        "\"a\"\t, \"b\"",
    ] {
        let error = key(raw).expect_err(raw);
        assert!(matches!(error, KeyError::Multiple(_)), "{raw}: {error:?}");
        assert_eq!(error.problem_type().slug(), "multiple-idempotency-keys");
    }
}
