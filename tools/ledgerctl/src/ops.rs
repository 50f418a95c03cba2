//! `ledgerctl reconcile | quarantine | send`: operations on a deployed table (endpoint and
//! credentials from the standard AWS variables, e.g. `source .local/env`).

use std::process::ExitCode;

use servicing_ops::{quarantine, reconcile, replay};

/// `--name value` options and positional arguments.
#[derive(Debug, Default)]
pub struct Args {
    options: Vec<(String, String)>,
    flags: Vec<String>,
    positional: Vec<String>,
}

impl Args {
    /// `flag_names` take no value.
    pub fn parse(args: &[String], flag_names: &[&str]) -> Result<Self, String> {
        let mut parsed = Args::default();
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            if let Some(name) = arg.strip_prefix("--") {
                if flag_names.contains(&name) {
                    parsed.flags.push(name.to_owned());
                } else {
                    let value = it.next().ok_or(format!("--{name} needs a value"))?;
                    parsed.options.push((name.to_owned(), value.clone()));
                }
            } else {
                parsed.positional.push(arg.clone());
            }
        }
        Ok(parsed)
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.options
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    fn required(&self, name: &str) -> Result<&str, String> {
        self.get(name).ok_or(format!("--{name} is required"))
    }

    fn number(&self, name: &str, default: i64) -> Result<i64, String> {
        self.get(name)
            .map(|v| {
                v.parse()
                    .map_err(|_| format!("--{name} must be a whole number, got {v:?}"))
            })
            .unwrap_or(Ok(default))
    }

    fn flag(&self, name: &str) -> bool {
        self.flags.iter().any(|f| f == name)
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

fn read_lines(path: &str) -> Result<Vec<Vec<u8>>, String> {
    let input = std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    Ok(input
        .split(|b| *b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .map(<[u8]>::to_vec)
        .collect())
}

fn exit(result: Result<bool, String>) -> ExitCode {
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(problem) => {
            eprintln!("{problem}");
            ExitCode::FAILURE
        }
    }
}

/// `reconcile --table T [--consumer C] [--hours N] [--source FILE]`
pub fn reconcile(args: &[String]) -> Result<ExitCode, String> {
    let args = Args::parse(args, &[])?;
    let table = args.required("table")?.to_owned();
    let consumer = args.get("consumer").unwrap_or("account-state").to_owned();
    let hours = args.number("hours", 24)?;
    let source = args.get("source").map(read_lines).transpose()?;
    let now = servicing_ops::now_epoch_secs();
    let result = runtime()?.block_on(async {
        let dynamodb = aws_sdk_dynamodb::Client::new(&aws_setup::load().await);
        let report = reconcile::reconcile(
            &dynamodb,
            &table,
            &consumer,
            (now - hours * 3600, now + 1),
            source.as_deref(),
        )
        .await?;
        for line in report.lines() {
            println!("{line}");
        }
        Ok(report.holds())
    });
    Ok(exit(result))
}

/// `quarantine list|inspect|redrive ...`
pub fn quarantine(args: &[String]) -> Result<ExitCode, String> {
    let (action, rest) = args
        .split_first()
        .ok_or("quarantine needs list, inspect or redrive")?;
    let args = Args::parse(rest, &["allow-beyond-retention"])?;
    let window = servicing_ops::quarantine::RedriveWindow {
        claim_retention_secs: args
            .number("retention-days", 35)?
            .checked_mul(86_400)
            .filter(|s| *s > 0)
            .ok_or("--retention-days must be a positive number of days")?,
        allow_beyond_retention: args.flag("allow-beyond-retention"),
    };
    let table = args.required("table")?.to_owned();
    let result = runtime()?.block_on(async {
        let sdk = aws_setup::load().await;
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
        match action.as_str() {
            "list" => {
                let items = quarantine::list(&dynamodb, &table, args.get("consumer")).await?;
                for q in &items {
                    let source = q.source.as_ref().map(ToString::to_string).unwrap_or_else(|| "-".into());
                    println!("{}\t{}\t{}\t{}\t{}\tredriven {}x", q.id, q.consumer, q.code, source, q.reason, q.redrive_count);
                }
                println!("{} quarantined", items.len());
                Ok(true)
            }
            "inspect" => {
                for id in &args.positional {
                    let q = quarantine::inspect(&dynamodb, &table, id).await?;
                    println!("id:          {}\nconsumer:    {}\ncode:        {}\nreason:      {}\nmessage id:  {}\nsource:      {}\naccount:     {}\nredriven:    {}x\nraw body:    {}\n",
                        q.id, q.consumer, q.code, q.reason, q.message_id,
                        q.source.as_ref().map(ToString::to_string).unwrap_or_default(),
                        q.account_id.unwrap_or_default(), q.redrive_count, q.raw_body);
                }
                Ok(true)
            }
            "redrive" => {
                let queue = args.required("queue")?;
                let sqs = aws_sdk_sqs::Client::new(&sdk);
                let mut all_ok = true;
                for id in &args.positional {
                    match quarantine::redrive(&dynamodb, &sqs, &table, queue, id, window).await {
                        Ok(r) => println!("redriven {} as message {}{}", r.id, r.message_id,
                            if r.released_claim { " (its REJECTED claim was released)" } else { "" }),
                        Err(why) => {
                            all_ok = false;
                            eprintln!("refused {id}: {why}");
                        }
                    }
                }
                Ok(all_ok)
            }
            other => Err(format!("unknown quarantine action {other:?}")),
        }
    });
    Ok(exit(result))
}

/// `parked list --table T`
pub fn parked(args: &[String]) -> Result<ExitCode, String> {
    let (action, rest) = args.split_first().ok_or("parked needs list")?;
    if action != "list" {
        return Err(format!("unknown parked action {action:?}"));
    }
    let args = Args::parse(rest, &[])?;
    let table = args.required("table")?.to_owned();
    let result = runtime()?.block_on(async {
        let sdk = aws_setup::load().await;
        let store = servicing_store::ServicingStore::new(
            aws_sdk_dynamodb::Client::new(&sdk),
            servicing_store::StoreConfig::new(&table, "account-state"),
        );
        let parked = servicing_ops::parked::list(&store).await?;
        for view in &parked {
            println!("{}", view.line());
        }
        println!("{} parked", parked.len());
        Ok(true)
    });
    Ok(exit(result))
}

/// `send --table T --queue URL FILE [--retention-days N] [--allow-beyond-retention]`
pub fn send(args: &[String]) -> Result<ExitCode, String> {
    let args = Args::parse(args, &["allow-beyond-retention"])?;
    let table = args.required("table")?.to_owned();
    let queue = args.required("queue")?.to_owned();
    let path = args
        .positional
        .first()
        .ok_or("the events file is required")?;
    let lines = read_lines(path)?;
    let allow = args.flag("allow-beyond-retention");
    let result = runtime()?.block_on(async {
        let sdk = aws_setup::load().await;
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
        let refusals = replay::check(&dynamodb, &table, &lines).await?;
        for r in &refusals {
            eprintln!("line {}: {}", r.line, r.reason);
        }
        if !refusals.is_empty() && !allow {
            eprintln!("refused: {} facts may apply twice; nothing was sent (--allow-beyond-retention after checking them)", refusals.len());
            return Ok(false);
        }
        let sent = replay::send(&aws_sdk_sqs::Client::new(&sdk), &queue, &lines).await?;
        println!("sent {sent} messages to {queue}");
        Ok(true)
    });
    Ok(exit(result))
}
