use super::*;

#[test]
fn when_a_string_field_holds_a_character_sqs_cannot_carry_should_refuse_it_naming_the_character() {
    let body = |account: &str, reference: &str| {
        serde_json::json!({"accountId": account, "amountMinor": 100, "currency": "EUR", "reference": reference})
            .to_string()
    };
    for (reference, named) in [
        ("inv-\u{fffe}", "U+FFFE"),
        ("inv-\u{ffff}", "U+FFFF"),
        ("inv-\u{1}", "U+0001"),
        ("inv-\u{b}", "U+000B"),
    ] {
        let errors = PaymentCommand::parse(body("acc_1", reference).as_bytes())
            .expect_err("SQS cannot carry it")
            .expect("field errors");
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].field, "reference");
        assert!(errors[0].rule.contains(named), "{errors:?}");
        // The API's validation problem: 422, naming the field and the character.
        let problem = crate::Problem::validation(errors);
        assert_eq!(problem.status, 422);
        assert!(
            problem.detail.starts_with("reference: "),
            "{}",
            problem.detail
        );
    }
    let errors = PaymentCommand::parse(body("acc_\u{ffff}", "inv-1").as_bytes())
        .expect_err("SQS cannot carry it")
        .expect("field errors");
    assert_eq!(errors[0].field, "accountId");
    assert!(errors[0].rule.contains("U+FFFF"), "{errors:?}");
    // What SQS carries stays accepted: beyond the BMP, and right below the refused pair.
    for reference in ["inv-\u{1f600}", "inv-\u{fffd}", "inv-\u{10ffff}"] {
        assert!(
            PaymentCommand::parse(body("acc_1", reference).as_bytes()).is_ok(),
            "{reference:?}"
        );
    }
}

#[test]
fn when_the_principal_does_not_fit_the_contract_charset_should_use_its_scope() {
    let user = Principal::new("client-42").expect("principal");
    assert_eq!(user.source_system(), "api:client-42");
    let arn = Principal::new("arn:aws:iam::123456789012:user/alice").expect("principal");
    assert_eq!(arn.source_system(), format!("api:{}", arn.scope()));
}

#[test]
fn when_a_reference_is_re_encoded_should_be_the_same_request_counted_in_characters() {
    let body = |reference: &str| {
        serde_json::json!({"accountId": "acc_1", "amountMinor": 100, "currency": "EUR", "reference": reference})
            .to_string()
    };
    let composed = PaymentCommand::parse(body("caf\u{e9}").as_bytes()).expect("valid");
    let decomposed = PaymentCommand::parse(body("cafe\u{301}").as_bytes()).expect("valid");
    assert_eq!(
        composed.fingerprint(),
        decomposed.fingerprint(),
        "a replay, not a 422"
    );
    assert_eq!(decomposed.reference, "caf\u{e9}");
    // 140 characters of two bytes each fit; 141 do not.
    assert!(PaymentCommand::parse(body(&"\u{e9}".repeat(140)).as_bytes()).is_ok());
    assert!(PaymentCommand::parse(body(&"\u{e9}".repeat(141)).as_bytes()).is_err());
}

#[test]
fn when_the_body_has_several_errors_should_report_each_field() {
    let errors = PaymentCommand::parse(br#"{"accountId":"a b","amountMinor":-5,"currency":"eur"}"#)
        .expect_err("invalid")
        .expect("field errors");
    let fields: Vec<&str> = errors.iter().map(|e| e.field).collect();
    assert_eq!(
        fields,
        ["accountId", "amountMinor", "currency", "reference"]
    );
}

#[test]
fn when_the_event_time_is_not_rfc_3339_by_its_grammar_should_refuse_it_as_the_consumer_would() {
    let body = |time: &str| {
        serde_json::json!({"accountId": "acc_1", "amountMinor": 100, "currency": "EUR",
            "reference": "inv-1", "eventTime": time})
        .to_string()
    };
    // chrono's parser alone takes both; the published schema and the queue's decoder do not.
    for time in ["2026-10-21 09:30:00Z", "2026-10-21T09:30:60Z"] {
        let errors = PaymentCommand::parse(body(time).as_bytes())
            .expect_err(time)
            .expect("field errors");
        assert_eq!(
            errors.iter().map(|e| e.field).collect::<Vec<_>>(),
            ["eventTime"]
        );
    }
    let accepted =
        PaymentCommand::parse(body("2026-10-21T09:30:00+02:00").as_bytes()).expect("valid");
    assert_eq!(
        accepted.event_time.map(|t| t.to_rfc3339()),
        Some("2026-10-21T07:30:00+00:00".to_owned())
    );
}
