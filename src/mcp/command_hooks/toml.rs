//! Codex's `config.toml` read as JSON, so that its `[hooks]` table is read by the same code
//! as a `hooks.json`: tables become objects, arrays of tables arrays of objects, dates their
//! RFC 3339 text.

use serde_json::{Map, Number, Value};
use toml_edit::{Document, Item};

/// Nesting deeper than this is refused (no hook configuration comes near it).
const MAX_DEPTH: usize = 64;

/// The document `text` as a JSON value, or why it is not TOML.
pub(crate) fn to_json(text: &str) -> Result<Value, String> {
    let document = Document::parse(text).map_err(|e| crate::text::one_line(&e.to_string(), 300))?;
    item(document.as_item(), 0)
}

fn item(item: &Item, depth: usize) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err(format!("nested more than {MAX_DEPTH} levels deep"));
    }
    Ok(match item {
        Item::None => Value::Null,
        Item::Value(v) => value(v, depth)?,
        Item::Table(table) => object(table.iter().map(|(k, v)| (k, Entry::Item(v))), depth)?,
        Item::ArrayOfTables(tables) => Value::Array(
            tables
                .iter()
                .map(|table| object(table.iter().map(|(k, v)| (k, Entry::Item(v))), depth + 1))
                .collect::<Result<_, _>>()?,
        ),
    })
}

/// A table's entry, an item or an inline table's value.
enum Entry<'a> {
    Item(&'a Item),
    Value(&'a toml_edit::Value),
}

fn object<'a>(
    entries: impl Iterator<Item = (&'a str, Entry<'a>)>,
    depth: usize,
) -> Result<Value, String> {
    let mut map = Map::new();
    for (key, entry) in entries {
        let v = match entry {
            Entry::Item(i) => item(i, depth + 1)?,
            Entry::Value(v) => value(v, depth + 1)?,
        };
        map.insert(key.to_owned(), v);
    }
    Ok(Value::Object(map))
}

fn value(v: &toml_edit::Value, depth: usize) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err(format!("nested more than {MAX_DEPTH} levels deep"));
    }
    Ok(match v {
        toml_edit::Value::String(s) => Value::String(s.value().clone()),
        toml_edit::Value::Integer(i) => Value::from(*i.value()),
        // TOML allows inf and nan, which JSON has no number for.
        toml_edit::Value::Float(f) => {
            Number::from_f64(*f.value()).map_or(Value::Null, Value::Number)
        }
        toml_edit::Value::Boolean(b) => Value::Bool(*b.value()),
        toml_edit::Value::Datetime(d) => Value::String(d.value().to_string()),
        toml_edit::Value::Array(array) => Value::Array(
            array
                .iter()
                .map(|v| value(v, depth + 1))
                .collect::<Result<_, _>>()?,
        ),
        toml_edit::Value::InlineTable(table) => {
            object(table.iter().map(|(k, v)| (k, Entry::Value(v))), depth)?
        }
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn codex_hooks_tables_read_as_the_json_of_a_hooks_file() {
        let text = r#"
model = "gpt-5"

[[hooks.PreToolUse]]
matcher = "^Bash$"

[[hooks.PreToolUse.hooks]]
type = "command"
command = "./guard.sh"
timeout = 5

[[hooks.Stop]]
hooks = [{ type = "command", command = "make test", timeout = 1.5 }]
"#;
        assert_eq!(
            to_json(text).unwrap()["hooks"],
            json!({
                "PreToolUse": [{"matcher": "^Bash$",
                    "hooks": [{"type": "command", "command": "./guard.sh", "timeout": 5}]}],
                "Stop": [{"hooks": [{"type": "command", "command": "make test", "timeout": 1.5}]}]
            })
        );
    }

    #[test]
    fn text_that_is_not_toml_is_an_error_on_one_line() {
        let error = to_json("[hooks\nStop = 1").unwrap_err();
        assert!(!error.contains('\n'), "{error}");
    }

    #[test]
    fn dates_and_non_finite_floats_have_a_json_form() {
        let value = to_json("when = 1979-05-27T07:32:00Z\nx = inf").unwrap();
        assert_eq!(value["when"], "1979-05-27T07:32:00Z");
        assert_eq!(value["x"], Value::Null);
    }

    #[test]
    fn nesting_past_the_limit_is_refused() {
        let text = format!("x = {}1{}", "[".repeat(70), "]".repeat(70));
        // The parser may refuse it first; either way it is an error, not a stack overflow.
        assert!(to_json(&text).is_err());
    }
}
