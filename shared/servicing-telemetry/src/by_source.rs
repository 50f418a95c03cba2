//! What a batch's decision records add up to per source: verdict counts per (SourceSystem,
//! EventType) and the money applied / recognised as duplicate per (SourceSystem, Currency), as
//! EMF documents beside the batch document.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::decision::{DecisionRecord, Verdict};
use crate::{configured_level, emf_group_document, now_millis};

impl Verdict {
    /// account-state's verdicts, in the order the per-source EMF documents list their metrics
    /// (the relay's and the API's verdicts are not counted by these documents; every verdict:
    /// [`Verdict::WIRE`]).
    pub const ALL: [Verdict; 8] = [
        Verdict::Applied,
        Verdict::Duplicate,
        Verdict::Collision,
        Verdict::Stale,
        Verdict::Quarantined,
        Verdict::Parked,
        Verdict::Released,
        Verdict::Retried,
    ];

    /// The EMF metric counting it (the names of the batch document).
    pub fn metric_name(self) -> &'static str {
        match self {
            Verdict::Applied => "Applied",
            Verdict::Duplicate => "Duplicate",
            Verdict::Collision => "Collision",
            Verdict::Stale => "Stale",
            Verdict::Parked => "Parked",
            Verdict::Released => "Released",
            Verdict::Quarantined => "Quarantined",
            Verdict::Retried => "Retried",
            Verdict::Published => "Published",
            Verdict::Sent => "Sent",
            Verdict::Accepted => "Accepted",
            Verdict::Replayed => "Replayed",
            Verdict::KeyReused => "KeyReused",
            Verdict::KeyExpired => "KeyExpired",
            Verdict::InFlight => "InFlight",
            Verdict::Refused => "Refused",
        }
    }
}

/// A source system as a metric dimension: bounded. An API principal (`api:<caller>`) counts as
/// `api`; a record without one (an undecodable body) as `unknown`.
pub fn bounded_source(source_system: Option<&str>) -> &str {
    match source_system {
        Some(s) if s.starts_with("api:") => "api",
        Some(s) => s,
        None => "unknown",
    }
}

/// What a batch's decisions add up to per source: verdict counts per (SourceSystem, EventType)
/// and amounts per (SourceSystem, Currency), sources bounded by [`bounded_source`].
///
/// A released record counts as `Released` and as its outcome (as the batch document does:
/// messages + released = the other verdicts). Amounts are the `amountMinor` of the records
/// whose (effective) verdict is applied or duplicate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceTally {
    pub counts: BTreeMap<(String, String), BTreeMap<Verdict, u64>>,
    /// (applied, duplicate) minor units per (SourceSystem, Currency).
    pub amounts: BTreeMap<(String, String), (i64, i64)>,
}

impl SourceTally {
    pub fn of(decisions: &[DecisionRecord]) -> Self {
        let mut tally = Self::default();
        for record in decisions {
            let source = bounded_source(record.source_system.as_deref()).to_owned();
            let event_type = record.event_type.as_deref().unwrap_or("unknown").to_owned();
            let counts = tally
                .counts
                .entry((source.clone(), event_type))
                .or_default();
            *counts.entry(record.verdict).or_default() += 1;
            if record.verdict == Verdict::Released
                && let Some(outcome) = record.outcome
            {
                *counts.entry(outcome).or_default() += 1;
            }
            if let (Some(amount), Some(currency)) = (record.amount_minor, &record.currency) {
                let sums = tally.amounts.entry((source, currency.clone())).or_default();
                match record.effective_verdict() {
                    Verdict::Applied => sums.0 = sums.0.saturating_add(amount),
                    Verdict::Duplicate => sums.1 = sums.1.saturating_add(amount),
                    _ => {}
                }
            }
        }
        tally
    }

    /// The count of `verdict` for `source` (bounded), over its event types.
    pub fn count(&self, source: &str, verdict: Verdict) -> u64 {
        self.counts
            .iter()
            .filter(|((s, _), _)| s == source)
            .filter_map(|(_, counts)| counts.get(&verdict))
            .sum()
    }
}

/// The per-source EMF documents of a batch's decisions: one per (SourceSystem, EventType) with
/// every verdict count, dimension sets `[Consumer, SourceSystem]` and
/// `[Consumer, SourceSystem, EventType]`; one per (SourceSystem, Currency) with
/// `AppliedAmountMinor` and `DuplicateAmountMinor`, dimension sets
/// `[Consumer, SourceSystem, Currency]` and `[Consumer, Currency]`. They never use the
/// `[Consumer]` set: the batch document ([`crate::emf_document`]) has those totals.
pub fn decision_emf_documents(
    consumer: &str,
    decisions: &[DecisionRecord],
    timestamp_millis: u64,
    level: &str,
) -> Vec<Value> {
    let tally = SourceTally::of(decisions);
    let mut docs = Vec::with_capacity(tally.counts.len() + tally.amounts.len());
    for ((source, event_type), counts) in &tally.counts {
        let metrics: Vec<(&str, &str, i64)> = Verdict::ALL
            .iter()
            .map(|v| {
                let n = counts.get(v).copied().unwrap_or_default();
                (
                    v.metric_name(),
                    "Count",
                    i64::try_from(n).unwrap_or(i64::MAX),
                )
            })
            .collect();
        docs.push(emf_group_document(
            &[
                ("Consumer", consumer),
                ("SourceSystem", source),
                ("EventType", event_type),
            ],
            &[
                &["Consumer", "SourceSystem"],
                &["Consumer", "SourceSystem", "EventType"],
            ],
            &metrics,
            timestamp_millis,
            level,
        ));
    }
    for ((source, currency), (applied, duplicate)) in &tally.amounts {
        docs.push(emf_group_document(
            &[
                ("Consumer", consumer),
                ("SourceSystem", source),
                ("Currency", currency),
            ],
            &[
                &["Consumer", "SourceSystem", "Currency"],
                &["Consumer", "Currency"],
            ],
            &[
                ("AppliedAmountMinor", "None", *applied),
                ("DuplicateAmountMinor", "None", *duplicate),
            ],
            timestamp_millis,
            level,
        ));
    }
    docs
}

/// Prints the per-source EMF documents of a batch's decisions, one line each.
pub fn emit_decision_metrics(consumer: &str, decisions: &[DecisionRecord]) {
    let level = configured_level();
    for doc in decision_emf_documents(consumer, decisions, now_millis(), level) {
        println!("{doc}");
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::decision::DecidedBy;
    use crate::decision::tests::payment;

    #[test]
    fn when_sources_are_bounded_should_fold_api_principals_and_name_the_missing() {
        assert_eq!(bounded_source(Some("api:partner-42")), "api");
        assert_eq!(bounded_source(Some("api:")), "api");
        assert_eq!(bounded_source(Some("prov-a")), "prov-a");
        assert_eq!(bounded_source(Some("apis")), "apis");
        assert_eq!(bounded_source(None), "unknown");
    }

    #[test]
    fn when_a_batch_is_tallied_should_emit_per_source_counts_and_money_without_the_consumer_set() {
        let mut decisions = vec![
            payment("prov-a", "p1", 1000, Verdict::Applied),
            payment("prov-a", "p2", 250, Verdict::Applied),
            payment("prov-a", "p1", 1000, Verdict::Duplicate),
            payment("api:partner-1", "k1", 70, Verdict::Applied),
            payment("api:partner-2", "k2", 30, Verdict::Duplicate),
            DecisionRecord::new(
                "account-state",
                "bad",
                Verdict::Quarantined,
                DecidedBy::Decode,
            ),
        ];
        // A parked payment released and applied: Released and Applied, and its money.
        decisions.push(DecisionRecord {
            outcome: Some(Verdict::Applied),
            receive_count: None,
            ..payment("prov-a", "p3", 5, Verdict::Released)
        });
        let docs = decision_emf_documents("account-state", &decisions, 42, "WARN");
        // (api, PAYMENT_SETTLED), (prov-a, PAYMENT_SETTLED), (unknown, unknown); then money of
        // api/EUR and prov-a/EUR.
        assert_eq!(docs.len(), 5, "{docs:#?}");

        let counts = &docs[1];
        let names: Vec<&str> = Verdict::ALL.iter().map(|v| v.metric_name()).collect();
        assert_eq!(
            names,
            [
                "Applied",
                "Duplicate",
                "Collision",
                "Stale",
                "Quarantined",
                "Parked",
                "Released",
                "Retried"
            ]
        );
        let expected = json!({
            "level": "WARN",
            "_aws": {
                "Timestamp": 42,
                "CloudWatchMetrics": [{
                    "Namespace": "LoanServicing",
                    "Dimensions": [["Consumer", "SourceSystem"], ["Consumer", "SourceSystem", "EventType"]],
                    "Metrics": names.iter().map(|n| json!({"Name": n, "Unit": "Count"})).collect::<Vec<_>>(),
                }],
            },
            "Consumer": "account-state",
            "SourceSystem": "prov-a",
            "EventType": "PAYMENT_SETTLED",
            "Applied": 3, "Duplicate": 1, "Collision": 0, "Stale": 0, "Quarantined": 0,
            "Parked": 0, "Released": 1, "Retried": 0,
        });
        assert_eq!(counts, &expected);

        assert_eq!(docs[0]["SourceSystem"], "api");
        assert_eq!(docs[0]["Applied"], 1);
        assert_eq!(docs[0]["Duplicate"], 1);
        assert_eq!(docs[2]["SourceSystem"], "unknown");
        assert_eq!(docs[2]["EventType"], "unknown");
        assert_eq!(docs[2]["Quarantined"], 1);

        let money = &docs[4];
        let expected = json!({
            "level": "WARN",
            "_aws": {
                "Timestamp": 42,
                "CloudWatchMetrics": [{
                    "Namespace": "LoanServicing",
                    "Dimensions": [["Consumer", "SourceSystem", "Currency"], ["Consumer", "Currency"]],
                    "Metrics": [
                        {"Name": "AppliedAmountMinor", "Unit": "None"},
                        {"Name": "DuplicateAmountMinor", "Unit": "None"},
                    ],
                }],
            },
            "Consumer": "account-state",
            "SourceSystem": "prov-a",
            "Currency": "EUR",
            "AppliedAmountMinor": 1255,
            "DuplicateAmountMinor": 1000,
        });
        assert_eq!(money, &expected);
        assert_eq!(docs[3]["SourceSystem"], "api");
        assert_eq!(docs[3]["AppliedAmountMinor"], 70);
        assert_eq!(docs[3]["DuplicateAmountMinor"], 30);

        // No document of decisions uses the batch document's `[Consumer]` set.
        for doc in &docs {
            let sets = &doc["_aws"]["CloudWatchMetrics"][0]["Dimensions"];
            assert!(
                sets.as_array()
                    .is_some_and(|sets| sets.iter().all(|s| s != &json!(["Consumer"]))),
                "{doc}"
            );
        }

        let tally = SourceTally::of(&decisions);
        assert_eq!(tally.count("prov-a", Verdict::Applied), 3);
        assert_eq!(tally.count("api", Verdict::Duplicate), 1);
        assert_eq!(tally.count("prov-b", Verdict::Applied), 0);
        assert_eq!(
            tally.amounts[&("prov-a".to_owned(), "EUR".to_owned())],
            (1255, 1000)
        );
    }

    #[test]
    fn when_a_batch_has_no_decisions_should_emit_no_document() {
        assert!(decision_emf_documents("account-state", &[], 0, "INFO").is_empty());
    }
}
