"""The baseline a team would otherwise ship: an SQS consumer with Powertools for AWS Lambda's
BatchProcessor + idempotent_function on the DynamoDB persistence layer, applying the same
contract subset (LOAN_OPENED, FEE_ASSESSED, INTEREST_ACCRUED, PAYMENT_SETTLED with the
fees -> interest -> principal -> credit waterfall) with a version-checked UpdateItem, written
carefully: consistent reads, conditional writes, re-read and retry on a version conflict, the
allocation stored beside the account. Not atomic with the idempotency record by construction:
that is Powertools' model (claim put, business writes, status update).

Reads deliveries (JSON Lines) and prints one JSON line of figures. Run by the Rust loadgen.
"""

import argparse
import json
import os
import statistics
import time
import uuid

import boto3
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)

REQUESTS = {"count": 0}
# One JSON line per request and its answer, for the Rust bench's capacity meter
# (tests/support/capacity.rs charges both sides by the same rules).
CAPACITY_LOG = []


def count_request(**_):
    REQUESTS["count"] += 1


def keep_request(params, context, model, **_):
    context["capacity_request"] = params.get("body", b"")


def log_answer(http_response, context, model, **_):
    body = context.get("capacity_request", b"")
    try:
        request = json.loads(body or b"{}")
        response = json.loads(http_response.content or b"{}")
    except ValueError:
        return
    if http_response.status_code >= 500:
        return
    CAPACITY_LOG.append(json.dumps({"operation": model.name, "request": request, "response": response}))


class Context:
    """The parts of a Lambda context Powertools reads."""

    function_name = "baseline"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:us-east-1:000000000000:function:baseline"
    aws_request_id = "bench"

    @staticmethod
    def get_remaining_time_in_millis():
        return 300_000


def build(endpoint: str, business_table: str, idempotency_table: str):
    client = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id="test", aws_secret_access_key="test")
    client.meta.events.register("before-send.dynamodb.*", count_request)
    client.meta.events.register("before-call.dynamodb.*", keep_request)
    client.meta.events.register("after-call.dynamodb.*", log_answer)
    persistence = DynamoDBPersistenceLayer(table_name=idempotency_table, boto3_client=client)
    config = IdempotencyConfig(
        event_key_jmespath="[sourceSystem, sourceEventId]",
        payload_validation_jmespath="[eventType, accountId, amountMinor, currency, principalMinor]",
        raise_on_no_idempotency_key=True,
        expires_after_seconds=35 * 86400,
        use_local_cache=False,
    )

    def load(account_id):
        item = client.get_item(TableName=business_table, Key={"pk": {"S": f"LOAN#{account_id}"}}, ConsistentRead=True).get("Item")
        if not item:
            return None
        return {k: int(item[k]["N"]) for k in ("version", "principal", "interest", "fees", "credit")}

    def save(account_id, state, expected_version):
        client.update_item(
            TableName=business_table,
            Key={"pk": {"S": f"LOAN#{account_id}"}},
            UpdateExpression="SET principal = :p, interest = :i, fees = :f, credit = :c, version = :next",
            ConditionExpression="version = :expected",
            ExpressionAttributeValues={
                ":p": {"N": str(state["principal"])}, ":i": {"N": str(state["interest"])},
                ":f": {"N": str(state["fees"])}, ":c": {"N": str(state["credit"])},
                ":next": {"N": str(expected_version + 1)}, ":expected": {"N": str(expected_version)},
            },
        )

    @idempotent_function(data_keyword_argument="event", persistence_store=persistence, config=config)
    def apply_event(event: dict) -> dict:
        account_id, kind = event["accountId"], event["eventType"]
        if kind == "LOAN_OPENED":
            client.put_item(
                TableName=business_table,
                Item={"pk": {"S": f"LOAN#{account_id}"}, "version": {"N": "1"}, "principal": {"N": str(event["principalMinor"])},
                      "interest": {"N": "0"}, "fees": {"N": "0"}, "credit": {"N": "0"}},
                ConditionExpression="attribute_not_exists(pk)",
            )
            return {"applied": kind}
        for _ in range(5):
            state = load(account_id)
            if state is None:
                raise RuntimeError("account not opened yet")
            version = state["version"]
            amount = int(event["amountMinor"])
            allocation = None
            if kind == "FEE_ASSESSED":
                state["fees"] += amount
            elif kind == "INTEREST_ACCRUED":
                state["interest"] += amount
            elif kind == "PAYMENT_SETTLED":
                left = amount
                allocation = {}
                for part in ("fees", "interest", "principal"):
                    take = min(left, state[part])
                    state[part] -= take
                    allocation[part] = take
                    left -= take
                state["credit"] += left
                allocation["credit"] = left
            try:
                save(account_id, state, version)
            except client.exceptions.ConditionalCheckFailedException:
                continue  # another writer won: re-read, recompute
            if allocation is not None:
                client.put_item(
                    TableName=business_table,
                    Item={"pk": {"S": f"ALLOC#{event['sourceSystem']}#{event['sourceEventId']}"},
                          **{k: {"N": str(v)} for k, v in allocation.items()}},
                )
            return {"applied": kind}
        raise RuntimeError("version conflicts persisted")

    def record_handler(record):
        apply_event(event=json.loads(record["body"]))

    return client, persistence, config, record_handler, load


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--input", required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--endpoint", default=os.environ.get("DYNAMODB_LOCAL_ENDPOINT"))
    parser.add_argument("--accounts-out", help="write final account states here (for agreement checks)")
    parser.add_argument("--capacity-log", help="write every DynamoDB request and answer here (JSON Lines)")
    args = parser.parse_args()

    suffix = uuid.uuid4().hex[:8]
    business, idempotency = f"baseline-business-{suffix}", f"baseline-idempotency-{suffix}"
    admin = boto3.client("dynamodb", endpoint_url=args.endpoint, region_name="us-east-1",
                         aws_access_key_id="test", aws_secret_access_key="test")
    for name in (business, idempotency):
        key = "pk" if name == business else "id"
        admin.create_table(TableName=name, BillingMode="PAY_PER_REQUEST",
                           AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"}],
                           KeySchema=[{"AttributeName": key, "KeyType": "HASH"}])
    client, _, config, record_handler, load = build(args.endpoint, business, idempotency)
    config.register_lambda_context(Context())

    bodies = [line for line in open(args.input).read().splitlines() if line.strip()]
    processor = BatchProcessor(event_type=EventType.SQS)
    latencies, failures = [], 0
    started = time.perf_counter()
    for i in range(0, len(bodies), args.batch):
        records = [{"messageId": f"m{i + n}", "body": body, "attributes": {"ApproximateReceiveCount": "1"},
                    "eventSource": "aws:sqs", "receiptHandle": "x", "md5OfBody": "", "eventSourceARN": "arn", "awsRegion": "us-east-1",
                    "messageAttributes": {}} for n, body in enumerate(bodies[i:i + args.batch])]
        t0 = time.perf_counter()
        response = process_partial_response(event={"Records": records}, record_handler=record_handler,
                                            processor=processor, context=Context())
        latencies.append((time.perf_counter() - t0) * 1000)
        failures += len(response.get("batchItemFailures", []))
    elapsed = time.perf_counter() - started
    requests = REQUESTS["count"]
    if args.capacity_log:
        with open(args.capacity_log, "w") as out:
            out.write("\n".join(CAPACITY_LOG))

    if args.accounts_out:
        accounts = sorted({json.loads(b)["accountId"] for b in bodies})
        with open(args.accounts_out, "w") as out:
            json.dump({a: load(a) for a in accounts}, out)
    # Dropped so the engine's state (and speed) is the same for every run.
    for name in (business, idempotency):
        admin.delete_table(TableName=name)
    latencies.sort()
    print(json.dumps({
        "deliveries": len(bodies),
        "seconds": elapsed,
        "events_per_s": len(bodies) / elapsed,
        "requests": requests,
        "p50_ms": statistics.median(latencies),
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "failures": failures,
    }))


if __name__ == "__main__":
    main()
