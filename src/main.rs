//! The `hookloop` command: the offline demo, one-shot runs in a terminal, and an Agent Client
//! Protocol agent over stdio.

mod cli;
// The demo's todo server, served by the hidden `todo-server` command so the demo needs no other
// program on a fresh machine.
#[cfg(feature = "demo")]
#[path = "../examples/todo_server.rs"]
mod todo_example;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// An LLM agent loop whose MCP servers steer it through hook tools (`_Stop`, `_PostCompact`).
///
/// Hooks are tools whose name starts with `_`: hidden from the model, called by the engine when
/// the model ends its turn (`_Stop`: non-empty text objects, and the model keeps working) or
/// after the history is compacted (`_PostCompact`: its text is put into the fresh context).
/// Hooks are advisory: they time out, their objections are budgeted, and a model that ends its
/// turn again right after an objection is let go.
///
/// Start with `hookloop demo`: it runs offline, with a scripted model.
#[derive(Debug, Parser)]
#[command(name = "hookloop", version, propagate_version = true, after_long_help = cli::ENV_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show hooks steering an agent, offline: a scripted model and the real todo MCP server.
    ///
    /// Act one: the model tries to stop with todos open, `_Stop` objects, the model works
    /// through the list, a compaction re-injects the open todos through `_PostCompact`, and the
    /// model stops for good. Act two: a stubborn hook objects forever, the objection budget runs
    /// out, and the engine stops anyway. The model is scripted — no API key, no network — and
    /// the demo prints the command that runs the same story against a real provider.
    Demo,

    /// Run one prompt in the terminal and print the final answer on stdout.
    ///
    /// Progress goes to stderr as it happens: a spinner while the model thinks (plain lines when
    /// stderr is not a terminal), each tool call with its duration, each objection with its
    /// server and text and the budget left, compactions. Ctrl-C cancels the prompt.
    ///
    /// Exit status: 0 the model ended its turn; 1 the run failed (model unreachable, bad MCP
    /// configuration); 2 invalid arguments or environment; 3 the output limit cut the reply
    /// (max_tokens); 4 the round cap was reached (HOOKLOOP_MAX_ROUNDS); 5 the model refused;
    /// 6 the provider stopped for a reason hookloop does not know; 130 cancelled.
    #[command(after_long_help = cli::ENV_HELP)]
    Run {
        /// MCP servers, in the `.mcp.json` format: {"mcpServers": {"name": {"command", "args",
        /// "env"} | {"type": "http", "url", "headers"}}}. Default: ./.mcp.json if it exists.
        #[arg(long, value_name = "FILE")]
        mcp_config: Option<PathBuf>,

        /// Print one JSON object per line on stdout (every progress event, then the answer)
        /// instead of progress on stderr and the answer on stdout.
        #[arg(long)]
        json: bool,

        /// Record the session's transcript to FILE (JSONL, flushed line by line; replay it with
        /// `hookloop replay FILE`). API keys are never written; prompts, replies and tool
        /// output are, verbatim (see --redact-content). If the record cannot be written whole,
        /// the run exits 1 and says why.
        #[arg(long, value_name = "FILE")]
        record: Option<PathBuf>,

        /// With --record: replace prompts, replies, tool arguments and output, and hook answers
        /// by their lengths in the transcript, for records that must be shared. Tools, hooks,
        /// objections, stop reasons and timings stay; such a record cannot be replayed.
        #[arg(long, requires = "record")]
        redact_content: bool,

        /// What to ask.
        #[arg(required = true, value_name = "PROMPT")]
        prompt: Vec<String>,
    },

    /// Serve the Agent Client Protocol (v1) on stdin and stdout, for editors and other clients.
    ///
    /// Each `session/new` starts the MCP servers the client lists (stdio and HTTP) for that
    /// session alone; sessions run concurrently, one prompt at a time each. Stdout carries
    /// protocol frames only; logs go to stderr (HOOKLOOP_LOG). Frames over 4 MiB are refused.
    /// With HOOKLOOP_RECORD_DIR set, each session's transcript is written there, one file each.
    #[command(after_long_help = cli::ENV_HELP)]
    Acp,

    /// Replay a transcript through the engine and report the first divergence, if any.
    ///
    /// The machine is run on the recorded facts and each effect it emits is checked against the
    /// record; no model, no server, no clock. Exit status: 0 the replay matched; 1 it diverged
    /// (the report shows the record, the state, and expected against actual), or the record is
    /// cut short or ends mid-prompt (unless --allow-truncated); 2 the file could not be read or
    /// is not a transcript.
    ///
    /// With --live-tools, the model's side still comes from the record, but tools and hooks run
    /// against live MCP servers (from --mcp-config, default ./.mcp.json), and every answer that
    /// differs from the record is reported (server drift): exit 0 when none drifted, 1 otherwise.
    Replay {
        /// The transcript (JSONL) to replay.
        #[arg(value_name = "FILE")]
        file: PathBuf,

        /// Run tools and hooks against live servers and report where they drift from the record.
        #[arg(long)]
        live_tools: bool,

        /// With --live-tools: the servers, in the `.mcp.json` format. Default: ./.mcp.json.
        #[arg(long, value_name = "FILE", requires = "live_tools")]
        mcp_config: Option<PathBuf>,

        /// Accept a record that was cut short (a crash, a write error) or ends mid-prompt: the
        /// part that was recorded must still match.
        #[arg(long)]
        allow_truncated: bool,
    },

    /// The demo's todo MCP server, over stdio (the demo starts it from this binary).
    #[command(hide = true)]
    TodoServer,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::TodoServer = cli.command {
        // It runs its own runtime; its stdout is its protocol stream.
        return todo_server();
    }
    if let Err(failure) = cli::init_logging("warn") {
        return failure.report();
    }
    let runtime = match runtime().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("hookloop: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(async move {
        match cli.command {
            Command::Demo => cli::demo::main().await,
            Command::Run {
                mcp_config,
                json,
                record,
                redact_content,
                prompt,
            } => cli::run::main(mcp_config, json, record, redact_content, prompt.join(" ")).await,
            Command::Acp => cli::acp::main().await,
            Command::Replay {
                file,
                live_tools: false,
                allow_truncated,
                ..
            } => cli::replay(&file, allow_truncated),
            Command::Replay {
                file,
                live_tools: true,
                mcp_config,
                allow_truncated,
            } => cli::replay_live(&file, mcp_config.as_deref(), allow_truncated).await,
            // Served above, outside this runtime.
            Command::TodoServer => ExitCode::from(cli::exit::USAGE),
        }
    });
    // Children and in-flight requests are done with; do not wait on stray blocking reads.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    code
}

/// The runtime every command runs on: one thread. A round hands the model's answer
/// to the machine, the machine's order to the MCP client and the tool's answer back; on a
/// multi-threaded runtime each hand-off may wake another worker, which costs more CPU than the
/// work itself. `acp` sessions still run concurrently, interleaved at their await points: a
/// session spends its time waiting on the model and its tools, not computing.
fn runtime() -> tokio::runtime::Builder {
    tokio::runtime::Builder::new_current_thread()
}

#[cfg(feature = "demo")]
fn todo_server() -> ExitCode {
    match todo_example::main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hookloop todo-server: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(not(feature = "demo"))]
fn todo_server() -> ExitCode {
    eprintln!("hookloop: built without the `demo` feature, so without the todo server");
    ExitCode::from(cli::exit::USAGE)
}
