//! `hookloop run`'s person: a server's question (MCP elicitation) asked on the terminal, one
//! at a time, on stderr, answered on stdin. Only when stdin is a terminal: otherwise nobody is
//! there and every question is declined.

use std::io::{IsTerminal, Write};
use std::sync::Arc;

use hookloop::mcp::Nobody;
use hookloop::ports::{Answer, ElicitAnswer, Elicitation, ElicitationMode, Person};
use hookloop::text::for_terminal;
use serde_json::{Map, Value};
use tokio::io::{AsyncBufReadExt, BufReader, Lines, Stdin};
use tokio::sync::Mutex;

/// Tries at one field before the question is cancelled: a person who cannot give a valid
/// value three times running is not going to.
const TRIES: usize = 3;

/// The person of `hookloop run`: the terminal when stdin is one, else nobody.
pub fn person() -> Arc<dyn Person> {
    if std::io::stdin().is_terminal() {
        Arc::new(Terminal {
            input: Mutex::new(BufReader::new(tokio::io::stdin()).lines()),
        })
    } else {
        Arc::new(Nobody)
    }
}

/// The person at the terminal.
struct Terminal {
    /// Held for a whole question, so two servers' questions never interleave.
    input: Mutex<Lines<BufReader<Stdin>>>,
}

impl Person for Terminal {
    fn elicit(&self, question: Elicitation) -> Answer<'_> {
        Box::pin(async move {
            let mut input = self.input.lock().await;
            // The input ended or broke: nobody can answer any more.
            ask(&mut input, &question)
                .await
                .unwrap_or(ElicitAnswer::Cancel)
        })
    }
}

/// Asks `question`; `None` when stdin ends.
async fn ask(input: &mut Lines<BufReader<Stdin>>, question: &Elicitation) -> Option<ElicitAnswer> {
    // Server text on a terminal: no escape sequences get through.
    say(&format!(
        "\nhookloop: server {} asks: {}",
        question.server,
        for_terminal(&question.message)
    ));
    match &question.mode {
        ElicitationMode::Url { url, .. } => {
            say(&format!("  open {}", for_terminal(url)));
            let choice = read(input, "Done? [y]es, [n]o (decline), [c]ancel: ").await?;
            Some(match choice_of(&choice) {
                Choice::Yes => ElicitAnswer::Accept(Map::new()),
                Choice::No => ElicitAnswer::Decline,
                Choice::Cancel => ElicitAnswer::Cancel,
            })
        }
        ElicitationMode::Form { schema } => {
            let choice = read(input, "Answer? [y]es, [n]o (decline), [c]ancel: ").await?;
            match choice_of(&choice) {
                Choice::Yes => fill_in(input, schema).await,
                Choice::No => Some(ElicitAnswer::Decline),
                Choice::Cancel => Some(ElicitAnswer::Cancel),
            }
        }
    }
}

/// Reads each property of `schema` from the person, in the schema's order.
async fn fill_in(
    input: &mut Lines<BufReader<Stdin>>,
    schema: &Map<String, Value>,
) -> Option<ElicitAnswer> {
    let empty = Map::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut content = Map::new();
    for (name, property) in properties {
        let prompt = field_prompt(name, property);
        let mut tries = 0;
        let value = loop {
            let raw = read(input, &prompt).await?;
            match field_value(property, raw.trim(), required.contains(&name.as_str())) {
                Ok(value) => break value,
                Err(problem) if tries + 1 < TRIES => {
                    tries += 1;
                    say(&format!("  {problem}"));
                }
                Err(problem) => {
                    say(&format!("  {problem}; the question is cancelled"));
                    return Some(ElicitAnswer::Cancel);
                }
            }
        };
        if let Some(value) = value {
            content.insert(name.clone(), value);
        }
    }
    Some(ElicitAnswer::Accept(content))
}

/// How a field is asked for: its title (or name), its kind, its choices and its default.
fn field_prompt(name: &str, property: &Value) -> String {
    let title = property["title"].as_str().unwrap_or(name);
    let mut prompt = format!("  {}", for_terminal(title));
    if let Some(description) = property["description"].as_str() {
        prompt.push_str(&format!(" — {}", for_terminal(description)));
    }
    let choices = choices(property);
    let kind = property["type"].as_str().unwrap_or("string");
    if choices.is_empty() {
        prompt.push_str(&format!(" ({kind})"));
    } else {
        let joined = choices.join(", ");
        let how = if kind == "array" { "any of" } else { "one of" };
        prompt.push_str(&format!(" ({how}: {})", for_terminal(&joined)));
    }
    if let Some(default) = property.get("default") {
        prompt.push_str(&format!(" [{}]", for_terminal(&default.to_string())));
    }
    prompt.push_str(": ");
    prompt
}

/// The values a field allows, if it lists them: `enum`, or `oneOf`/`anyOf` of `const`s (for
/// an array, in its `items`).
fn choices(property: &Value) -> Vec<String> {
    let of = if property["type"] == "array" {
        &property["items"]
    } else {
        property
    };
    if let Some(values) = of["enum"].as_array() {
        return values
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect();
    }
    ["oneOf", "anyOf"]
        .iter()
        .filter_map(|key| of[key].as_array())
        .flatten()
        .filter_map(|option| option["const"].as_str().map(str::to_owned))
        .collect()
}

/// The value a person typed for a field, `None` to leave it out, or what is wrong with it.
/// Empty input takes the default, if there is one.
fn field_value(property: &Value, raw: &str, required: bool) -> Result<Option<Value>, String> {
    if raw.is_empty() {
        return match property.get("default") {
            Some(default) => Ok(Some(default.clone())),
            None if required => Err("a value is required".into()),
            None => Ok(None),
        };
    }
    let choices = choices(property);
    let allowed = |value: &str| choices.is_empty() || choices.iter().any(|c| c == value);
    let value = match property["type"].as_str().unwrap_or("string") {
        "integer" => raw
            .parse::<i64>()
            .map(Value::from)
            .map_err(|_| format!("{raw:?} is not a whole number"))?,
        "number" => raw
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| format!("{raw:?} is not a number"))?,
        "boolean" => match raw.to_ascii_lowercase().as_str() {
            "y" | "yes" | "true" => Value::Bool(true),
            "n" | "no" | "false" => Value::Bool(false),
            _ => return Err(format!("{raw:?} is not yes or no")),
        },
        "array" => {
            let items: Vec<&str> = raw.split(',').map(str::trim).collect();
            if let Some(bad) = items.iter().find(|item| !allowed(item)) {
                return Err(format!("{bad:?} is not one of the choices"));
            }
            Value::from(items)
        }
        _ if !allowed(raw) => return Err(format!("{raw:?} is not one of the choices")),
        _ => Value::from(raw),
    };
    Ok(Some(value))
}

enum Choice {
    Yes,
    No,
    Cancel,
}

/// A yes/no/cancel answer; Enter alone is yes.
fn choice_of(raw: &str) -> Choice {
    match raw.trim().to_ascii_lowercase().as_str() {
        "n" | "no" => Choice::No,
        "c" | "cancel" => Choice::Cancel,
        _ => Choice::Yes,
    }
}

fn say(line: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "{line}");
}

/// Shows `prompt` and reads a line; `None` when stdin ends.
async fn read(input: &mut Lines<BufReader<Stdin>>, prompt: &str) -> Option<String> {
    {
        let mut stderr = std::io::stderr().lock();
        let _ = write!(stderr, "{prompt}");
        let _ = stderr.flush();
    }
    input.next_line().await.ok().flatten()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn field_value_parses_each_kind_and_takes_the_default_on_empty_input() {
        let int = json!({"type": "integer", "default": 3});
        assert_eq!(field_value(&int, "", true), Ok(Some(json!(3))));
        assert_eq!(field_value(&int, "42", true), Ok(Some(json!(42))));
        assert!(field_value(&int, "4.5", true).is_err());
        let boolean = json!({"type": "boolean"});
        assert_eq!(field_value(&boolean, "yes", false), Ok(Some(json!(true))));
        assert_eq!(field_value(&boolean, "", false), Ok(None));
        let text = json!({"type": "string"});
        assert!(field_value(&text, "", true).is_err());
        let pick = json!({"type": "string", "oneOf": [{"const": "a"}, {"const": "b"}]});
        assert_eq!(field_value(&pick, "b", true), Ok(Some(json!("b"))));
        assert!(field_value(&pick, "c", true).is_err());
        let many = json!({"type": "array", "items": {"enum": ["x", "y", "z"]}});
        assert_eq!(
            field_value(&many, "x, z", true),
            Ok(Some(json!(["x", "z"])))
        );
        assert!(field_value(&many, "x,w", true).is_err());
    }

    #[test]
    fn field_prompt_shows_choices_and_default_without_escapes() {
        let property = json!({"type": "string", "title": "Col\u{1b}[31mour", "enum": ["red", "blue"], "default": "red"});
        assert_eq!(
            field_prompt("colour", &property),
            "  Col[31mour (one of: red, blue) [\"red\"]: "
        );
    }
}
