//! The invocation's deadline. Lambda ends an invocation at its deadline without an answer:
//! SQS then redelivers the whole batch (what was committed comes back as duplicates) and the
//! decision records of what was done are never printed. So the batch must be answered before
//! it, whatever timeout the function was given (AWS allows 1 s to 900 s; 3 s is the default).
//!
//! Everything is derived from the time the invocation has when it starts: a reserve to answer
//! and print the records, proportional to it within a floor and a ceiling; the moment the
//! answer must be ready (`answer_by`); and the last moment a request may start, which leaves it
//! at least [`SHORTEST_REQUEST`]. Every request — read, commit, quarantine write — is cut at
//! `answer_by` (a commit cut that way may have happened: its redelivery is a duplicate); no
//! request starts after its last moment (a commit held by group commit is checked again when it
//! would leave). What is left is answered as a retry, exactly as if that request had failed
//! transiently (any request index may fail: the fault sweep proves it). A timeout too short
//! to fit one request fails the invocation with an error that names the setting.

use std::future::Future;
use std::time::{Duration, SystemTime};

use servicing_store::StoreError;

/// A request is not started with less time than this before the answer is due: DynamoDB
/// answers in milliseconds, this leaves room for a slow attempt.
pub const SHORTEST_REQUEST: Duration = Duration::from_millis(200);
/// The share of the invocation kept to answer and print the batch's records...
const ANSWER_SHARE: u32 = 10;
/// ...never less than this (a 1 s function still prints its records)...
pub const ANSWER_FLOOR: Duration = Duration::from_millis(250);
/// ...nor more (a 900 s function does not idle for 90 s).
const ANSWER_CEILING: Duration = Duration::from_secs(2);

/// The least time an invocation needs to start one request and answer.
pub const SHORTEST_INVOCATION: Duration = ANSWER_FLOOR.saturating_add(SHORTEST_REQUEST);

/// The time kept free at the end of an invocation that has `total` in all.
pub fn answer_reserve(total: Duration) -> Duration {
    (total / ANSWER_SHARE).clamp(ANSWER_FLOOR, ANSWER_CEILING)
}

/// The invocation cannot fit one request: its function's timeout is too short.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the invocation has {left_ms} ms, less than the {needed_ms} ms one request and the answer need: \
     raise the account-state function's Timeout (template.yaml, AccountStateFunction; AWS's default \
     is 3 s, this template's 30 s)"
)]
pub struct TooShort {
    pub left_ms: u128,
    pub needed_ms: u128,
}

/// When requests of this invocation may start, and when each must have answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline {
    last_start: Option<SystemTime>,
    answer_by: Option<SystemTime>,
}

impl Deadline {
    /// No limit: tools, tests and the bench call the handler outside Lambda.
    pub const NONE: Deadline = Deadline {
        last_start: None,
        answer_by: None,
    };

    /// From the Lambda context's deadline (milliseconds since the epoch), as the invocation
    /// starts. The runtime API always sends one; 0 (a default `Context`, as handler tests build
    /// it) is no deadline known, not one long past.
    pub fn of_invocation(deadline_epoch_millis: u64) -> Result<Self, TooShort> {
        Self::of_invocation_at(deadline_epoch_millis, SystemTime::now())
    }

    fn of_invocation_at(deadline_epoch_millis: u64, now: SystemTime) -> Result<Self, TooShort> {
        if deadline_epoch_millis == 0 {
            return Ok(Deadline::NONE);
        }
        let deadline = SystemTime::UNIX_EPOCH + Duration::from_millis(deadline_epoch_millis);
        let total = deadline.duration_since(now).unwrap_or(Duration::ZERO);
        let reserve = answer_reserve(total);
        if total < reserve + SHORTEST_REQUEST {
            return Err(TooShort {
                left_ms: total.as_millis(),
                needed_ms: (reserve + SHORTEST_REQUEST).as_millis(),
            });
        }
        let answer_by = deadline - reserve;
        Ok(Deadline {
            last_start: Some(answer_by - SHORTEST_REQUEST),
            answer_by: Some(answer_by),
        })
    }

    /// No read or commit starts after `last_start`; a request that started is not cut.
    pub fn requests_until(last_start: SystemTime) -> Self {
        Deadline {
            last_start: Some(last_start),
            answer_by: None,
        }
    }

    /// Whether the next request must not start.
    pub(crate) fn passed(self) -> bool {
        self.last_start
            .is_some_and(|last_start| SystemTime::now() >= last_start)
    }

    /// The last moment a request may start, if any.
    pub(crate) fn last_start(self) -> Option<SystemTime> {
        self.last_start
    }

    /// The moment the batch's answer is due, if any.
    pub fn answer_by(self) -> Option<SystemTime> {
        self.answer_by
    }

    /// `request`, cut when the answer is due: a transient failure, since a commit cut in the
    /// air may or may not have happened (its redelivery tells, as after a lost response).
    pub(crate) async fn bound<T>(
        self,
        request: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let Some(answer_by) = self.answer_by else {
            return request.await;
        };
        let budget = answer_by
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        tokio::time::timeout(budget, request)
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::Transient(
                    "cut when the invocation's answer was due".into(),
                ))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Now in whole milliseconds, as Lambda's deadlines are.
    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(millis(SystemTime::now()))
    }

    fn millis(t: SystemTime) -> u64 {
        let since = t.duration_since(SystemTime::UNIX_EPOCH).expect("clock");
        u64::try_from(since.as_millis()).expect("millis")
    }

    /// Every timeout AWS allows (1 s to 900 s) leaves most of the invocation to requests:
    /// requests start until the reserve and one shortest request are left.
    #[test]
    fn when_the_function_has_any_timeout_aws_allows_should_leave_most_of_it_to_requests() {
        let now = now();
        for seconds in [1u64, 2, 3, 6, 10, 15, 30, 60, 300, 900] {
            let total = Duration::from_secs(seconds);
            let deadline = Deadline::of_invocation_at(millis(now + total), now).expect("fits");
            let usable = deadline
                .last_start()
                .expect("a last start")
                .duration_since(now)
                .expect("after now");
            let answer_by = deadline.answer_by().expect("an answer time");
            assert!(
                usable >= total.mul_f64(0.5),
                "{seconds} s: only {usable:?} usable"
            );
            assert!(answer_by <= now + total - ANSWER_FLOOR, "{seconds} s");
            assert!(
                (now + total)
                    .duration_since(answer_by)
                    .expect("before the deadline")
                    <= ANSWER_CEILING,
                "{seconds} s"
            );
        }
    }

    #[test]
    fn when_the_invocation_cannot_fit_one_request_should_fail_naming_the_setting() {
        let now = now();
        let short = Deadline::of_invocation_at(millis(now + Duration::from_millis(300)), now);
        let error = short.expect_err("too short");
        assert!(error.to_string().contains("Timeout"), "{error}");
        assert_eq!(error.needed_ms, SHORTEST_INVOCATION.as_millis());
        assert!(Deadline::of_invocation_at(millis(now + SHORTEST_INVOCATION), now).is_ok());
        assert_eq!(Deadline::of_invocation_at(0, now), Ok(Deadline::NONE));
        assert!(!Deadline::NONE.passed());
    }

    #[tokio::test]
    async fn when_a_request_outlasts_the_answer_time_should_cut_it_as_transient() {
        let now = SystemTime::now();
        let deadline = Deadline {
            last_start: Some(now),
            answer_by: Some(now + Duration::from_millis(50)),
        };
        let started = std::time::Instant::now();
        let slow = async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<(), StoreError>(())
        };
        let cut = deadline.bound(slow).await;
        assert!(matches!(cut, Err(StoreError::Transient(_))), "{cut:?}");
        assert!(started.elapsed() < Duration::from_secs(1));
        let unbounded = Deadline::NONE.bound(async { Ok::<_, StoreError>(7) }).await;
        assert!(matches!(unbounded, Ok(7)), "{unbounded:?}");
    }
}
