"""What DynamoDB Local charges for a TransactWriteItems: per item, committed or refused, and
whether splitting one into parallel smaller ones helps. docs/benchmarks.md's "what is left on this
engine" comes from here.

    .local/venv-engines/bin/python bench/engine_cost.py   # with .local/engines.env sourced

Items are claim-sized (pk, sk and ten short attributes) and conditional (attribute_not_exists),
like most items of a consumer transaction. Restart the engine first: DynamoDB Local slows down
as tables accumulate.
"""

import os
import statistics
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import boto3


def client():
    return boto3.client("dynamodb", endpoint_url=os.environ["DYNAMODB_LOCAL_ENDPOINT"],
                        region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test")


TABLE = "engine-cost-" + uuid.uuid4().hex[:8]
CLIENTS = [client() for _ in range(3)]
POOL = ThreadPoolExecutor(len(CLIENTS))
LOCK = threading.Lock()
COUNTER = [0]


def put():
    with LOCK:
        COUNTER[0] += 1
        key = COUNTER[0]
    item = {"pk": {"S": f"CLAIM#{key}"}, "sk": {"S": "CLAIM"}}
    item.update({f"a{i}": {"S": "x" * 20} for i in range(10)})
    return {"Put": {"TableName": TABLE, "Item": item, "ConditionExpression": "attribute_not_exists(pk)"}}


def transaction(c, items):
    try:
        c.transact_write_items(TransactItems=items)
    except c.exceptions.TransactionCanceledException:
        pass


def timed(prepare, send, runs=50):
    """Median of `send(prepare())` in ms, the preparation untimed."""
    times = []
    for _ in range(runs):
        prepared = prepare()
        started = time.perf_counter()
        send(prepared)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def one(total):
    return timed(lambda: [put() for _ in range(total)], lambda items: transaction(CLIENTS[0], items))


def parallel(total, parts):
    """`total` puts as `parts` transactions sent at the same time."""
    def send(batches):
        for f in [POOL.submit(transaction, CLIENTS[i], batches[i]) for i in range(parts)]:
            f.result()
    return timed(lambda: [[put() for _ in range(total // parts)] for _ in range(parts)], send)


def refused(total):
    """`total` puts whose first one is refused (its item exists): the transaction is cancelled."""
    def prepare():
        items = [put() for _ in range(total)]
        CLIENTS[0].put_item(TableName=TABLE, Item=items[0]["Put"]["Item"])
        return items
    return timed(prepare, lambda items: transaction(CLIENTS[0], items))


CLIENTS[0].create_table(TableName=TABLE, BillingMode="PAY_PER_REQUEST",
                        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"},
                                              {"AttributeName": "sk", "AttributeType": "S"}],
                        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"},
                                   {"AttributeName": "sk", "KeyType": "RANGE"}])
try:
    for _ in range(300):  # the engine's JIT
        transaction(CLIENTS[0], [put() for _ in range(10)])
    for total in (1, 10, 30, 60):
        print(f"{total:>2} conditional puts, one transaction   p50 {one(total):6.2f} ms")
    for parts in (2, 3):
        print(f"30 puts as {parts} transactions in parallel   p50 {parallel(30, parts):6.2f} ms")
    print(f"30 puts, refused (first claim exists)   p50 {refused(30):6.2f} ms")
finally:
    CLIENTS[0].delete_table(TableName=TABLE)
