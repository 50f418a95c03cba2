//! The incident page as a person sees it: rendered by a real browser (Debian's headless
//! Chromium, which `.ci/run` installs) and read back pixel by pixel. Colour is kept for what
//! needs a person — a quiet run's page is grey all over, a troubled run's is not — and the
//! bars of the per-minute chart are drawn.

#![allow(clippy::unwrap_used)] // a test: a failed step is the failure

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use servicing_ops::incident::{
    AccountImpact, Collision, Counts, Delivery, Filters, IncidentReport, Manifest, MinuteCount,
    MoneyApplied, SuspectedDuplicate, Totals, Window,
};

#[test]
fn when_nothing_needs_a_person_the_page_should_be_grey_all_over_and_show_its_bars() {
    let Some(page) = screenshot("quiet", &quiet_run()) else {
        return;
    };
    let coloured = page.count(|p| chroma(p) > 40);
    assert_eq!(
        coloured, 0,
        "a run with nothing to look at has no colour ({coloured} coloured pixels)"
    );
    let bars = page.count(|p| p == [0x52, 0x52, 0x52]);
    assert!(
        bars > 500,
        "the applied bars of the per-minute chart are drawn ({bars} pixels)"
    );
}

#[test]
fn when_something_needs_a_person_the_page_should_show_it_in_colour() {
    let Some(page) = screenshot("troubled", &troubled_run()) else {
        return;
    };
    let alarm = page.count(|[r, g, b]| {
        let (r, g, b) = (i32::from(r), i32::from(g), i32::from(b));
        r > 150 && r > g + 60 && r > b + 60
    });
    assert!(
        alarm > 300,
        "collisions, quarantined deliveries and suspected duplicates are in red ({alarm} pixels)"
    );
}

#[test]
fn a_record_field_should_be_data_never_markup() {
    let mut report = troubled_run();
    let hostile = "\"><script>alert(1)</script>";
    report.accounts[0].account_id = hostile.into();
    report.accounts[0].facts[0].source_event_id = Some(hostile.into());
    report.accounts[0].collisions_found[0].received = serde_json::json!({"note": hostile});
    report.per_minute[0].source_system = hostile.into();
    report.accounts[0]
        .other_consumers
        .insert(hostile.into(), [(hostile.into(), 1)].into());
    let html = ledgerctl::incident_html::render(&report).expect("renders");
    assert!(!html.contains("<script>"), "every field escaped");
    assert!(
        html.contains("<td>ledger-postings</td>"),
        "the other consumers' decisions are on the page"
    );
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
}

/// An RGB screenshot.
struct Page {
    pixels: Vec<[u8; 3]>,
}

impl Page {
    fn count(&self, pick: impl Fn([u8; 3]) -> bool) -> usize {
        self.pixels.iter().filter(|p| pick(**p)).count()
    }
}

/// How far a pixel is from grey.
fn chroma(p: [u8; 3]) -> u8 {
    let [r, g, b] = p;
    r.max(g).max(b) - r.min(g).min(b)
}

/// The browser: `CHROMIUM`, else Debian's. Absent on a developer's machine the test says so
/// and passes; in CI (`CI` set) an absent browser fails it.
fn chromium() -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var("CHROMIUM").unwrap_or("/usr/bin/chromium".into()));
    if path.exists() {
        return Some(path);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "no browser at {}: .ci/run installs Debian's chromium",
        path.display()
    );
    eprintln!(
        "skipped: no browser at {} (apt-get install chromium, or set CHROMIUM)",
        path.display()
    );
    None
}

fn screenshot(name: &str, report: &IncidentReport) -> Option<Page> {
    let browser = chromium()?;
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("incident-page-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let html = dir.join("incident.html");
    std::fs::write(&html, ledgerctl::incident_html::render(report).unwrap()).unwrap();
    let png = dir.join("incident.png");
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            "--window-size=1200,2600",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", html.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the browser starts");
    let deadline = Instant::now() + Duration::from_secs(90);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the browser took more than 90 s to take a screenshot");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&png).expect("the browser wrote a screenshot"),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut buffer = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buffer).unwrap();
    let step = info.color_type.samples();
    assert!(step >= 3, "an RGB screenshot ({:?})", info.color_type);
    let pixels = buffer[..info.buffer_size()]
        .chunks_exact(step)
        .map(|p| [p[0], p[1], p[2]])
        .collect();
    Some(Page { pixels })
}

const PAYMENT: &str = "PAYMENT_SETTLED";

fn quiet_run() -> IncidentReport {
    let accounts: Vec<AccountImpact> = (1..=4)
        .map(|n| account(&format!("acc_{n:04}"), n * 10_000, false))
        .collect();
    report(accounts, Vec::new())
}

fn troubled_run() -> IncidentReport {
    let mut accounts = vec![
        account("acc_0001", 10_000, true),
        account("acc_0002", 20_000, false),
    ];
    accounts[1]
        .facts
        .push(delivery("prov-a", "pa-bad", "quarantined"));
    accounts[1].counts.quarantined += 1;
    let suspected = vec![SuspectedDuplicate {
        account_id: "acc_0002".into(),
        content_key: "k1:00".into(),
        amount_minor: 20_000,
        currency: Some("USD".into()),
        event_time: Some("2026-12-01T10:00:00Z".into()),
        first: "prov-a/pa-acc_0002".into(),
        first_decided_at: "2026-12-01T10:00:01.000Z".into(),
        second: "prov-b/pb-acc_0002".into(),
        second_decided_at: "2026-12-01T10:03:01.000Z".into(),
    }];
    report(accounts, suspected)
}

fn account(id: &str, amount: i64, collided: bool) -> AccountImpact {
    let mut counts = Counts {
        deliveries: 3,
        applied: 2,
        duplicates: 1,
        applied_amount_minor: amount,
        duplicate_amount_minor: amount,
        ..Counts::default()
    };
    let payment = format!("pa-{id}");
    let mut facts = vec![
        delivery("prov-a", &payment, "applied"),
        delivery("prov-a", &payment, "duplicate"),
        delivery("prov-b", &format!("fee-{id}"), "applied"),
    ];
    let mut collisions_found = Vec::new();
    if collided {
        counts.deliveries += 1;
        counts.collisions += 1;
        facts.push(delivery("prov-a", &payment, "collision"));
        collisions_found.push(Collision {
            source_system: "prov-a".into(),
            source_event_id: payment.clone(),
            message_id: "m-9".into(),
            decided_at: "2026-12-01T10:05:00.000Z".into(),
            received: serde_json::json!({"amountMinor": amount + 1}),
            stored: Some(serde_json::json!({"amountMinor": amount})),
        });
    }
    AccountImpact {
        account_id: id.into(),
        currency: Some("USD".into()),
        counts,
        facts,
        collisions_found,
        money_applied: vec![MoneyApplied {
            source_system: "prov-a".into(),
            source_event_id: payment,
            amount_minor: amount,
            currency: Some("USD".into()),
            decided_at: "2026-12-01T10:00:01.000Z".into(),
            split: Some(serde_json::json!({
                "allocation": {"fees": 500, "interest": 1500, "principal": amount - 2000, "credit": 0},
                "installmentsPaid": [{"installmentNo": 1, "amountMinor": amount - 500}],
                "appliedOn": "2026-12-01"
            })),
            reversed_by: None,
        }],
        bucket_changes: vec![serde_json::json!({
            "occurredAt": "2026-12-01T10:00:00Z", "fromBucket": "DPD_1_29", "toBucket": "CURRENT",
            "dpd": 0, "trigger": "PAYMENT", "triggerSourceSystem": "prov-a",
            "triggerSourceEventId": format!("pa-{id}")
        })],
        collections_actions: Vec::new(),
        suspected_duplicates: Vec::new(),
        // The ledger posted the payment; after a collision it quarantined the payment's event.
        other_consumers: [(
            "ledger-postings".to_owned(),
            [(
                if collided { "quarantined" } else { "posted" }.to_owned(),
                1,
            )]
            .into(),
        )]
        .into(),
    }
}

fn delivery(source: &str, event: &str, verdict: &str) -> Delivery {
    Delivery {
        account_from_quarantine: false,
        decided_at: "2026-12-01T10:00:01.000Z".into(),
        message_id: format!("m-{event}-{verdict}"),
        receive_count: Some(1),
        source_system: Some(source.into()),
        source_event_id: Some(event.into()),
        event_type: Some(PAYMENT.into()),
        event_time: Some("2026-12-01T10:00:00Z".into()),
        amount_minor: Some(10_000),
        currency: Some("USD".into()),
        verdict: verdict.into(),
        outcome: None,
        decided_by: "claim".into(),
        code: None,
    }
}

/// The report over the accounts, with its totals and one minute per account per source.
fn report(accounts: Vec<AccountImpact>, suspected: Vec<SuspectedDuplicate>) -> IncidentReport {
    let mut totals = Totals {
        accounts_touched: accounts.len() as u64,
        suspected_duplicates: suspected.len() as u64,
        ..Totals::default()
    };
    let mut per_minute = Vec::new();
    for (i, a) in accounts.iter().enumerate() {
        let c = &a.counts;
        let t = &mut totals.counts;
        t.deliveries += c.deliveries;
        t.applied += c.applied;
        t.duplicates += c.duplicates;
        t.collisions += c.collisions;
        t.quarantined += c.quarantined;
        t.applied_amount_minor += c.applied_amount_minor;
        t.duplicate_amount_minor += c.duplicate_amount_minor;
        totals.unique_facts += 2;
        for source in ["prov-a", "prov-b"] {
            per_minute.push(MinuteCount {
                minute: format!("2026-12-01T10:{:02}Z", i * 3),
                source_system: source.into(),
                counts: c.clone(),
            });
        }
    }
    totals.by_currency.insert(
        "USD".into(),
        [
            (
                "appliedAmountMinor".into(),
                totals.counts.applied_amount_minor,
            ),
            ("reversedAmountMinor".into(), 0),
            (
                "duplicateAmountMinor".into(),
                totals.counts.duplicate_amount_minor,
            ),
        ]
        .into(),
    );
    IncidentReport {
        report_version: servicing_ops::incident::INCIDENT_REPORT_VERSION,
        window: Window {
            from: "2026-12-01T10:00:00.000Z".into(),
            to: "2026-12-01T11:00:00.000Z".into(),
        },
        filters: Filters {
            consumer: "account-state".into(),
            source_system: None,
            account_id: None,
            lookback_minutes: 60,
        },
        accounts,
        suspected_duplicates: suspected,
        unattributed: Vec::new(),
        totals,
        per_minute,
        manifest: Manifest {
            generated_at: "2026-12-01T11:00:00.000Z".into(),
            tool: "ledgerctl".into(),
            tool_version: "test".into(),
            inputs: Vec::new(),
            records_read: 0,
            records_selected: 0,
            skipped_lines: 0,
            repeated_lines: 0,
            records_without_time: 0,
            table: None,
            queries: Vec::new(),
        },
    }
}
