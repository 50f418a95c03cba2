//! Canonical servicing events (see the contract in `docs/EVENTS.md`): the decoded model and what
//! it tells about itself. Decoding a body is in `decode`, the canonical wire form in `canonical`,
//! the duplicate-key check of a raw body in `duplicate_keys`, and the wire's dates and timestamps
//! in `wire_time`.

mod canonical;
mod decode;
mod duplicate_keys;
mod wire_time;

use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};

use crate::types::{AccountId, Amount, Money, SourceRef};

pub use decode::DecodeError;
pub use duplicate_keys::unique_keys;
pub use wire_time::{OUTSIDE_FOUR_DIGIT_YEARS, parse_date, parse_timestamp};

/// Default `MAX_EVENT_TIME_SKEW`: how far ahead of the consumer's clock an `eventTime` may be.
pub const DEFAULT_MAX_EVENT_TIME_SKEW: std::time::Duration =
    std::time::Duration::from_secs(24 * 3600);

/// The quarantine code of an event dated too far ahead.
pub const EVENT_TIME_IN_FUTURE: &str = "event_time_in_future";

/// The `sourceSystem` of the daily job's `BUSINESS_DAY_CLOSED` events.
pub const CLOSE_SOURCE_SYSTEM: &str = "scheduler";

/// The only schema major version this build understands.
pub const SCHEMA_VERSION: i64 = 1;

/// The highest `installmentNo` an `INSTALLMENT_DUE` may carry.
pub const MAX_INSTALLMENT_NO: i64 = 100_000;

/// The longest `feeType`, of `[A-Z0-9_]`.
pub const MAX_FEE_TYPE_LEN: usize = 64;

/// A decoded, validated servicing event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServicingEvent {
    pub source: SourceRef,
    pub account_id: AccountId,
    pub event_time: DateTime<Utc>,
    /// Minted by a transport; logged for tracing, never used for identity or fingerprints.
    pub transport_event_id: Option<String>,
    pub kind: EventKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    LoanOpened {
        principal: Money,
        credit_limit: Option<Amount>,
    },
    InstallmentDue {
        installment_no: u32,
        due_date: NaiveDate,
        principal: Amount,
        interest: Amount,
    },
    InterestAccrued {
        amount: Money,
    },
    FeeAssessed {
        amount: Money,
        fee_type: String,
    },
    PaymentSettled {
        amount: Money,
    },
    PaymentReversed {
        amount: Money,
        reversal_of: SourceRef,
    },
    CreditLimitSet {
        limit: Money,
        sequence: u64,
    },
    /// The servicing side closed `business_date` for the account: its business date moves
    /// there and arrears are recomputed as of it. No money moves.
    BusinessDayClosed {
        business_date: NaiveDate,
    },
}

impl EventKind {
    pub fn wire_name(&self) -> &'static str {
        match self {
            EventKind::LoanOpened { .. } => "LOAN_OPENED",
            EventKind::InstallmentDue { .. } => "INSTALLMENT_DUE",
            EventKind::InterestAccrued { .. } => "INTEREST_ACCRUED",
            EventKind::FeeAssessed { .. } => "FEE_ASSESSED",
            EventKind::PaymentSettled { .. } => "PAYMENT_SETTLED",
            EventKind::PaymentReversed { .. } => "PAYMENT_REVERSED",
            EventKind::CreditLimitSet { .. } => "CREDIT_LIMIT_SET",
            EventKind::BusinessDayClosed { .. } => "BUSINESS_DAY_CLOSED",
        }
    }
}

impl ServicingEvent {
    /// Why `eventTime` cannot be trusted at `now`: more than `max_skew` ahead of the consumer's
    /// clock (business time only moves forward for an account, so one event dated in the
    /// future would age its arrears for good). Quarantined unclaimed, so a corrected resend can
    /// still apply.
    pub fn too_far_ahead(
        &self,
        now: DateTime<Utc>,
        max_skew: std::time::Duration,
    ) -> Option<String> {
        let skew = chrono::Duration::from_std(max_skew).unwrap_or(chrono::Duration::MAX);
        let limit = now.checked_add_signed(skew)?;
        if self.event_time > limit {
            return Some(format!(
                "eventTime {} is more than {} s ahead of the consumer's clock ({})",
                self.event_time.to_rfc3339_opts(SecondsFormat::Secs, true),
                max_skew.as_secs(),
                now.to_rfc3339_opts(SecondsFormat::Secs, true)
            ));
        }
        // A close moves business time to its `businessDate`, whatever its `eventTime` says: a
        // day that has not begun yet (beyond the same skew) would age the account for good.
        match self.kind {
            EventKind::BusinessDayClosed { business_date }
                if business_date.and_time(chrono::NaiveTime::MIN).and_utc() > limit =>
            {
                Some(format!(
                    "businessDate {business_date} begins more than {} s ahead of the consumer's clock ({})",
                    max_skew.as_secs(),
                    now.to_rfc3339_opts(SecondsFormat::Secs, true)
                ))
            }
            _ => None,
        }
    }

    /// The business date of the event: a `BUSINESS_DAY_CLOSED`'s `businessDate`, else the UTC
    /// calendar date of `eventTime`.
    pub fn business_date(&self) -> NaiveDate {
        match self.kind {
            EventKind::BusinessDayClosed { business_date } => business_date,
            _ => self.event_time.date_naive(),
        }
    }

    /// The close the daily job emits for `account_id` and `business_date`, as the contract
    /// names it: `sourceSystem = "scheduler"`, `sourceEventId = "close-<businessDate>-<accountId>"`,
    /// `eventTime` = the end of that date (UTC). So a second run for the same day, or a
    /// manual close of it, is the same fact again (a duplicate).
    pub fn business_day_closed(account_id: &AccountId, business_date: NaiveDate) -> Self {
        let date = business_date.format("%Y-%m-%d");
        let end_of_day = business_date
            .and_hms_opt(23, 59, 59)
            .unwrap_or_else(|| business_date.and_time(chrono::NaiveTime::MIN));
        ServicingEvent {
            source: SourceRef {
                system: CLOSE_SOURCE_SYSTEM.to_owned(),
                event_id: format!("close-{date}-{account_id}"),
            },
            account_id: account_id.clone(),
            event_time: end_of_day.and_utc(),
            transport_event_id: None,
            kind: EventKind::BusinessDayClosed { business_date },
        }
    }

    /// The payment a reversal refers to, which the caller must look up before `apply`.
    pub fn reversal_target(&self) -> Option<&SourceRef> {
        match &self.kind {
            EventKind::PaymentReversed { reversal_of, .. } => Some(reversal_of),
            _ => None,
        }
    }
}
