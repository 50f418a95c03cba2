//! The invocation's deadline. Lambda ends an invocation at its deadline without an answer:
//! SQS then redelivers the whole batch (what was committed comes back as duplicates) and the
//! decision records of what was done are never printed. So no read or commit starts that
//! could still be running at the deadline (a commit held by group commit is checked again when
//! it would leave); what is left is answered as a retry, exactly as if that request had failed
//! transiently (any request index may fail: the fault sweep proves it). Quarantine writes are
//! not cut: one request each, within the SDK's timeout.

use std::time::{Duration, SystemTime};

/// Kept free before the deadline when a request starts: the SDK's whole operation timeout,
/// then the time to answer and print the batch's records.
pub const DEADLINE_RESERVE: Duration = aws_setup::OPERATION_TIMEOUT.saturating_add(ANSWER_TIME);
const ANSWER_TIME: Duration = Duration::from_secs(2);

/// The last moment a request of this invocation may start (none: no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadline(Option<SystemTime>);

impl Deadline {
    /// No limit: tools, tests and the bench call the handler outside Lambda.
    pub const NONE: Deadline = Deadline(None);

    /// From the Lambda context's deadline (milliseconds since the epoch), less the reserve.
    /// The runtime API always sends one; 0 (a default `Context`, as handler tests build it) is
    /// no deadline known, not one long past.
    pub fn of_invocation(deadline_epoch_millis: u64) -> Self {
        if deadline_epoch_millis == 0 {
            return Deadline::NONE;
        }
        let deadline = SystemTime::UNIX_EPOCH + Duration::from_millis(deadline_epoch_millis);
        Deadline(Some(
            deadline
                .checked_sub(DEADLINE_RESERVE)
                .unwrap_or(SystemTime::UNIX_EPOCH),
        ))
    }

    /// No read or commit starts after `last_start`.
    pub fn requests_until(last_start: SystemTime) -> Self {
        Deadline(Some(last_start))
    }

    /// Whether the next request must not start.
    pub(crate) fn passed(self) -> bool {
        self.0
            .is_some_and(|last_start| SystemTime::now() >= last_start)
    }

    /// The last moment a request may start, if any.
    pub(crate) fn last_start(self) -> Option<SystemTime> {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn when_the_invocation_has_less_than_the_reserve_left_should_start_no_request() {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .expect("clock");
        let millis = |d: Duration| u64::try_from(d.as_millis()).expect("millis");
        let near = Deadline::of_invocation(millis(now + DEADLINE_RESERVE - Duration::from_secs(1)));
        let far = Deadline::of_invocation(millis(now + DEADLINE_RESERVE + Duration::from_secs(60)));
        assert!(near.passed());
        assert!(!far.passed());
        assert!(!Deadline::NONE.passed());
        assert!(Deadline::of_invocation(1).passed());
        assert!(!Deadline::of_invocation(0).passed());
    }
}
