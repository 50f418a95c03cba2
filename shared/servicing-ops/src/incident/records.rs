//! The decision records an incident is reconstructed from, read from files, plain or gzip: JSON
//! Lines as the functions print them (the archive's objects, a local collection), log events
//! (`{"timestamp", "message"}` lines, a subscription's `logEvents` envelope, `aws logs
//! filter-log-events` output, an S3 export's `<time> <message>` lines), or a raw log dump in
//! which other lines (EMF, platform lines) are skipped. Every input is hashed for the manifest.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context;
use chrono::{DateTime, TimeZone, Utc};
use serde::Serialize;
use serde_json::Value;
use servicing_telemetry::{DecisionRecord, RecordKind, decision_time};
use sha2::{Digest, Sha256};

/// A decision record and when it was decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Timed {
    pub at: DateTime<Utc>,
    pub record: DecisionRecord,
}

/// One input file, as the manifest names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Input {
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
    pub lines: u64,
    pub records: u64,
}

/// Every record read, with what was left aside and why.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Collected {
    pub records: Vec<Timed>,
    pub inputs: Vec<Input>,
    /// Lines that are no decision record (EMF, other log lines, not JSON).
    pub skipped_lines: u64,
    /// The same line twice (overlapping exports): counted once.
    pub repeated_lines: u64,
    /// Decision records with no time (neither `decidedAt` nor a log timestamp): no window can
    /// hold them.
    pub without_time: u64,
}

/// Reads `paths` (files, or directories read recursively in name order).
pub fn read(paths: &[PathBuf]) -> anyhow::Result<Collected> {
    let mut files = Vec::new();
    for path in paths {
        collect_files(path, &mut files)?;
    }
    let mut collected = Collected::default();
    let mut seen = HashSet::new();
    for file in files {
        let bytes =
            std::fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
        // Firehose writes the archive's objects gzip-compressed.
        let plain = if bytes.starts_with(&[0x1f, 0x8b]) {
            let mut out = Vec::new();
            flate2::read::MultiGzDecoder::new(bytes.as_slice())
                .read_to_end(&mut out)
                .with_context(|| format!("{} is not a readable gzip file", file.display()))?;
            out
        } else {
            bytes.clone()
        };
        let text = String::from_utf8_lossy(&plain);
        let mut input = Input {
            path: file.display().to_string(),
            bytes: bytes.len() as u64,
            sha256: format!("{:x}", Sha256::digest(&bytes)),
            lines: 0,
            records: 0,
        };
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            input.lines += 1;
            let found = records_of_line(line);
            if found.is_empty() {
                collected.skipped_lines += 1;
            }
            for (record, logged_at) in found {
                input.records += 1;
                // A record with its own time is the same record in any wrapping (an archive
                // line and a log export of it); without one, the log's time tells them apart.
                let canonical = serde_json::to_string(&record.to_json()).unwrap_or_default();
                let when = if record.decided_at.is_some() {
                    None
                } else {
                    logged_at
                };
                if !seen.insert((canonical, when)) {
                    collected.repeated_lines += 1;
                    continue;
                }
                match record
                    .decided_at
                    .as_deref()
                    .and_then(parse_time)
                    .or(logged_at)
                {
                    Some(at) => collected.records.push(Timed { at, record }),
                    None => collected.without_time += 1,
                }
            }
        }
        if input.records == 0 && input.lines > 0 {
            tracing::warn!(path = %input.path, lines = input.lines, "an input holds no decision record");
        }
        collected.inputs.push(input);
    }
    if collected.records.is_empty() && collected.skipped_lines > 0 {
        anyhow::bail!(
            "the inputs hold {} lines and no decision record: not decision records, or a format this reader does not know",
            collected.skipped_lines
        );
    }
    collected.records.sort_by_key(|t| t.at);
    Ok(collected)
}

/// The decision records of a list of lines (as [`read`] reads a file), for records collected
/// in memory.
pub fn from_lines<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<Timed> {
    let mut out: Vec<Timed> = lines
        .into_iter()
        .flat_map(records_of_line)
        .filter_map(|(record, logged_at)| {
            let at = record
                .decided_at
                .as_deref()
                .and_then(parse_time)
                .or(logged_at)?;
            Some(Timed { at, record })
        })
        .collect();
    out.sort_by_key(|t| t.at);
    out
}

fn collect_files(path: &Path, into: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("cannot list {}", path.display()))?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()?;
        entries.sort();
        for entry in entries {
            collect_files(&entry, into)?;
        }
        Ok(())
    } else if path.is_file() {
        into.push(path.to_owned());
        Ok(())
    } else {
        anyhow::bail!("{}: no such file or directory", path.display())
    }
}

/// A line's decision records with the log's own timestamp when it has one: the record itself,
/// a log event wrapping it, or a subscription envelope of log events.
fn records_of_line(line: &str) -> Vec<(DecisionRecord, Option<DateTime<Utc>>)> {
    let line = line.trim();
    let Ok(value) = serde_json::from_str::<Value>(line) else {
        // A CloudWatch Logs export to S3: `<RFC 3339 time> <message>`.
        return line
            .split_once(' ')
            .and_then(|(time, message)| {
                let inner = serde_json::from_str::<Value>(message.trim()).ok()?;
                Some((decision(&inner)?, parse_time(time)))
            })
            .into_iter()
            .collect();
    };
    // A subscription's envelope (`logEvents`), `aws logs filter-log-events` output (`events`).
    if let Some(events) = ["logEvents", "events"]
        .iter()
        .find_map(|k| value.get(*k).and_then(Value::as_array))
    {
        return events.iter().filter_map(of_log_event).collect();
    }
    of_log_event(&value)
        .or_else(|| decision(&value).map(|r| (r, None)))
        .into_iter()
        .collect()
}

fn of_log_event(event: &Value) -> Option<(DecisionRecord, Option<DateTime<Utc>>)> {
    let message = event.get("message")?;
    let inner = match message {
        Value::String(text) => serde_json::from_str::<Value>(text.trim()).ok()?,
        other => other.clone(),
    };
    let logged_at = match event.get("timestamp") {
        Some(Value::Number(ms)) => ms
            .as_i64()
            .and_then(|ms| Utc.timestamp_millis_opt(ms).single()),
        Some(Value::String(text)) => parse_time(text),
        _ => None,
    };
    Some((decision(&inner)?, logged_at))
}

fn decision(value: &Value) -> Option<DecisionRecord> {
    if value.get("kind")? != "decision" {
        return None;
    }
    let record: DecisionRecord = serde_json::from_value(value.clone()).ok()?;
    (record.kind == RecordKind::Decision).then_some(record)
}

/// An RFC 3339 time, as `--from`/`--to` and `decidedAt` give it.
pub fn parse_time(text: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// A time as the report writes it (the `decidedAt` form).
pub fn format_time(at: DateTime<Utc>) -> String {
    decision_time(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORD: &str = r#"{"recordVersion":1,"kind":"decision","consumer":"account-state","messageId":"m1","verdict":"applied","decidedBy":"claim","decidedAt":"2026-11-02T10:00:01.000Z","level":"INFO"}"#;

    #[test]
    fn when_lines_are_records_log_events_or_other_output_should_read_only_the_records() {
        let wrapped = serde_json::json!({"timestamp": 1_793_700_000_000_i64, "message": RECORD.replace(r#","decidedAt":"2026-11-02T10:00:01.000Z""#, "")}).to_string();
        let envelope = serde_json::json!({"messageType": "DATA_MESSAGE", "logEvents": [
            {"id": "1", "timestamp": 1, "message": RECORD}, {"id": "2", "timestamp": 2, "message": "START RequestId"}]}).to_string();
        let emf = r#"{"_aws":{"Timestamp":1},"Applied":1,"Consumer":"account-state"}"#;
        let found = from_lines([RECORD, wrapped.as_str(), envelope.as_str(), emf, "not json"]);
        assert_eq!(
            found.len(),
            3,
            "the record, the log event, the envelope's record"
        );
        let times: Vec<i64> = found.iter().map(|t| t.at.timestamp_millis()).collect();
        // `decidedAt` when the record has it, else the log event's timestamp; sorted by time.
        let decided = parse_time("2026-11-02T10:00:01.000Z")
            .expect("fixture")
            .timestamp_millis();
        let mut expected = vec![decided, decided, 1_793_700_000_000];
        expected.sort();
        assert_eq!(times, expected);
        assert!(found.iter().all(|t| t.record.message_id == "m1"));
    }

    #[test]
    fn when_inputs_repeat_a_record_plain_or_gzip_should_count_it_once_and_hash_each_input() {
        let dir = std::env::temp_dir().join(format!("incident-records-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("fixture");
        std::fs::write(dir.join("a.jsonl"), format!("{RECORD}\n{RECORD}\nSTART\n"))
            .expect("fixture");
        // The same record again, gzip-compressed as Firehose writes the archive's objects.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut gz, format!("{RECORD}\n").as_bytes()).expect("fixture");
        std::fs::write(dir.join("b.gz"), gz.finish().expect("fixture")).expect("fixture");
        let collected = read(std::slice::from_ref(&dir)).expect("fixture");
        std::fs::remove_dir_all(&dir).expect("fixture");
        assert_eq!(
            (
                collected.records.len(),
                collected.repeated_lines,
                collected.skipped_lines
            ),
            (1, 2, 1),
            "the repeated line and the gzip copy count once"
        );
        assert_eq!(collected.inputs[1].lines, 1, "read through gzip");
        assert_eq!(collected.inputs[0].lines, 3);
        assert_eq!(collected.inputs[0].sha256.len(), 64);
    }
}
