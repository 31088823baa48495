//! The host's side of elicitation (MCP's questions to the person at the keyboard): the
//! [`Person`](crate::ports::Person) a host starts with ([`Nobody`]), the form a schema fills in
//! by itself, and the check of a person's answer against the form before it goes back to the
//! server.

use serde_json::{Map, Value};

use crate::ports::{Answer, ElicitAnswer, Elicitation, Person};

/// Nobody to ask: every question is declined. What a host starts with.
#[derive(Clone, Copy, Debug, Default)]
pub struct Nobody;

impl Person for Nobody {
    fn elicit(&self, question: Elicitation) -> Answer<'_> {
        tracing::info!(server = %question.server, "no one to ask; elicitation declined");
        Box::pin(std::future::ready(ElicitAnswer::Decline))
    }
}

/// The form a schema fills in by itself: each property's `default`, where it has one.
pub fn schema_defaults(schema: &Map<String, Value>) -> Map<String, Value> {
    let Some(Value::Object(properties)) = schema.get("properties") else {
        return Map::new();
    };
    properties
        .iter()
        .filter_map(|(name, property)| Some((name.clone(), property.get("default")?.clone())))
        .collect()
}

/// Whether `content`, a person's answer to a form, fits the form's `schema`: MCP's restricted
/// schema, an object of primitive properties. Checked are the property set (no property the
/// form does not have, every `required` one present), each value's type, enums (`enum`,
/// `oneOf`/`anyOf` of `const`s, and arrays of them with `minItems`/`maxItems`), string lengths
/// and formats (`email`, `uri`, `date`, `date-time`), and number ranges. What this subset of
/// JSON schema does not have is not checked. The problem is said in words.
pub(crate) fn check_answer(
    schema: &Map<String, Value>,
    content: &Map<String, Value>,
) -> Result<(), String> {
    let empty = Map::new();
    let properties = match schema.get("properties") {
        Some(Value::Object(properties)) => properties,
        _ => &empty,
    };
    for (name, value) in content {
        let Some(property) = properties.get(name) else {
            return Err(format!("{name:?} is not a field of the form"));
        };
        check_value(property, value).map_err(|problem| format!("{name:?} {problem}"))?;
    }
    if let Some(Value::Array(required)) = schema.get("required") {
        for name in required.iter().filter_map(Value::as_str) {
            if !content.contains_key(name) {
                return Err(format!("{name:?} is required and missing"));
            }
        }
    }
    Ok(())
}

/// Checks one answer against one property of a form.
fn check_value(property: &Value, value: &Value) -> Result<(), String> {
    let kind = property.get("type").and_then(Value::as_str);
    if let Some(allowed) = choices(property) {
        return if allowed.contains(value) {
            Ok(())
        } else {
            Err("is not one of the form's choices".to_owned())
        };
    }
    match kind {
        Some("string") => {
            let Value::String(text) = value else {
                return Err("must be a string".to_owned());
            };
            check_string(property, text)
        }
        Some("integer") if !(value.is_i64() || value.is_u64()) => {
            Err("must be an integer".to_owned())
        }
        Some("number" | "integer") => {
            let Some(number) = value.as_f64() else {
                return Err("must be a number".to_owned());
            };
            let bound = |key| property.get(key).and_then(Value::as_f64);
            if bound("minimum").is_some_and(|min| number < min) {
                return Err("is below the form's minimum".to_owned());
            }
            if bound("maximum").is_some_and(|max| number > max) {
                return Err("is above the form's maximum".to_owned());
            }
            Ok(())
        }
        Some("boolean") if !value.is_boolean() => Err("must be true or false".to_owned()),
        Some("boolean") => Ok(()),
        Some("array") => {
            let Value::Array(items) = value else {
                return Err("must be a list".to_owned());
            };
            let count = |key| property.get(key).and_then(Value::as_u64);
            let len = items.len() as u64;
            if count("minItems").is_some_and(|min| len < min) {
                return Err("has fewer choices than the form asks".to_owned());
            }
            if count("maxItems").is_some_and(|max| len > max) {
                return Err("has more choices than the form allows".to_owned());
            }
            let allowed = property.get("items").and_then(choices);
            match allowed {
                Some(allowed) if items.iter().all(|item| allowed.contains(item)) => Ok(()),
                Some(_) => Err("holds a choice the form does not offer".to_owned()),
                None => Err("is a list the form does not describe".to_owned()),
            }
        }
        _ => Err("has a type the form does not describe".to_owned()),
    }
}

/// The values an enum property allows: `enum`, or the `const` of each `oneOf`/`anyOf` entry.
fn choices(property: &Value) -> Option<Vec<Value>> {
    if let Some(Value::Array(values)) = property.get("enum") {
        return Some(values.clone());
    }
    let entries = property
        .get("oneOf")
        .or_else(|| property.get("anyOf"))?
        .as_array()?;
    Some(
        entries
            .iter()
            .filter_map(|e| e.get("const").cloned())
            .collect(),
    )
}

/// Checks a string against its property's lengths (in characters) and format.
fn check_string(property: &Value, text: &str) -> Result<(), String> {
    let chars = text.chars().count() as u64;
    let count = |key| property.get(key).and_then(Value::as_u64);
    if count("minLength").is_some_and(|min| chars < min) {
        return Err("is shorter than the form asks".to_owned());
    }
    if count("maxLength").is_some_and(|max| chars > max) {
        return Err("is longer than the form allows".to_owned());
    }
    let fits = match property.get("format").and_then(Value::as_str) {
        Some("email") => text.split_once('@').is_some_and(|(user, host)| {
            !user.is_empty() && host.contains('.') && !text.contains(char::is_whitespace)
        }),
        Some("uri") => text.split_once(':').is_some_and(|(scheme, rest)| {
            is_scheme(scheme) && !rest.is_empty() && !text.contains(char::is_whitespace)
        }),
        Some("date") => is_date(text),
        Some("date-time") => text
            .split_once(['T', 't'])
            .is_some_and(|(date, time)| is_date(date) && is_time(time)),
        _ => true,
    };
    if fits {
        Ok(())
    } else {
        Err("is not in the form's format".to_owned())
    }
}

fn is_scheme(scheme: &str) -> bool {
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
}

/// `YYYY-MM-DD` with a month and day in range.
fn is_date(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    let digits = |s: &str, n| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    match parts.as_slice() {
        [year, month, day] if digits(year, 4) && digits(month, 2) && digits(day, 2) => {
            let (month, day): (u8, u8) = (month.parse().unwrap_or(0), day.parse().unwrap_or(0));
            (1..=12).contains(&month) && (1..=31).contains(&day)
        }
        _ => false,
    }
}

/// `HH:MM:SS`, optional fraction, then `Z` or an offset.
fn is_time(text: &str) -> bool {
    let (clock, zone) = match text.find(['Z', 'z', '+', '-']) {
        Some(at) => text.split_at(at),
        None => return false,
    };
    let clock = clock.split_once('.').map_or(clock, |(whole, _)| whole);
    let parts: Vec<&str> = clock.split(':').collect();
    let two = |s: &str| s.len() == 2 && s.bytes().all(|b| b.is_ascii_digit());
    parts.len() == 3
        && parts.iter().all(|p| two(p))
        && (zone.eq_ignore_ascii_case("z") || zone.len() == 6)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn schema_defaults_takes_each_default_and_skips_properties_without_one() {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "default": "Ada"},
                "age": {"type": "integer"},
                "ok": {"type": "boolean", "default": true}
            }
        });
        let Value::Object(schema) = schema else {
            unreachable!()
        };
        assert_eq!(
            Value::Object(schema_defaults(&schema)),
            json!({"name": "Ada", "ok": true})
        );
    }

    fn schema(value: Value) -> Map<String, Value> {
        let Value::Object(schema) = value else {
            unreachable!("a test's schema is an object")
        };
        schema
    }

    fn answer(value: Value) -> Map<String, Value> {
        schema(value)
    }

    #[test]
    fn check_answer_takes_an_answer_that_fits_every_rule() {
        let form = schema(json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 2, "maxLength": 5},
                "mail": {"type": "string", "format": "email"},
                "site": {"type": "string", "format": "uri"},
                "born": {"type": "string", "format": "date"},
                "at": {"type": "string", "format": "date-time"},
                "age": {"type": "integer", "minimum": 0, "maximum": 150},
                "ok": {"type": "boolean"},
                "size": {"type": "string", "enum": ["s", "m"]},
                "tier": {"type": "string", "oneOf": [{"const": "a", "title": "A"}]},
                "tags": {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}, "maxItems": 2}
            },
            "required": ["name"]
        }));
        let good = answer(json!({
            "name": "Ada", "mail": "ada@example.org", "site": "https://example.org",
            "born": "1815-12-10", "at": "2026-01-02T03:04:05Z", "age": 36, "ok": true,
            "size": "m", "tier": "a", "tags": ["x", "y"]
        }));
        assert_eq!(check_answer(&form, &good), Ok(()));
    }

    #[test]
    fn check_answer_refuses_what_breaks_any_rule() {
        let form = schema(json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 3},
                "mail": {"type": "string", "format": "email"},
                "born": {"type": "string", "format": "date"},
                "age": {"type": "integer", "minimum": 0},
                "ok": {"type": "boolean"},
                "size": {"type": "string", "enum": ["s", "m"]},
                "tags": {"type": "array", "items": {"anyOf": [{"const": "x"}]}, "maxItems": 1}
            },
            "required": ["ok"]
        }));
        for (bad, why) in [
            (json!({"ok": true, "name": "Adaline"}), "too long"),
            (json!({"ok": true, "name": 3}), "not a string"),
            (json!({"ok": true, "mail": "nobody"}), "not an email"),
            (json!({"ok": true, "born": "1815-13-10"}), "no such month"),
            (json!({"ok": true, "age": -1}), "below the minimum"),
            (json!({"ok": true, "age": 1.5}), "not an integer"),
            (json!({"ok": "yes"}), "not a boolean"),
            (json!({"ok": true, "size": "xl"}), "not a choice"),
            (json!({"ok": true, "tags": ["x", "x"]}), "too many items"),
            (json!({"ok": true, "tags": ["z"]}), "not an offered item"),
            (json!({"ok": true, "extra": 1}), "not a field"),
            (json!({"name": "Ada"}), "a required field missing"),
        ] {
            assert!(
                check_answer(&form, &answer(bad.clone())).is_err(),
                "{why}: {bad}"
            );
        }
    }
}
