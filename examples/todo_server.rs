//! A todo list as an MCP server (stdio) that steers an agent through five hook tools:
//!
//! - `_SessionStart` lists the open todos, if any, as context for the session's first prompt.
//! - `_PreToolUse` denies `complete` of a todo that does not exist, before the call runs.
//! - `_Stop` objects while todos are open: `2 open: write tests; update docs`. Empty when all
//!   are done, so the agent may stop.
//! - `_SubagentStop` does the same when a subagent ends its turn, naming it: the list is
//!   shared, so a subagent sent to finish it is held to it.
//! - `_PostCompact` returns the open list, so it survives a compaction of the history.
//!
//! The model sees `add`, `complete` and `list`; it never sees the hooks, which the engine calls.
//!
//! ```text
//! cargo build --example todo_server
//! MCP_HOOK_SERVERS=todo hookloop run …   # with {"todo": {"command": "target/debug/examples/todo_server"}}
//! ```

use std::sync::{Arc, Mutex};

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::{ServerHandler, ServiceExt, schemars, tool, tool_handler, tool_router};

#[derive(Clone)]
struct Todos {
    items: Arc<Mutex<Vec<Todo>>>,
    // Read by the code `#[tool_handler]` generates, which the lint does not see.
    #[allow(dead_code)]
    tool_router: ToolRouter<Self>,
}

struct Todo {
    text: String,
    done: bool,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    /// What there is to do.
    text: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Complete {
    /// The number `list` shows for the todo.
    id: usize,
}

/// The arguments of `_PreToolUse`: the call about to run.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct PreToolUse {
    /// The qualified name the model called, `<server>__<tool>`.
    tool: String,
    /// The call's arguments.
    #[serde(default)]
    arguments: serde_json::Value,
}

/// The arguments of `_SubagentStop`: the subagent that ended its turn, and its answer.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct SubagentStop {
    /// The subagent's id.
    agent: String,
}

impl Todos {
    fn new() -> Self {
        Self {
            items: Arc::default(),
            tool_router: Self::tool_router(),
        }
    }

    fn open(&self) -> Vec<String> {
        let items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        items
            .iter()
            .filter(|t| !t.done)
            .map(|t| t.text.clone())
            .collect()
    }
}

#[tool_router]
impl Todos {
    #[tool(description = "Add a todo. Returns its number.")]
    fn add(&self, Parameters(Add { text }): Parameters<Add>) -> String {
        let mut items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        items.push(Todo { text, done: false });
        format!("added #{}", items.len())
    }

    #[tool(description = "Mark a todo done, by its number.")]
    fn complete(&self, Parameters(Complete { id }): Parameters<Complete>) -> String {
        let mut items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        match id.checked_sub(1).and_then(|i| items.get_mut(i)) {
            Some(todo) => {
                todo.done = true;
                format!("completed #{id}: {}", todo.text)
            }
            None => format!("there is no todo #{id}"),
        }
    }

    #[tool(description = "List every todo with its number and state.")]
    fn list(&self) -> String {
        let items = self.items.lock().unwrap_or_else(|p| p.into_inner());
        if items.is_empty() {
            return "no todos".into();
        }
        items
            .iter()
            .enumerate()
            .map(|(i, t)| format!("#{} [{}] {}", i + 1, if t.done { "x" } else { " " }, t.text))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Objects to the end of the turn while todos are open.
    #[tool(name = "_Stop", description = "Lists the open todos, if any.")]
    fn stop(&self) -> String {
        let open = self.open();
        if open.is_empty() {
            String::new()
        } else {
            format!("{} open: {}", open.len(), open.join("; "))
        }
    }

    /// Objects to a subagent's end of turn while todos are open.
    #[tool(
        name = "_SubagentStop",
        description = "Lists the open todos, if any, when a subagent ends its turn."
    )]
    fn subagent_stop(
        &self,
        Parameters(SubagentStop { agent }): Parameters<SubagentStop>,
    ) -> String {
        match self.stop() {
            open if open.is_empty() => open,
            open => format!("{agent}: {open}"),
        }
    }

    /// Gives the session's first prompt the open todos as context.
    #[tool(name = "_SessionStart", description = "Lists the open todos, if any.")]
    fn session_start(&self) -> String {
        let open = self.open();
        if open.is_empty() {
            String::new()
        } else {
            format!("Open todos from earlier:\n- {}", open.join("\n- "))
        }
    }

    /// Denies `complete` of a todo that does not exist; everything else may run.
    #[tool(
        name = "_PreToolUse",
        description = "Checks a call before it runs; denies completing an unknown todo."
    )]
    fn pre_tool_use(
        &self,
        Parameters(PreToolUse { tool, arguments }): Parameters<PreToolUse>,
    ) -> String {
        if !tool.ends_with("__complete") {
            return String::new();
        }
        let count = self.items.lock().unwrap_or_else(|p| p.into_inner()).len();
        match arguments.get("id").and_then(serde_json::Value::as_u64) {
            Some(id) if id >= 1 && id <= count as u64 => String::new(),
            Some(id) => format!("there is no todo #{id}: call list to see the numbers"),
            None => "complete needs the todo's number as id".into(),
        }
    }

    /// Puts the open todos back into a compacted context.
    #[tool(name = "_PostCompact", description = "Restates the open todos.")]
    fn post_compact(&self) -> String {
        let open = self.open();
        if open.is_empty() {
            String::new()
        } else {
            format!("Open todos:\n- {}", open.join("\n- "))
        }
    }
}

#[tool_handler]
impl ServerHandler for Todos {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_instructions("A todo list. Add what you plan to do; complete it when done.")
    }
}

// `pub`: the hookloop binary serves this as its hidden `todo-server` command, for the demo.
#[tokio::main(flavor = "current_thread")]
pub async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = Todos::new()
        .serve((tokio::io::stdin(), tokio::io::stdout()))
        .await?;
    server.waiting().await?;
    Ok(())
}
