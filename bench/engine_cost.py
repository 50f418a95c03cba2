"""What DynamoDB Local charges per transaction and per item, on the consumer's own item shapes.

Copies one CLAIM, LOAN, ALLOCATION and OUTBOX item from the newest table that holds all four
(run `loadgen` first, or the test suite), then times TransactWriteItems of growing size into a
fresh table, committed and refused. The README's "why not 5x on this engine" comes from here.

    .local/venv-engines/bin/python bench/engine_cost.py   # with .local/engines.env sourced
"""

import copy
import os
import statistics
import time
import uuid

import boto3

client = boto3.client("dynamodb", endpoint_url=os.environ["DYNAMODB_LOCAL_ENDPOINT"], region_name="us-east-1",
                      aws_access_key_id="test", aws_secret_access_key="test")
NEEDED = {"CLAIM", "LOAN", "ALLOCATION", "OUTBOX"}


def sample_items():
    for table in reversed(client.list_tables()["TableNames"]):
        items = client.scan(TableName=table, Limit=500)["Items"]
        by_type = {}
        for item in items:
            by_type.setdefault(item.get("itemType", {}).get("S"), item)
        if NEEDED <= by_type.keys():
            return by_type
    raise SystemExit("no table with claim, loan, allocation and outbox items: run loadgen first")


SHAPES = sample_items()
TABLE = "engine-cost-" + uuid.uuid4().hex[:8]
client.create_table(TableName=TABLE, BillingMode="PAY_PER_REQUEST",
                    AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                          {"AttributeName": "sk", "AttributeType": "S"}],
                    KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                               {"AttributeName": "sk", "KeyType": "RANGE"}])
counter = [0]


def put(kind, conditional=True):
    counter[0] += 1
    item = copy.deepcopy(SHAPES[kind])
    item["pk"] = {"S": f"{kind}#{counter[0]}"}
    request = {"TableName": TABLE, "Item": item}
    if conditional:
        request["ConditionExpression"] = "attribute_not_exists(pk)"
        request["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
    return {"Put": request}


def group(events):
    """A group of `events` payments as account-state writes it: claim, allocation, outbox each,
    and the loan once."""
    items = []
    for _ in range(events):
        items += [put("CLAIM"), put("ALLOCATION"), put("OUTBOX", conditional=False)]
    return items + [put("LOAN")]


def median_ms(make, refuse=False, runs=40):
    for _ in range(5):  # warm-up
        make()
    times = []
    for _ in range(runs):
        items = make()
        if refuse:  # the first claim exists already: the whole transaction is cancelled
            client.put_item(TableName=TABLE, Item=items[0]["Put"]["Item"])
        started = time.perf_counter()
        try:
            client.transact_write_items(TransactItems=items)
        except client.exceptions.TransactionCanceledException:
            pass
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


try:
    for kind in sorted(NEEDED):
        label = f"1 {kind.lower()} put"
        print(f"{label:<34} p50 {median_ms(lambda: [put(kind)]):6.2f} ms")
    for events in (1, 3, 7):
        size = 3 * events + 1
        for refuse, outcome in ((False, "committed"), (True, "refused")):
            label = f"group of {events} ({size:>2} items), {outcome}"
            print(f"{label:<34} p50 {median_ms(lambda: group(events), refuse=refuse):6.2f} ms")
finally:
    client.delete_table(TableName=TABLE)
