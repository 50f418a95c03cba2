//! A planned group's commit: the loan item's part and each member's unit of work in the one
//! transaction, and afterwards each member's answer with the committed state carried into the
//! snapshot. Separate from planning: this is what the handler sends and reads back.

use servicing_domain::{AccountId, AllocationWrite, EventKind};
use servicing_store::{Effect, LoanWrite, QuarantineEntry, Snapshot, Target, UnitOfWork};

use super::{Answer, Group, Judged, Member, Subject};
use crate::batch::Pending;
use crate::report::MessageResult;

impl Group {
    /// The loan item's part in the group's transaction.
    pub fn loan_write<'a>(&'a self, account_id: &'a AccountId) -> LoanWrite<'a> {
        match &self.next {
            Some(item) => LoanWrite::Put {
                item,
                expected: self.expected,
                apart_before: &self.apart_before,
            },
            None => LoanWrite::Check {
                account_id,
                expected: self.expected,
            },
        }
    }

    /// The units of work of the group, in order (a fact that was already applied has none).
    pub fn units<'a>(&'a self, pending: &'a [Pending<'a>]) -> Vec<UnitOfWork<'a>> {
        self.members
            .iter()
            .filter_map(|m| {
                let (source, event_type, account_id, fingerprint, released) = match &m.subject {
                    Subject::Pending(i) => {
                        let p = &pending[*i];
                        let kind = p.event.kind.wire_name();
                        (
                            &p.event.source,
                            kind,
                            &p.event.account_id,
                            &p.fingerprint,
                            false,
                        )
                    }
                    Subject::Released(r) => {
                        let kind = r
                            .event
                            .as_ref()
                            .map_or("UNDECODABLE", |e| e.kind.wire_name());
                        (
                            &r.fact.source,
                            kind,
                            &r.account_id,
                            &r.fact.fingerprint,
                            true,
                        )
                    }
                };
                let effect = m.effect(pending)?;
                Some(UnitOfWork {
                    source,
                    event_type,
                    account_id,
                    fingerprint,
                    released,
                    effect,
                })
            })
            .collect()
    }

    /// The members that have a unit of work, in the order of [`Group::units`].
    pub fn members_with_units<'a>(
        &'a self,
        pending: &'a [Pending<'a>],
    ) -> impl Iterator<Item = &'a Member> {
        self.members.iter().filter(|m| m.effect(pending).is_some())
    }

    /// After the commit: carries the committed loan item and allocations into `snapshot` and
    /// answers per member.
    pub fn committed(self, pending: &[Pending<'_>], snapshot: &mut Snapshot) -> Vec<Answer> {
        let mut results = Vec::with_capacity(self.members.len());
        for member in self.members {
            // A reversal read this fact as not applied: once applied as anything but a
            // payment, it is a target no reversal may take.
            let applied = match (&member.subject, &member.judged) {
                (Subject::Pending(i), Judged::Apply(_)) => Some(&pending[*i].event),
                (Subject::Released(r), Judged::Apply(_)) => r.event.as_ref(),
                _ => None,
            };
            if let Some(event) =
                applied.filter(|e| !matches!(e.kind, EventKind::PaymentSettled { .. }))
                && let Some(target) = snapshot.targets.get_mut(&event.source)
            {
                *target = Target::NotAPayment(event.kind.wire_name().to_owned());
            }
            let result = match member.judged {
                Judged::Apply(applied) => {
                    match applied.allocation {
                        Some(AllocationWrite::Record(stored)) => {
                            let payment = stored.payment.clone();
                            snapshot.targets.insert(payment, Target::Applied(stored));
                        }
                        Some(AllocationWrite::MarkReversed {
                            payment,
                            reversal,
                            fact,
                        }) => {
                            if let Some(Target::Applied(stored)) =
                                snapshot.targets.get_mut(&payment)
                            {
                                stored.reversed_by = Some(reversal);
                                stored.reversal_fact = Some(fact);
                            }
                        }
                        None => {}
                    }
                    MessageResult::Applied
                }
                Judged::Stale => MessageResult::Stale,
                Judged::Reject(rejection) if rejection.code == servicing_domain::COLLISION => {
                    tracing::error!(
                        alert = "collision",
                        "same identity, different payload: the first fact stands"
                    );
                    MessageResult::Collision
                }
                Judged::Reject(rejection) => {
                    tracing::warn!(code = rejection.code, "business rejection quarantined");
                    MessageResult::Quarantined {
                        code: rejection.code.to_owned(),
                    }
                }
                Judged::Park(why) => {
                    tracing::info!(code = why.code(), "parked until the awaited fact applies");
                    MessageResult::Parked
                }
                Judged::Duplicate => MessageResult::Duplicate,
            };
            match member.subject {
                Subject::Pending(i) if member.parked_first => {
                    results.push(Answer::Message(i, MessageResult::Parked));
                    results.push(Answer::Released(pending[i].event.source.clone(), result));
                }
                Subject::Pending(i) => results.push(Answer::Message(i, result)),
                Subject::Released(r) => results.push(Answer::Released(r.fact.source, result)),
            }
        }
        if let Some(next) = self.next {
            snapshot.loan = Some(next);
        }
        results
    }
}

impl Member {
    /// What this fact commits next to its claim; `None` when it has nothing to commit: an
    /// already applied released fact, or a parked fact parked again (its claim already says so: only
    /// the loan item changes).
    pub(super) fn effect<'a>(&'a self, pending: &'a [Pending<'a>]) -> Option<Effect<'a>> {
        let released = matches!(self.subject, Subject::Released(_));
        Some(match &self.judged {
            Judged::Apply(applied) => Effect::Apply(applied),
            Judged::Stale => Effect::Stale,
            Judged::Reject(rejection) => {
                Effect::Reject(self.quarantine_entry(pending, rejection.code, &rejection.reason))
            }
            Judged::Park(_) if released => return None,
            Judged::Park(_) => Effect::Park,
            // A released fact's own PARKED claim holds its payload: nothing to confirm.
            Judged::Duplicate if released => return None,
            Judged::Duplicate => Effect::Confirm,
        })
    }

    /// What the quarantine keeps of this fact: raw body, identity, fingerprint, reason.
    fn quarantine_entry<'a>(
        &'a self,
        pending: &'a [Pending<'a>],
        code: &'a str,
        reason: &'a str,
    ) -> QuarantineEntry<'a> {
        match &self.subject {
            Subject::Pending(i) => pending[*i].quarantine_entry(code, reason),
            Subject::Released(r) => QuarantineEntry {
                source: Some(&r.fact.source),
                account_id: Some(&r.account_id),
                received_fingerprint: Some(&r.fact.fingerprint),
                ..QuarantineEntry::new(&r.fact.message_id, &r.fact.body, code, reason)
            },
        }
    }
}
