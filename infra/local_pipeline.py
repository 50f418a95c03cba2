"""The local pipeline: the SAME template.yaml, built with `sam build` (cargo-lambda, host
architecture) and deployed to MiniStack with `sam deploy` (AWS_ENDPOINT_URL set); then
sample streams with injected duplicates go through the deployed stack, and the final state,
the counts and a reconciliation line are printed. Exits non-zero when an invariant fails.

Run through infra/demo.sh (which starts the engines and installs the tools); it uses the boto3
pinned in MiniStack's venv and talks to MiniStack only through AWS_ENDPOINT_URL.
"""

from __future__ import annotations

import datetime
import http.server
import json
import os
import random
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from pathlib import Path

import boto3

ROOT = Path(__file__).resolve().parent.parent
LOCAL = ROOT / ".local"
STACK = os.environ.get("STACK_NAME", "loan-servicing-local")
SAMPLES = ["basic", "delinquent", "aging"]
# Opens the account the API calls pay into.
API_SAMPLE = "api"
API_ACCOUNT = "acc_9001"
# (Idempotency-Key, amount, times sent): retries must not pay twice.
API_PAYMENTS = [("demo-pay-1", 12_000, 3), ("demo-pay-2", 3_000, 2)]
FUNCTIONS = ["account-state", "outbox-relay", "collections", "ledger-postings", "payments-api", "reconciler", "aging"]


def step(message: str) -> None:
    print(f"==> {message}", flush=True)


def client(service: str):
    return boto3.client(service)


# ------------------------------------------------------------------ build
def build() -> Path:
    """One workspace-wide cargo-lambda build, then `sam build` (which then only copies)."""
    env = dict(os.environ, SAM_CLI_TELEMETRY="0", SAM_BUILD_MODE="debug")
    env["PATH"] = f"{LOCAL / 'venv-tools' / 'bin'}:{env['PATH']}"
    packages = [arg for name in FUNCTIONS for arg in ("-p", name)]
    step("cargo lambda build (debug, host architecture)")
    subprocess.run(["cargo", "lambda", "build", "--locked", *packages], cwd=ROOT, env=env, check=True)
    step("sam build")
    subprocess.run(
        ["sam", "build", "--parameter-overrides", "Architecture=x86_64"],
        cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL,
    )
    return ROOT / ".aws-sam" / "build" / "template.yaml"


# ------------------------------------------------------------------ deploy
def parameters(notification_url: str) -> dict[str, str]:
    return {
        "Architecture": "x86_64",
        "NotificationUrl": notification_url,
        "NotificationDeduplicates": "false",
        "NotificationStatusUrl": f"{notification_url}/status",
        # Fast local feedback: retry deferred facts quickly.
        "CollectionsBatchWindowSeconds": "0",
        "RelayBatchWindowSeconds": "0",
        # MiniStack gaps: it refuses alarms with Metrics (metric math: the duplicate-ratio
        # anomaly alarm) and has no AWS::CloudWatch::InsightRule or AWS::Athena::NamedQuery.
        "CreateDuplicateInsights": "false",
        "CreateEvidenceQueries": "false",
        # No AWS::Events::Archive either: the run backfills with ledgerctl ledger backfill.
        "CreateEventArchive": "false",
        # Nor AWS::SecretsManager::ResourcePolicy (policy rule E9142 checks it instead).
        "CreateSecretPolicies": "false",
    }


def deploy(notification_url: str) -> dict[str, str]:
    """`sam deploy`, as on AWS (`docs/deploy.md`): AWS_ENDPOINT_URL points it at MiniStack."""
    env = dict(os.environ, SAM_CLI_TELEMETRY="0")
    env["PATH"] = f"{LOCAL / 'venv-tools' / 'bin'}:{env['PATH']}"
    overrides = [f"{k}={v}" for k, v in parameters(notification_url).items()]
    step(f"sam deploy --stack-name {STACK} (MiniStack at {os.environ['AWS_ENDPOINT_URL']})")
    result = subprocess.run(
        ["sam", "deploy", "--stack-name", STACK, "--resolve-s3", "--no-confirm-changeset",
         "--no-fail-on-empty-changeset", "--capabilities", "CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND",
         "--region", os.environ.get("AWS_REGION", "us-east-1"), "--parameter-overrides", *overrides],
        cwd=ROOT, env=env, capture_output=True, text=True,
    )
    stack = client("cloudformation").describe_stacks(StackName=STACK)["Stacks"][0]
    status = stack["StackStatus"]
    if result.returncode != 0 or not status.endswith("_COMPLETE") or "ROLLBACK" in status:
        print(result.stdout[-4000:], result.stderr[-4000:], sep="\n")
        raise SystemExit(f"sam deploy of {STACK} failed: {status}")
    step(f"stack {STACK}: {status}")
    return {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}


# ------------------------------------------------------------------ the run
class Receiver(http.server.BaseHTTPRequestHandler):
    """The customer-notification endpoint, as a counterparty that does NOT deduplicate: every
    call is a notice to the customer (the run checks no actionId is called twice); `GET
    .../status/<actionId>` says whether it has one (`{"received": true|false}`), which collections asks
    before repeating a call whose outcome it does not know (the stack is deployed with
    NotificationDeduplicates=false)."""

    calls: list[tuple[str, dict]] = []

    def do_POST(self):  # noqa: N802 (http.server naming)
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        key = self.headers.get("Idempotency-Key", "")
        Receiver.calls.append((key, json.loads(body or b"{}")))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"accepted":true}')

    def do_GET(self):  # noqa: N802
        action_id = urllib.parse.unquote(self.path.rsplit("/status/", 1)[-1])
        has = any(k == action_id for k, _ in Receiver.calls)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps({"received": has}).encode())

    def log_message(self, *args):  # keep the run's output readable
        pass


def start_receiver() -> str:
    """RECEIVER_BIND / RECEIVER_HOST let Lambdas in containers (LocalStack) reach it."""
    bind = os.environ.get("RECEIVER_BIND", "127.0.0.1")
    server = http.server.ThreadingHTTPServer((bind, int(os.environ.get("RECEIVER_PORT", "8799"))), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://{os.environ.get('RECEIVER_HOST', '127.0.0.1')}:{server.server_address[1]}/notifications"


def deliveries(seed: int, duplicate_share: float) -> list[str]:
    """Each sample in order, but its reversals sent first (they overtake their payment and the
    account's opening: parked, applied right after their payment, which restores the business
    order); copies of a share of the lines land somewhere after their original."""
    rng = random.Random(seed)
    out: list[str] = []
    for name in [*SAMPLES, API_SAMPLE]:
        lines = [l for l in (ROOT / "fixtures" / "samples" / f"{name}.jsonl").read_text().splitlines() if l.strip()]
        early = [l for l in lines if json.loads(l)["eventType"] == "PAYMENT_REVERSED"]
        lines = early + [l for l in lines if l not in early]
        stream = list(lines)
        for _ in range(round(len(lines) * duplicate_share)):
            i = rng.randrange(len(lines))
            first = stream.index(lines[i])
            stream.insert(rng.randint(first + 1, len(stream)), lines[i])
        out.extend(stream)
    return out


def business_days(bodies: list[str]) -> list[list[str]]:
    """The deliveries cut where an account's business day moves on (a line dated later than
    every earlier line of its account), keeping their order."""
    days: list[list[str]] = [[]]
    latest: dict[str, str] = {}
    for body in bodies:
        event = json.loads(body)
        account, date = event["accountId"], event["eventTime"][:10]
        if days[-1] and date > latest.get(account, date):
            days.append([])
        latest[account] = max(date, latest.get(account, date))
        days[-1].append(body)
    return [day for day in days if day]


def feed(queue_url: str, bodies: list[str]) -> None:
    sqs = client("sqs")
    for i in range(0, len(bodies), 10):
        entries = [
            {
                "Id": str(n),
                "MessageBody": body,
                "MessageGroupId": json.loads(body)["accountId"],
                # Distinct per delivery, unlike a producer's (contract, "Transport": from the
                # identity): this harness stands for the duplicates SQS's 5-minute window does
                # not catch (redeliveries, resends after the window), so it lets them through.
                "MessageDeduplicationId": uuid.uuid4().hex,
            }
            for n, body in enumerate(bodies[i : i + 10])
        ]
        failed = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries).get("Failed", [])
        if failed:
            raise SystemExit(f"could not send: {failed}")


def pending(queue_url: str) -> int:
    attrs = client("sqs").get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return sum(int(v) for v in attrs.values())


def claims_by_verdict(table: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    paginator = client("dynamodb").get_paginator("scan")
    for page in paginator.paginate(
        TableName=table,
        FilterExpression="itemType = :c AND consumer = :a",
        ExpressionAttributeValues={":c": {"S": "CLAIM"}, ":a": {"S": "account-state"}},
    ):
        for item in page["Items"]:
            verdict = item["verdict"]["S"]
            counts[verdict] = counts.get(verdict, 0) + 1
    return counts


def quarantined(table: str) -> int:
    paginator = client("dynamodb").get_paginator("scan")
    return sum(
        page["Count"]
        for page in paginator.paginate(
            TableName=table, FilterExpression="itemType = :q", ExpressionAttributeValues={":q": {"S": "QUARANTINE"}}
        )
    )


def actions_by_status(table: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    paginator = client("dynamodb").get_paginator("scan")
    for page in paginator.paginate(
        TableName=table, FilterExpression="itemType = :a", ExpressionAttributeValues={":a": {"S": "ACTION"}}
    ):
        for item in page["Items"]:
            counts[item["status"]["S"]] = counts.get(item["status"]["S"], 0) + 1
    return counts


def wait_quiet(outputs: dict[str, str], expected_claims: int, quiet_polls: int = 4) -> None:
    """Quiet = every queue empty, every fact claimed, and nothing moving for a few polls."""
    queues = [outputs["ServicingQueueUrl"], outputs["CollectionsQueueUrl"], outputs["LedgerQueueUrl"]]
    deadline, calm, last = time.time() + 180, 0, None
    while time.time() < deadline:
        snapshot = (tuple(pending(q) for q in queues), sum(claims_by_verdict(outputs["ServicingTableName"]).values()), len(Receiver.calls))
        if not any(snapshot[0]) and snapshot[1] >= expected_claims and snapshot == last:
            calm += 1
            if calm >= quiet_polls:
                return
        else:
            calm = 0
        if snapshot != last:
            print(f"   queues {snapshot[0]}, facts claimed {snapshot[1]}/{expected_claims}, notifications {snapshot[2]}", flush=True)
        last = snapshot
        time.sleep(0.5)
    raise SystemExit("the pipeline did not settle within 180 s")


class Api:
    """The deployed HTTP API, called the way a client would: SigV4-signed (IAM authorizer)."""

    def __init__(self, api_id: str):
        endpoint = os.environ["AWS_ENDPOINT_URL"].rstrip("/")
        # MiniStack's path form of the execute-api host (no wildcard DNS needed).
        self.base = f"{endpoint}/_aws/execute-api/{api_id}/$default"
        self.credentials = boto3.Session().get_credentials()

    def call(self, method: str, path: str, body: dict | None = None, key: str | None = None) -> tuple[int, dict, dict]:
        import urllib.error
        import urllib.request

        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Idempotency-Key"] = key
        request = AWSRequest(method=method, url=self.base + path, data=data, headers=headers)
        SigV4Auth(self.credentials, "execute-api", os.environ.get("AWS_REGION", "us-east-1")).add_auth(request)
        prepared = urllib.request.Request(self.base + path, data=data, method=method, headers=dict(request.headers))
        try:
            with urllib.request.urlopen(prepared, timeout=30) as response:
                return response.status, dict(response.headers), json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), json.loads(e.read() or b"{}")


def api_payments(api: Api) -> bool:
    """Each payment sent several times with its key; a key reused with another body is refused."""
    ok = True
    for key, amount, times in API_PAYMENTS:
        body = {"accountId": API_ACCOUNT, "amountMinor": amount, "currency": "EUR", "reference": f"demo {key}"}
        for attempt in range(1, times + 1):
            status, headers, answer = api.call("POST", "/v1/payments", body, key)
            replayed = headers.get("Idempotent-Replayed") or headers.get("idempotent-replayed")
            print(f"   POST /v1/payments key={key} attempt {attempt}: {status} {answer.get('operationId', answer.get('title'))}"
                  f"{' (replayed)' if replayed else ''}")
            ok &= status == 202
    status, _, answer = api.call("POST", "/v1/payments", {"accountId": API_ACCOUNT, "amountMinor": 1, "currency": "EUR", "reference": "x"}, API_PAYMENTS[0][0])
    print(f"   POST /v1/payments key={API_PAYMENTS[0][0]} with another body: {status} {answer.get('title')}")
    return ok and status == 422


def wire_http_api_routes(outputs: dict[str, str]) -> None:
    """MiniStack gap, worked around here only: its CloudFormation creates the HTTP API but not
    the routes and integration that SAM puts in the API's OpenAPI `Body`. Create them through
    the API Gateway v2 API from the template's own `HttpApi` events (idempotent)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    # Intrinsic tags (!Ref, !GetAtt, ...) are irrelevant here: read them as plain values.
    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    template = yaml.load((ROOT / "template.yaml").read_text(), Loader=Loader)
    function = template["Resources"]["PaymentsApiFunction"]
    route_keys = [
        f"{e['Properties']['Method']} {e['Properties']['Path']}"
        for e in function["Properties"]["Events"].values()
        if e["Type"] == "HttpApi"
    ]
    api = client("apigatewayv2")
    api_id = outputs["PaymentsApiId"]
    existing = {r["RouteKey"] for r in api.get_routes(ApiId=api_id)["Items"]}
    missing = [k for k in route_keys if k not in existing]
    if not missing:
        return
    arn = client("lambda").get_function(FunctionName=outputs["PaymentsApiFunctionName"])["Configuration"]["FunctionArn"]
    integration = api.create_integration(
        ApiId=api_id, IntegrationType="AWS_PROXY", IntegrationUri=arn, PayloadFormatVersion="2.0"
    )["IntegrationId"]
    for key in missing:
        api.create_route(ApiId=api_id, RouteKey=key, AuthorizationType="AWS_IAM", Target=f"integrations/{integration}")
    step(f"MiniStack workaround: created HTTP API routes {missing}")


def write_env(outputs: dict[str, str]) -> Path:
    """`source .local/env`: the local stack for ledgerctl, the AWS CLI and a function binary —
    endpoint, region and credentials, the stack, every output and every variable the functions
    read. Exported, so that a tool started from that shell talks to MiniStack, never to the
    account the shell's default credentials reach."""
    import shlex

    path = LOCAL / "env"
    values = {
        "AWS_ENDPOINT_URL": os.environ["AWS_ENDPOINT_URL"],
        "AWS_REGION": os.environ.get("AWS_REGION", "us-east-1"),
        "AWS_DEFAULT_REGION": os.environ.get("AWS_REGION", "us-east-1"),
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "STACK_NAME": STACK,
        "TABLE_NAME": outputs["ServicingTableName"],
        "SERVICING_QUEUE_URL": outputs["ServicingQueueUrl"],
        "EVENT_BUS_NAME": outputs["ServicingEventBusName"],
        **dict(sorted(outputs.items())),
    }
    lines = ["# source .local/env: the local stack (written by infra/demo.sh)"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in values.items()]
    # No profile or session token may redirect a local command to a real account.
    lines.append("unset AWS_PROFILE AWS_SESSION_TOKEN")
    path.write_text("\n".join(lines) + "\n")
    return path


DECIDING_FUNCTIONS = ["AccountState", "OutboxRelay", "Collections", "LedgerPostings", "PaymentsApi"]


def collect_decisions(outputs: dict[str, str], since_ms: int) -> Path:
    """The run's decision records from the deciding functions' log groups: what the
    subscription filters archive on AWS (MiniStack stores the filters but delivers nothing)."""
    logs, lam = client("logs"), client("lambda")
    path = LOCAL / "decision-records.jsonl"
    lines = []
    for name in DECIDING_FUNCTIONS:
        function = outputs[f"{name}FunctionName"]
        config = lam.get_function_configuration(FunctionName=function)
        group = (config.get("LoggingConfig") or {}).get("LogGroup") or f"/aws/lambda/{function}"
        for page in logs.get_paginator("filter_log_events").paginate(logGroupName=group, startTime=since_ms):
            for event in page.get("events", []):
                message = event.get("message", "").strip()
                if '"kind":"decision"' in message:
                    lines.append(message)
    path.write_text("\n".join(lines) + ("\n" if lines else ""))
    return path


def incident_report(table: str, records: Path, since: float) -> bool:
    """`ledgerctl incident` over this run: its HTML and JSON, and the summary lines."""
    window = [
        "--from", datetime.datetime.fromtimestamp(since - 60, datetime.timezone.utc).isoformat(timespec="seconds"),
        "--to", datetime.datetime.fromtimestamp(time.time() + 60, datetime.timezone.utc).isoformat(timespec="seconds"),
    ]
    ok = True
    for fmt in ("json", "html"):
        out = LOCAL / f"incident.{fmt}"
        result = subprocess.run(
            ["cargo", "run", "--quiet", "--locked", "-p", "ledgerctl", "--", "incident", *window,
             "--records", str(records), "--table", table, "--format", fmt, "--out", str(out)],
            cwd=ROOT, capture_output=True, text=True,
        )
        ok &= result.returncode == 0 and out.exists()
        if fmt == "html" or result.returncode != 0:
            for line in result.stderr.strip().splitlines():
                print(f"   {line}")
    print(f"   incident report: {LOCAL / 'incident.html'} (JSON: {LOCAL / 'incident.json'})")
    return ok


def main() -> int:
    started = time.time()
    notification_url = start_receiver()
    build()
    outputs = deploy(notification_url)
    wire_http_api_routes(outputs)
    step(f"wrote {write_env(outputs)}")

    before = claims_by_verdict(outputs["ServicingTableName"])
    bodies = deliveries(seed=int(os.environ.get("SEED", "7")), duplicate_share=0.5)
    distinct = len(set(bodies))
    step(f"sending {len(bodies)} deliveries ({distinct} distinct facts, {len(bodies) - distinct} injected duplicates) to the servicing queue")
    # Business days pass between an account's dates: each day's deliveries settle (relay,
    # collections and the notification call included) before the next day's are sent, as in
    # production — else a cure sent a second after the worsening it follows would be known
    # when the notice is due, and the notice rightly superseded.
    seen: set[str] = set()
    for day in business_days(bodies):
        feed(outputs["ServicingQueueUrl"], day)
        seen.update(day)
        wait_quiet(outputs, expected_claims=len(seen))

    api = Api(outputs["PaymentsApiId"])
    step(f"payments through the deployed API ({len(API_PAYMENTS)} payments, each retried with its Idempotency-Key)")
    api_ok = api_payments(api)
    distinct += len(API_PAYMENTS)
    wait_quiet(outputs, expected_claims=distinct)

    table = outputs["ServicingTableName"]
    ok = True
    for name in SAMPLES:
        expected = ROOT / "fixtures" / "samples" / f"{name}.expected.json"
        account = json.loads(expected.read_text())["accountId"]
        step(f"final state of {account} (expected: {expected.relative_to(ROOT)})")
        result = subprocess.run(
            ["cargo", "run", "--quiet", "--locked", "-p", "ledgerctl", "--", "state", "--table", table, account, "--expect", str(expected)],
            cwd=ROOT,
        )
        ok &= result.returncode == 0

    step("every account, read through the deployed API (GET /v1/loans/{id})")
    accounts = [json.loads((ROOT / "fixtures" / "samples" / f"{n}.expected.json").read_text())["accountId"] for n in SAMPLES]
    for account in [*accounts, API_ACCOUNT]:
        status, _, loan = api.call("GET", f"/v1/loans/{account}")
        print(f"   {account}: HTTP {status} principal {loan.get('principalOutstandingMinor')} interest {loan.get('interestOutstandingMinor')} "
              f"fees {loan.get('feesOutstandingMinor')} credit {loan.get('creditBalanceMinor')} limit {loan.get('creditLimitMinor')} "
              f"dpd {loan.get('dpd')} {loan.get('delinquencyBucket')} version {loan.get('version')}")
        ok &= status == 200
    status, _, loan = api.call("GET", f"/v1/loans/{API_ACCOUNT}")
    _, _, listed = api.call("GET", f"/v1/loans/{API_ACCOUNT}/allocations")
    paid = sum(amount for _, amount, _ in API_PAYMENTS)
    allocations = listed.get("allocations", [])
    api_ok &= status == 200 and loan.get("principalOutstandingMinor") == 100_000 - paid and len(allocations) == len(API_PAYMENTS)
    print(f"   {API_ACCOUNT}: {len(allocations)} allocations, principal {loan.get('principalOutstandingMinor')} "
          f"(expected {100_000 - paid}: each API payment applied once, whatever the retries) -> {'OK' if api_ok else 'MISMATCH'}")
    ok &= api_ok

    step("reconciliation of this run's queue deliveries (ledgerctl reconcile --source)")
    run_file = LOCAL / "last-run.jsonl"
    run_file.write_text("\n".join(bodies) + "\n")
    reconciled_source = subprocess.run(
        ["cargo", "run", "--quiet", "--locked", "-p", "ledgerctl", "--", "reconcile", "--table", table, "--source", str(run_file)],
        cwd=ROOT,
    )
    ok &= reconciled_source.returncode == 0
    step("the daily close's accounts in arrears (ledgerctl close --dry-run: read-only; the aging sample shows closes applied)")
    yesterday = (datetime.datetime.now(datetime.timezone.utc).date() - datetime.timedelta(days=1)).isoformat()
    dry = subprocess.run(
        ["cargo", "run", "--quiet", "--locked", "-p", "ledgerctl", "--", "close", "--table", table, "--date", yesterday, "--dry-run"],
        cwd=ROOT, capture_output=True, text=True,
    )
    print("   " + (dry.stdout.strip().splitlines() or [dry.stderr.strip()])[-1])
    ok &= dry.returncode == 0
    step("money (ledgerctl reconcile --money): every accepted API payment applied; applied less reversals by source, currency and date; "
         "the ledger of the accounts the window touched: each sub-ledger the sum of its entries and equal to servicing, the trial balance zero, cash posted = applied")
    money = subprocess.run(
        ["cargo", "run", "--quiet", "--locked", "-p", "ledgerctl", "--", "reconcile", "--table", table, "--money", "--grace-minutes", "0"],
        cwd=ROOT,
    )
    ok &= money.returncode == 0
    step(f"the accounting sub-ledger of {API_ACCOUNT} (ledgerctl ledger show), and a backfill over what was posted live (posts nothing)")
    shown = subprocess.run(
        ["cargo", "run", "--quiet", "--locked", "-p", "ledgerctl", "--", "ledger", "show", "--table", table, "--account", API_ACCOUNT],
        cwd=ROOT, capture_output=True, text=True,
    )
    for line in shown.stdout.strip().splitlines():
        print(f"   {line}")
    backfill = subprocess.run(
        ["cargo", "run", "--quiet", "--locked", "-p", "ledgerctl", "--", "ledger", "backfill", "--table", table],
        cwd=ROOT, capture_output=True, text=True,
    )
    print("   " + (backfill.stdout.strip().splitlines() or [backfill.stderr.strip()])[-1])
    ok &= shown.returncode == 0 and backfill.returncode == 0 and " 0 posted now," in backfill.stdout
    step("a fresh shell, as the README has operators do it: source .local/env && target/debug/ledgerctl --json actions list --all")
    # Nothing of this process's environment but PATH and HOME: .local/env alone must aim it.
    shell = subprocess.run(
        ["bash", "-c", "source .local/env && target/debug/ledgerctl --json actions list --all"],
        cwd=ROOT, env={"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")},
        capture_output=True, text=True,
    )
    aimed = f"target: endpoint {os.environ['AWS_ENDPOINT_URL']}" in shell.stderr
    print(f"   {shell.stderr.strip().splitlines()[0] if shell.stderr.strip() else '(no target line)'}")
    actions_listed = len(json.loads(shell.stdout or "[]")) if shell.returncode == 0 else -1
    print(f"   {actions_listed} actions listed -> {'OK' if aimed and shell.returncode == 0 else 'MISMATCH'}")
    ok &= aimed and shell.returncode == 0
    step("this run's decision records, from the deciding functions' logs (on AWS: the evidence bucket)")
    records = collect_decisions(outputs, since_ms=int(started * 1000))
    collected = sum(1 for _ in records.open())
    print(f"   {collected} decision records -> {records}")
    ok &= collected >= len(bodies)
    step("the run's incident report (ledgerctl incident over this run's window)")
    ok &= incident_report(table, records, started)
    step("the deployed scheduled reconciler, invoked once")
    answer = json.loads(client("lambda").invoke(FunctionName=outputs["ReconcilerFunctionName"])["Payload"].read() or b"{}")
    print(f"   {answer}")
    ok &= answer.get("holds") is True

    claims = claims_by_verdict(table)
    new = {k: claims.get(k, 0) - before.get(k, 0) for k in ("APPLIED", "STALE", "REJECTED")}
    new_claims = sum(new.values())
    held = quarantined(table)
    actions = actions_by_status(table)
    expected_notifications = sum(
        json.loads((ROOT / "fixtures" / "samples" / f"{n}.expected.json").read_text())["collectionsNotifications"] for n in SAMPLES
    )
    keys = {k for k, _ in Receiver.calls}
    step("counts")
    deliveries_total = len(bodies) + sum(times for _, _, times in API_PAYMENTS)
    print(f"   this run: {deliveries_total} deliveries (queue + API) = {new_claims} new facts (applied {new['APPLIED']}, stale {new['STALE']}, "
          f"rejected {new['REJECTED']}) + {deliveries_total - new_claims} duplicates absorbed")
    print(f"   stack total: {sum(claims.values())} facts claimed, {held} quarantine items, actions {actions}")
    print(f"   notifications this run: {len(Receiver.calls)} calls, {len(keys)} distinct actionIds")
    # Over the life of the stack every distinct fact is claimed once, nothing is quarantined,
    # and each expected notification was sent once (a rerun sends none: all are duplicates).
    reconciled = (
        sum(claims.values()) == distinct
        and held == 0
        and actions.get("SENT", 0) == expected_notifications
        and len(actions) <= 1
        and len(keys) == (expected_notifications if not before else 0)
        # The receiver does not deduplicate: a second call would be a second notice.
        and len(Receiver.calls) == len(keys)
    )
    print(
        f"reconciliation: {distinct} distinct facts = {sum(claims.values())} claimed (applied {claims.get('APPLIED', 0)} + "
        f"stale {claims.get('STALE', 0)} + rejected {claims.get('REJECTED', 0)}); quarantined {held}; "
        f"notifications sent {actions.get('SENT', 0)}/{expected_notifications} -> {'OK' if reconciled and ok else 'MISMATCH'}"
    )
    step(f"done in {time.time() - started:.0f} s")
    return 0 if ok and reconciled else 1


if __name__ == "__main__":
    sys.exit(main())
