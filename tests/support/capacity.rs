//! Capacity units as AWS bills them, computed from the requests a client sends and the answers
//! it gets — the local engines' own `ConsumedCapacity` is not AWS's (DynamoDB Local does not
//! double transactions). The rules (DynamoDB developer guide, "Read/write capacity mode" and
//! "Item sizes"), for on-demand and provisioned alike:
//! - an item's size is the UTF-8 length of every attribute name plus its value: strings their
//!   UTF-8 length, numbers 1 byte per two significant digits + 1, booleans and nulls 1, lists
//!   and maps 3 + per element 1 (+ its name in a map);
//! - a write costs 1 WCU per started KB of the larger of the item before and after it, a
//!   read 1 RCU per started 4 KB (half when eventually consistent; a Query sums its items
//!   first), at least 1 unit (0.5) per item touched;
//! - inside `TransactWriteItems` / `TransactGetItems` every item costs twice (prepare and
//!   commit), a `ConditionCheck` as a write of the item it checks. A cancelled transaction is
//!   charged as if it had written (conservative: its prepare phase read and locked each item);
//! - a write that puts or removes a sparse index's key writes the index too (1 WCU per started
//!   KB of the projection, never doubled).
//!
//! Sizes of items a request does not carry (an update's or a check's target) come from the
//! meter's shadow of the table: every item it has seen written or read.

// Capacity figures, not money: floats are fine here (half units for eventually consistent reads).
#![allow(clippy::float_arithmetic)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use serde_json::{Map, Value};

/// Attributes whose presence puts an item in a sparse index (the servicing table's
/// `ArrearsIndex` and `OpenIndex`, keys only, and `AllocationsIndex`, keys and the allocation: all
/// under 1 KB).
const INDEX_KEYS: &[&str] = &["arrearsShard", "allocatedTo", "openShard"];

/// Capacity consumed, by kind and by the item type written (`itemType`, else the key's prefix).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Capacity {
    pub wcu: f64,
    pub rcu: f64,
    pub wcu_by_item: BTreeMap<String, f64>,
}

impl Capacity {
    fn write(&mut self, item_type: String, units: f64) {
        self.wcu += units;
        *self.wcu_by_item.entry(item_type).or_default() += units;
    }
}

/// Charges requests by the rules above and keeps a shadow of item sizes across them.
#[derive(Debug, Default)]
pub struct Meter {
    sizes: HashMap<String, (usize, String, bool)>,
    pub total: Capacity,
}

impl Meter {
    /// Charges one request (`operation` as in `x-amz-target`, bodies as JSON).
    pub fn charge(&mut self, operation: &str, request: &Value, response: &Value) {
        let failed = response.get("__type").is_some();
        let table = |r: &Value| r["TableName"].as_str().unwrap_or_default().to_owned();
        match operation {
            "PutItem" => {
                let before = self.size_at(&table(request), &request["Item"]);
                self.put(&table(request), &request["Item"], 1.0, before, !failed);
            }
            "UpdateItem" => self.update(request, 1.0),
            "DeleteItem" => self.delete(&table(request), &request["Key"], 1.0, !failed),
            "TransactWriteItems" => {
                let committed = !failed;
                for entry in request["TransactItems"].as_array().into_iter().flatten() {
                    if let Some(put) = entry.get("Put") {
                        let before = self.size_at(&table(put), &put["Item"]);
                        self.put(&table(put), &put["Item"], 2.0, before, committed);
                    } else if let Some(update) = entry.get("Update") {
                        if committed {
                            self.update(update, 2.0);
                        } else {
                            let size = self.size_at(&table(update), &update["Key"]);
                            self.total.write(
                                self.type_at(&table(update), &update["Key"]),
                                2.0 * kb(size),
                            );
                        }
                    } else if let Some(delete) = entry.get("Delete") {
                        self.delete(&table(delete), &delete["Key"], 2.0, committed);
                    } else if let Some(check) = entry.get("ConditionCheck") {
                        let size = self.size_at(&table(check), &check["Key"]);
                        let kind = self.type_at(&table(check), &check["Key"]);
                        self.total.write(kind, 2.0 * kb(size));
                    }
                }
            }
            "GetItem" => {
                let factor = read_factor(request);
                let item = &response["Item"];
                self.seen(&table(request), item);
                self.total.rcu += factor * four_kb(item_size(item));
            }
            "BatchGetItem" => {
                for (name, keys) in request["RequestItems"].as_object().into_iter().flatten() {
                    let factor = read_factor(keys);
                    let found = response["Responses"][name]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    for item in &found {
                        self.seen(name, item);
                        self.total.rcu += factor * four_kb(item_size(item));
                    }
                    let asked = keys["Keys"].as_array().map_or(0, Vec::len);
                    // A key with no item still reads one unit.
                    self.total.rcu += factor * asked.saturating_sub(found.len()) as f64;
                }
            }
            "Query" | "Scan" => {
                let items = response["Items"].as_array().cloned().unwrap_or_default();
                let bytes: usize = items.iter().map(item_size).sum();
                // A table's items read whole (an index's are projections): later writes are
                // billed by the larger of their old and new sizes.
                if request.get("IndexName").is_none() {
                    for item in &items {
                        self.seen(&table(request), item);
                    }
                }
                self.total.rcu += read_factor(request) * four_kb(bytes);
            }
            _ => {}
        }
    }

    fn put(&mut self, table: &str, item: &Value, factor: f64, before: usize, written: bool) {
        let size = item_size(item);
        let kind = item_type(item);
        let indexed = in_index(item);
        let was_indexed = self.sizes.get(&key_of(table, item)).is_some_and(|s| s.2);
        self.total
            .write(kind.clone(), factor * kb(size.max(before)));
        if written {
            if indexed || was_indexed {
                self.total.write(format!("{kind} (index)"), 1.0);
            }
            self.sizes
                .insert(key_of(table, item), (size, kind, indexed));
        }
    }

    /// An update costs the larger of before and after; after = before + what it sets (an
    /// upper bound: a replaced value counts twice).
    fn update(&mut self, update: &Value, factor: f64) {
        let table = update["TableName"].as_str().unwrap_or_default();
        let key = key_of(table, &update["Key"]);
        let (before, kind, indexed) = self
            .sizes
            .get(&key)
            .cloned()
            .unwrap_or_else(|| (item_size(&update["Key"]), item_type(&update["Key"]), false));
        let added: usize = update["ExpressionAttributeValues"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(_, v)| value_size(v))
            .sum::<usize>()
            + update["ExpressionAttributeNames"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(_, v)| v.as_str().map(str::len))
                .sum::<usize>();
        let after = before + added;
        self.total
            .write(kind.clone(), factor * kb(after.max(before)));
        self.sizes.insert(key, (after, kind, indexed));
    }

    fn delete(&mut self, table: &str, key: &Value, factor: f64, written: bool) {
        let size = self.size_at(table, key);
        self.total
            .write(self.type_at(table, key), factor * kb(size));
        if written {
            self.sizes.remove(&key_of(table, key));
        }
    }

    fn seen(&mut self, table: &str, item: &Value) {
        if item.is_object() {
            self.sizes.insert(
                key_of(table, item),
                (item_size(item), item_type(item), in_index(item)),
            );
        }
    }

    fn size_at(&self, table: &str, key: &Value) -> usize {
        self.sizes.get(&key_of(table, key)).map_or(0, |s| s.0)
    }

    fn type_at(&self, table: &str, key: &Value) -> String {
        self.sizes
            .get(&key_of(table, key))
            .map_or_else(|| item_type(key), |s| s.1.clone())
    }
}

/// The item's `(table, pk, sk)` as a map key (any key schema: the baseline's tables use `id`).
fn key_of(table: &str, item: &Value) -> String {
    let part = |name: &str| item.get(name).map(Value::to_string).unwrap_or_default();
    format!("{table}|{}|{}|{}", part("pk"), part("sk"), part("id"))
}

fn item_type(item: &Value) -> String {
    if let Some(kind) = item["itemType"]["S"].as_str() {
        return kind.to_owned();
    }
    let key = item["pk"]["S"]
        .as_str()
        .or(item["id"]["S"].as_str())
        .unwrap_or("?");
    key.split('#').next().unwrap_or(key).to_owned()
}

fn in_index(item: &Value) -> bool {
    INDEX_KEYS.iter().any(|k| item.get(*k).is_some())
}

fn read_factor(request: &Value) -> f64 {
    if request["ConsistentRead"].as_bool() == Some(true) {
        1.0
    } else {
        0.5
    }
}

/// Started KBs, at least one.
fn kb(bytes: usize) -> f64 {
    bytes.div_ceil(1024).max(1) as f64
}

fn four_kb(bytes: usize) -> f64 {
    bytes.div_ceil(4096).max(1) as f64
}

/// An item's size by AWS's rules (a JSON object of DynamoDB attribute values).
pub fn item_size(item: &Value) -> usize {
    item.as_object()
        .map_or(0, |m| m.iter().map(|(k, v)| k.len() + value_size(v)).sum())
}

/// A stored item (as the SDK returns it) as the JSON the wire carries, for [`item_size`].
pub fn item_json(item: &HashMap<String, aws_sdk_dynamodb::types::AttributeValue>) -> Value {
    Value::Object(
        item.iter()
            .map(|(name, value)| (name.clone(), attribute_json(value)))
            .collect(),
    )
}

fn attribute_json(value: &aws_sdk_dynamodb::types::AttributeValue) -> Value {
    use aws_sdk_dynamodb::types::AttributeValue as A;
    use serde_json::json;
    match value {
        A::S(v) => json!({"S": v}),
        A::N(v) => json!({"N": v}),
        A::Bool(v) => json!({"BOOL": v}),
        A::Null(v) => json!({"NULL": v}),
        A::B(v) => json!({"B": "x".repeat(v.as_ref().len().div_ceil(3) * 4)}),
        A::Ss(v) => json!({"SS": v}),
        A::Ns(v) => json!({"NS": v}),
        A::L(v) => json!({"L": v.iter().map(attribute_json).collect::<Vec<_>>()}),
        A::M(v) => json!({"M": item_json(v)}),
        _ => Value::Null,
    }
}

fn value_size(value: &Value) -> usize {
    let Some((kind, inner)) = value.as_object().and_then(|m| m.iter().next()) else {
        return 0;
    };
    match kind.as_str() {
        "S" => inner.as_str().map_or(0, str::len),
        "N" => number_size(inner.as_str().unwrap_or_default()),
        "B" => inner.as_str().map_or(0, |b| b.len() * 3 / 4),
        "BOOL" | "NULL" => 1,
        "SS" => strings(inner).map(str::len).sum(),
        "NS" => strings(inner).map(number_size).sum(),
        "L" => {
            3 + inner
                .as_array()
                .map_or(0, |l| l.iter().map(|v| 1 + value_size(v)).sum())
        }
        "M" => {
            3 + inner.as_object().map_or(0, |m: &Map<String, Value>| {
                m.iter().map(|(k, v)| k.len() + 1 + value_size(v)).sum()
            })
        }
        _ => 0,
    }
}

fn strings(value: &Value) -> impl Iterator<Item = &str> {
    value
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

fn number_size(number: &str) -> usize {
    let digits: String = number.chars().filter(char::is_ascii_digit).collect();
    let significant = digits
        .trim_start_matches('0')
        .trim_end_matches('0')
        .len()
        .max(1);
    significant.div_ceil(2) + 1
}

/// The meter as an SDK interceptor: every DynamoDB request of the client it is attached to.
#[derive(Debug, Clone, Default)]
pub struct CapacityMeter(Arc<Mutex<Meter>>);

#[derive(Debug, Clone)]
struct SentRequest(String, Value);

impl Storable for SentRequest {
    type Storer = StoreReplace<Self>;
}

impl CapacityMeter {
    pub fn total(&self) -> Capacity {
        self.0.lock().map(|m| m.total.clone()).unwrap_or_default()
    }

    /// Zeroes the figures; the shadow of item sizes stays (the items are still there).
    pub fn reset(&self) {
        if let Ok(mut m) = self.0.lock() {
            m.total = Capacity::default();
        }
    }

    /// Charges requests recorded elsewhere (the baseline's log: one JSON line per request,
    /// `{"operation", "request", "response"}`), into this meter.
    pub fn charge_log(&self, log: &str) {
        let Ok(mut m) = self.0.lock() else { return };
        for line in log.lines().filter(|l| !l.trim().is_empty()) {
            if let Ok(entry) = serde_json::from_str::<Value>(line) {
                let operation = entry["operation"].as_str().unwrap_or_default().to_owned();
                m.charge(&operation, &entry["request"], &entry["response"]);
            }
        }
    }
}

impl Intercept for CapacityMeter {
    fn name(&self) -> &'static str {
        "CapacityMeter"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request();
        let target = request.headers().get("x-amz-target").unwrap_or_default();
        let operation = target.rsplit('.').next().unwrap_or(target).to_owned();
        let body = request
            .body()
            .bytes()
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or(Value::Null);
        cfg.interceptor_state()
            .store_put(SentRequest(operation, body));
        Ok(())
    }

    fn read_before_deserialization(
        &self,
        context: &BeforeDeserializationInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(SentRequest(operation, request)) = cfg.load::<SentRequest>().cloned() else {
            return Ok(());
        };
        let response = context.response();
        // A throttled or failed request (5xx) writes nothing and is not billed.
        if response.status().as_u16() >= 500 {
            return Ok(());
        }
        let body = response
            .body()
            .bytes()
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or(Value::Null);
        let throttled = body["__type"]
            .as_str()
            .is_some_and(|t| t.contains("Throughput") || t.contains("Throttl"));
        if let (false, Ok(mut m)) = (throttled, self.0.lock()) {
            m.charge(&operation, &request, &body);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn when_sizes_follow_aws_rules_should_count_names_values_and_overheads() {
        // "ab" (2) + "xyz" (3); "n" (1) + 12345 (3 digits pairs + 1 = 4); "l" (1) + [S "a"] (3 + 1 + 1).
        let item = json!({"ab": {"S": "xyz"}, "n": {"N": "12345"}, "l": {"L": [{"S": "a"}]}});
        assert_eq!(item_size(&item), 5 + 5 + 6);
        assert_eq!(number_size("1000000"), 2);
    }

    #[test]
    fn when_a_transaction_puts_an_item_over_one_kb_should_charge_four_units() {
        let mut meter = Meter::default();
        let item = json!({"pk": {"S": "CLAIM#x"}, "itemType": {"S": "CLAIM"}, "body": {"S": "x".repeat(1100)}});
        let request = json!({"TransactItems": [{"Put": {"TableName": "t", "Item": item}}]});
        meter.charge("TransactWriteItems", &request, &json!({}));
        assert_eq!(meter.total.wcu, 4.0);
        assert_eq!(meter.total.wcu_by_item["CLAIM"], 4.0);
        // A check of it later: a write of its size, doubled.
        let check = json!({"TransactItems": [{"ConditionCheck": {"TableName": "t", "Key": {"pk": {"S": "CLAIM#x"}}}}]});
        meter.charge("TransactWriteItems", &check, &json!({}));
        assert_eq!(meter.total.wcu, 8.0);
    }
}
