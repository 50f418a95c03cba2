use std::time::Duration;

use super::check_event_time;

#[test]
fn when_event_time_is_beyond_the_configured_skew_should_refuse_it_stating_the_bound() {
    let now = chrono::DateTime::from_timestamp(1_796_000_000, 0).expect("time");
    let hour = Duration::from_secs(3600);
    let ahead = |secs: i64| now + chrono::Duration::seconds(secs);
    assert!(check_event_time(ahead(1800), now, hour).is_ok());
    assert!(
        check_event_time(ahead(3600), now, hour).is_ok(),
        "the bound itself"
    );
    let problem = check_event_time(ahead(3601), now, hour).expect_err("past the bound");
    assert_eq!(problem.status, 422);
    assert_eq!(problem.errors[0].field, "eventTime");
    assert_eq!(
        problem.errors[0].rule,
        "must not be more than 1 h ahead of the server's clock"
    );
    let default = servicing_domain::DEFAULT_MAX_EVENT_TIME_SKEW;
    let problem = check_event_time(ahead(86_401), now, default).expect_err("past 24 h");
    assert_eq!(
        problem.errors[0].rule,
        "must not be more than 24 h ahead of the server's clock"
    );
    let problem = check_event_time(ahead(91), now, Duration::from_secs(90)).expect_err("90 s");
    assert_eq!(
        problem.errors[0].rule,
        "must not be more than 90 s ahead of the server's clock"
    );
    assert!(check_event_time(ahead(1), now, Duration::ZERO).is_err());
}
