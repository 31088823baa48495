//! `hookloop demo`: the four-act story, offline, with a scripted model and the real todo server.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use super::script::{Act, DemoModel, Narrator};
use hookloop::machine::{FinishReason, SkipReason, Subagents};
use hookloop::progress::{Event, ProgressObserver};
use hookloop::{Config, Hook, HookServers, PromptStop, ServerName, Session};

use super::{Failure, wire};

/// The todo server's name in the demo, and so in `MCP_HOOK_SERVERS`.
const SERVER: &str = "todo";

const ACT_ONE_PROMPT: &str = "Get the release out: work through the todo list.";
const ACT_TWO_PROMPT: &str = "Tidy up the backlog.";
const ACT_THREE_PROMPT: &str = "Write the release notes and tick them off.";
const ACT_FOUR_PROMPT: &str = "Get the upgrade guide written; a subagent can do it.";

/// Runs the four acts; exits 1 if the story did not unfold as told (so CI notices).
pub async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report(),
    }
}

/// What happened in one act, for checking the story's milestones.
#[derive(Default)]
struct Seen {
    objections: u32,
    compactions: u32,
    post_compact: u32,
    tool_calls: u32,
    budget_spent: bool,
    denials: u32,
    last_hook_quiet: bool,
    finished: Option<FinishReason>,
    /// `_SubagentStop` objections, in any subagent.
    agent_objections: u32,
    /// Tool calls a subagent completed without error.
    agent_tool_calls: u32,
}

async fn run() -> Result<(), Failure> {
    let out = Arc::new(Mutex::new(Narrator::new(std::io::stdout())));
    let say = |text: &str| {
        let mut narrator = out.lock().unwrap_or_else(|p| p.into_inner());
        narrator
            .say(text)
            .map_err(|e| Failure::failed(format!("cannot write: {e}")))
    };
    say("hookloop demo")?;
    say("=============")?;
    say(
        "The model in this demo is SCRIPTED: a short deterministic program (DemoModel, in the binary)",
    )?;
    say(
        "stands in for the LLM, so nothing here needs an API key or the network. Everything else is",
    )?;
    say(
        "real: the engine, and the todo MCP server, started from this binary as a child process over",
    )?;
    say(
        "stdio, with its _Stop, _PostCompact, _PreToolUse and _SubagentStop hooks on (MCP_HOOK_SERVERS=todo).",
    )?;
    say("")?;

    say("Act 1 — the model wants to stop early")?;
    say("--------------------------------------")?;
    say(&format!("user: {ACT_ONE_PROMPT}"))?;
    let config = Config::builder()
        .hook_servers(HookServers::Named(vec![
            ServerName::new(SERVER).map_err(Failure::failed)?,
        ]))
        // A small context window, so the history is compacted during the act.
        .context_window(wire::DEMO_CONTEXT_TOKENS, 100)
        // One tool call at a time, so the todos are numbered in the order they were planned.
        .tool_concurrency(1)
        .build()?;
    let host = wire::todo_host(SERVER).await?;
    let model = DemoModel::new(Act::WorkThroughTodos, SERVER);
    let one = play(config, model, host, ACT_ONE_PROMPT, &out).await?;
    check(one.objections >= 1, "act 1: _Stop never objected")?;
    check(one.tool_calls >= 1, "act 1: the model completed no todo")?;
    check(
        one.compactions >= 1,
        "act 1: the history was never compacted",
    )?;
    check(
        one.post_compact >= 1,
        "act 1: _PostCompact re-injected nothing",
    )?;
    check(
        one.last_hook_quiet && one.finished == Some(FinishReason::EndTurn),
        "act 1: the model did not stop for good with the list empty",
    )?;
    say("  ✓ the list is empty, _Stop has nothing left to say, and the model stopped for good.")?;
    say("")?;

    say("Act 2 — a stubborn hook")?;
    say("-----------------------")?;
    say("A fresh session. This time the open todo is one no tool can close, so the todo server's")?;
    say(
        "_Stop objects to every stop, whatever the model does. Hooks are advisory: a session may be",
    )?;
    say(
        "objected to 3 times (SPROUT_AGENT_STOP_MAX_REJECTIONS), then the engine stops regardless.",
    )?;
    say(&format!("user: {ACT_TWO_PROMPT}"))?;
    let config = Config::builder()
        .hook_servers(HookServers::Named(vec![
            ServerName::new(SERVER).map_err(Failure::failed)?,
        ]))
        .build()?;
    let budget = config.policy().stop_max_rejections;
    let host = wire::todo_host(SERVER).await?;
    let model = DemoModel::new(Act::Stubborn, SERVER);
    let two = play(config, model, host, ACT_TWO_PROMPT, &out).await?;
    check(
        two.objections == budget,
        "act 2: the hook did not use the whole budget",
    )?;
    check(
        two.budget_spent,
        "act 2: the engine never said the budget was spent",
    )?;
    check(
        two.finished == Some(FinishReason::EndTurn),
        "act 2: the prompt did not end",
    )?;
    say(&format!(
        "  ✓ {budget} objections, the budget is spent, and the engine ended the turn anyway."
    ))?;
    say("")?;

    say("Act 3 — a gate before each tool call")?;
    say("------------------------------------")?;
    say(
        "The todo server also has _PreToolUse: before a tool call runs, it may deny it. The model",
    )?;
    say("asks to complete a todo number that does not exist; the call never runs, and the model")?;
    say("gets the denial as the call's error result.")?;
    say(&format!("user: {ACT_THREE_PROMPT}"))?;
    let config = Config::builder()
        .hook_servers(HookServers::Named(vec![
            ServerName::new(SERVER).map_err(Failure::failed)?,
        ]))
        .build()?;
    let host = wire::todo_host(SERVER).await?;
    let model = DemoModel::new(Act::Gated, SERVER);
    let three = play(config, model, host, ACT_THREE_PROMPT, &out).await?;
    check(three.denials == 1, "act 3: _PreToolUse denied nothing")?;
    check(
        three.last_hook_quiet && three.finished == Some(FinishReason::EndTurn),
        "act 3: the model did not finish the real todo",
    )?;
    say("  ✓ the wrong call was denied before it ran, and the model completed the real todo.")?;
    say("")?;

    say("Act 4 — a subagent, held to its task")?;
    say("------------------------------------")?;
    say(
        "With subagents on (HOOKLOOP_SUBAGENTS=1) the model may hand a task to a subagent: a fresh",
    )?;
    say("conversation with the same servers and hooks. Its hooks say which agent they are asked")?;
    say("for, and _SubagentStop stands in for _Stop: the todo server objects while the todo the")?;
    say("subagent was sent to finish is open. The parent sees only the subagent's final answer.")?;
    say(&format!("user: {ACT_FOUR_PROMPT}"))?;
    let config = Config::builder()
        .hook_servers(HookServers::Named(vec![
            ServerName::new(SERVER).map_err(Failure::failed)?,
        ]))
        .subagents(Subagents::new(1))
        .build()?;
    let host = wire::todo_host(SERVER).await?;
    let model = DemoModel::new(Act::Delegate, SERVER);
    let four = play(config, model, host, ACT_FOUR_PROMPT, &out).await?;
    check(
        four.agent_objections == 1,
        "act 4: _SubagentStop did not object once",
    )?;
    check(
        four.agent_tool_calls >= 1,
        "act 4: the subagent completed no todo",
    )?;
    check(
        four.last_hook_quiet && four.finished == Some(FinishReason::EndTurn),
        "act 4: the parent did not stop with the list empty",
    )?;
    say(
        "  ✓ the subagent was kept at it until its todo was done; the parent got its answer and stopped.",
    )?;
    say("")?;

    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "hookloop".into());
    say("Run the same story against a real model (any OpenAI-compatible or Anthropic API):")?;
    say(&format!(
        "  echo '{{\"mcpServers\": {{\"todo\": {{\"command\": \"{exe}\", \"args\": [\"todo-server\"]}}}}}}' > .mcp.json"
    ))?;
    say(&format!(
        "  MCP_HOOK_SERVERS=todo HOOKLOOP_MODEL=gpt-4o-mini OPENAI_API_KEY=sk-... {exe} run \"{ACT_ONE_PROMPT}\""
    ))?;
    Ok(())
}

/// Runs one act's prompt, narrating every event, and returns what was seen.
async fn play(
    config: Config,
    model: DemoModel,
    host: wire::Host,
    prompt: &str,
    out: &Arc<Mutex<Narrator<std::io::Stdout>>>,
) -> Result<Seen, Failure> {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut session = Session::new(config, model, host);
    let (narrate, record) = (Arc::clone(out), Arc::clone(&seen));
    let (narrate_agents, record_agents) = (Arc::clone(out), Arc::clone(&seen));
    let agents = move |_, agent: &hookloop::machine::AgentId, event: Event| {
        {
            let mut seen = record_agents.lock().unwrap_or_else(|p| p.into_inner());
            match &event {
                Event::Objection { .. } => seen.agent_objections += 1,
                Event::ToolFinished {
                    is_error: false, ..
                } => seen.agent_tool_calls += 1,
                _ => {}
            }
        }
        let mut narrator = narrate_agents.lock().unwrap_or_else(|p| p.into_inner());
        let _ = narrator.event_in(Some(agent), &event);
    };
    session.add_observer(
        ProgressObserver::new(move |_, event| {
            {
                let mut seen = record.lock().unwrap_or_else(|p| p.into_inner());
                match &event {
                    Event::Objection { .. } => {
                        seen.objections += 1;
                        seen.last_hook_quiet = false;
                    }
                    Event::HookCalled {
                        hook: Hook::Stop, ..
                    } => seen.last_hook_quiet = true,
                    Event::Compacted { .. } => seen.compactions += 1,
                    Event::PostCompactInjected { .. } => seen.post_compact += 1,
                    Event::ToolDenied { .. } => seen.denials += 1,
                    Event::ToolFinished {
                        is_error: false, ..
                    } => seen.tool_calls += 1,
                    Event::StopSkipped {
                        reason: SkipReason::BudgetSpent,
                    } => seen.budget_spent = true,
                    Event::Finished { reason } => seen.finished = Some(reason.clone()),
                    _ => {}
                }
            }
            let mut narrator = narrate.lock().unwrap_or_else(|p| p.into_inner());
            // The story is the product here; a closed stdout ends the demo at the next check.
            let _ = narrator.event(&event);
        })
        .with_agents(agents),
    );
    let stop = session
        .prompt(prompt)
        .await
        .map_err(|e| Failure::failed(format!("the demo session failed: {e}")))?;
    if stop != PromptStop::EndTurn {
        return Err(Failure::failed(format!(
            "the demo prompt ended with {stop:?}"
        )));
    }
    drop(session);
    let seen = std::mem::take(&mut *seen.lock().unwrap_or_else(|p| p.into_inner()));
    Ok(seen)
}

fn check(ok: bool, what: &str) -> Result<(), Failure> {
    if ok {
        Ok(())
    } else {
        Err(Failure::failed(format!(
            "the demo's story went wrong: {what}"
        )))
    }
}
