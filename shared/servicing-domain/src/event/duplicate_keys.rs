//! Refusing a JSON body that has the same key twice in one object. Separate from decoding: it
//! reads the raw body, not the parsed value, and the payments API checks its requests with it too.

/// `Err` naming the key when a JSON object in `body` has the same key twice (at any depth,
/// escapes decoded): readers disagree on which value counts.
pub fn unique_keys(body: &[u8]) -> Result<(), String> {
    serde_json::from_slice::<UniqueKeys>(body)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Deserialises any JSON, failing on an object that has the same key twice (at any depth).
struct UniqueKeys;

impl<'de> serde::Deserialize<'de> for UniqueKeys {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueKeys)
    }
}

impl<'de> serde::de::Visitor<'de> for UniqueKeys {
    type Value = UniqueKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_unit<E>(self) -> Result<Self, E> {
        Ok(self)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<UniqueKeys>()?.is_some() {}
        Ok(self)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if !seen.insert(key.clone()) {
                // The name is the caller's: quoted in part, as an unknown event type is.
                return Err(serde::de::Error::custom(format!(
                    "the key `{}` appears twice in one object",
                    super::decode::truncate(&key, 64)
                )));
            }
            map.next_value::<UniqueKeys>()?;
        }
        Ok(self)
    }
}
