//! JSON that keeps its keys in the order they came: a person's settings file read and written
//! again lists its keys as before (the crate's `serde_json` sorts them), and refuses a key given
//! twice rather than keeping one of the two silently.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

/// A JSON value whose objects keep their order.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number, as `serde_json` reads it.
    Num(serde_json::Number),
    /// A string.
    Str(String),
    /// An array.
    Arr(Vec<Json>),
    /// An object, in its order.
    Obj(Obj),
}

/// An object's members in order; keys are unique (parsing refuses a repeated one).
pub type Obj = Vec<(String, Json)>;

impl Json {
    /// Parses one JSON document (`serde_json`'s grammar and depth limit).
    pub fn parse(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The document as a person reads it: two-space indents, one member a line, a final newline.
    pub fn pretty(&self) -> String {
        // Serialising a tree of strings, numbers and containers into a string cannot fail.
        let mut text = serde_json::to_string_pretty(self).unwrap_or_default();
        text.push('\n');
        text
    }

    /// A string's text.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::Str(s) => Some(s),
            _ => None,
        }
    }

    /// An object's members.
    pub fn as_obj(&self) -> Option<&Obj> {
        match self {
            Self::Obj(o) => Some(o),
            _ => None,
        }
    }

    /// An object's members, to change.
    pub fn as_obj_mut(&mut self) -> Option<&mut Obj> {
        match self {
            Self::Obj(o) => Some(o),
            _ => None,
        }
    }

    /// An array's items.
    pub fn as_arr(&self) -> Option<&Vec<Json>> {
        match self {
            Self::Arr(a) => Some(a),
            _ => None,
        }
    }

    /// The member `key` of an object.
    pub fn get(&self, key: &str) -> Option<&Json> {
        self.as_obj()?
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// A JSON string.
    pub fn str(text: impl Into<String>) -> Self {
        Self::Str(text.into())
    }
}

/// The member `key` of `obj`, to change.
pub fn get_mut<'a>(obj: &'a mut Obj, key: &str) -> Option<&'a mut Json> {
    obj.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// Sets `key` in `obj`: in its place when present, else last.
pub fn set(obj: &mut Obj, key: &str, value: Json) {
    match get_mut(obj, key) {
        Some(slot) => *slot = value,
        None => obj.push((key.to_owned(), value)),
    }
}

/// Removes `key` from `obj`, returning its value.
pub fn remove(obj: &mut Obj, key: &str) -> Option<Json> {
    let at = obj.iter().position(|(k, _)| k == key)?;
    Some(obj.remove(at).1)
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Null => serializer.serialize_unit(),
            Self::Bool(b) => serializer.serialize_bool(*b),
            Self::Num(n) => n.serialize(serializer),
            Self::Str(s) => serializer.serialize_str(s),
            Self::Arr(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Self::Obj(members) => {
                let mut map = serializer.serialize_map(Some(members.len()))?;
                for (k, v) in members {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Num(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Num(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
        serde_json::Number::from_f64(v)
            .map(Json::Num)
            .ok_or_else(|| E::custom("a number JSON cannot hold"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Json, E> {
        Ok(Json::Str(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Json, E> {
        Ok(Json::Str(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Arr(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut members: Obj = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if members.iter().any(|(k, _)| *k == key) {
                return Err(de::Error::custom(format!(
                    "the key \"{key}\" is given twice"
                )));
            }
            let value = map.next_value()?;
            members.push((key, value));
        }
        Ok(Json::Obj(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_their_order_through_a_round_trip() {
        let text = r#"{"zeta": 1, "alpha": {"y": [true, null, 1.5], "b": "x"}, "mid": -3}"#;
        let json = Json::parse(text).unwrap();
        let again = json.pretty();
        let keys: Vec<&str> = json
            .as_obj()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(keys, ["zeta", "alpha", "mid"]);
        assert!(
            again.find("\"y\"").unwrap() < again.find("\"b\"").unwrap(),
            "{again}"
        );
        assert_eq!(Json::parse(&again).unwrap(), json);
    }

    #[test]
    fn a_key_given_twice_is_refused() {
        let error = Json::parse(r#"{"a": 1, "a": 2}"#).unwrap_err();
        assert!(error.to_string().contains("given twice"), "{error}");
    }
}
