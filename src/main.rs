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

// The binary's allocator, not the library's. Measured with `CPU_PER_ROUND_CALLGRIND=1
// scripts/cpu_per_round.sh --floor 200` against glibc's malloc: see the README's CPU table.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An LLM agent loop whose MCP servers steer it through hook tools.
///
/// Hooks are tools whose name starts with `_`: hidden from the model, refused if it calls them,
/// and called by the engine at points of the session: `_Stop` when the model ends its turn
/// (non-empty text objects, and the model keeps working), `_PostCompact` after the history is
/// compacted (its text is put into the fresh context), `_SessionStart`, `_UserPromptSubmit` and
/// `_PostToolUse` (context for the model), `_PreToolUse` (text denies the call), `_PreCompact`
/// (guidance for the summary) and `_SessionEnd` (a notification). Hooks are advisory: a hook
/// that does not answer in time has nothing to say (a server that times out twice in a row is
/// killed), `_Stop` objections are budgeted, and a model that ends its turn again right after
/// an objection is let go. Only the servers MCP_HOOK_SERVERS names have their hooks called.
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
    /// out, and the engine stops anyway. Act three: `_PreToolUse` denies a wrong call. Act four:
    /// a subagent is held to its task by `_SubagentStop`. The model is scripted — no API key, no network — and
    /// the demo prints the command that runs the same story against a real provider.
    Demo,

    /// Run one prompt in the terminal and print the final answer on stdout.
    ///
    /// Progress goes to stderr as it happens: a spinner while the model thinks (plain lines when
    /// stderr is not a terminal), each tool call with its duration, each objection with its
    /// server and text and the budget left, compactions; a subagent's lines start with its id
    /// (`[agent-1] `). Ctrl-C cancels the prompt.
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

        /// Command hooks to run at the hook points as their host runs them, `[NAME=]PATH`;
        /// repeatable. PATH is a Claude Code settings file (.claude/settings.json), a Codex
        /// hooks.json or config.toml, or a plugin (its directory or its hooks/hooks.json).
        /// Each source is a server of hooks named NAME (default claude-code, codex, or the
        /// plugin's name) that MCP_HOOK_SERVERS must allow. Default: HOOKLOOP_COMMAND_HOOKS.
        #[arg(long = "command-hooks", value_name = "[NAME=]PATH")]
        command_hooks: Vec<String>,

        /// Print one JSON object per line on stdout (every progress event, then the answer)
        /// instead of progress on stderr and the answer on stdout. A subagent's events carry
        /// its id as "agent".
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

        /// What to ask, as words joined by spaces. Without it, or as `-`, the prompt is read
        /// from stdin (`hookloop run < task.md`, `git diff | hookloop run`).
        #[arg(value_name = "PROMPT")]
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

    /// Replay transcripts through the engine and report each one's first divergence, if any.
    ///
    /// The machine is run on the recorded facts and each effect it emits is checked against the
    /// record; no model, no server, no clock. PATHs are files or folders (every `*.jsonl`
    /// beneath), replayed in parallel, one per core: one line per file, then a summary; each
    /// divergence in full on stderr (the record, the state, and expected against actual). Exit
    /// status: 0 every file matched; 1 one diverged, or a record is cut short or ends mid-prompt
    /// (unless --allow-truncated); 2 a file could not be read or is not a transcript.
    ///
    /// With --live-tools (one FILE), the model's side still comes from the record, but tools
    /// and hooks run against live MCP servers (from --mcp-config, default ./.mcp.json), and
    /// every answer that differs from the record is reported (server drift): exit 0 when none
    /// drifted, 1 otherwise.
    ///
    /// With --until POINT --live (one FILE), the record is replayed up to POINT and the same
    /// session goes on with the configured model and live MCP servers: a fork of the recorded
    /// session, optionally with a new `_Stop` objection (--objection) and recorded (--record).
    Replay {
        /// Transcripts (JSONL) and folders of them.
        #[arg(value_name = "PATH", required = true)]
        paths: Vec<PathBuf>,

        /// Write a JUnit XML report to FILE: one test case per transcript, each divergence's
        /// diff in its failure.
        #[arg(long, value_name = "FILE", conflicts_with_all = ["live_tools", "live"])]
        junit: Option<PathBuf>,

        /// Run tools and hooks against live servers and report where they drift from the record.
        #[arg(long, conflicts_with = "live")]
        live_tools: bool,

        /// With --live-tools or --live: the servers, in the `.mcp.json` format. Default:
        /// ./.mcp.json.
        #[arg(long, value_name = "FILE")]
        mcp_config: Option<PathBuf>,

        /// Accept a record that was cut short (a crash, a write error) or ends mid-prompt: the
        /// part that was recorded must still match.
        #[arg(long)]
        allow_truncated: bool,
        /// With --live: replay FILE up to POINT — a record index N, `prompt:K` (before the K-th
        /// prompt, which is asked again) or `stop:K` (before the K-th `_Stop` round) — then go
        /// on with the configured model and live MCP servers, as `hookloop run` does, to the end
        /// of that prompt. Prints the model's last answer; exit status as `run`.
        #[arg(long, value_name = "POINT", requires = "live")]
        until: Option<String>,

        /// Continue live from --until (the environment of `hookloop run`: HOOKLOOP_MODEL,
        /// the provider's key and URL, MCP_HOOK_SERVERS...).
        #[arg(long, requires = "until")]
        live: bool,

        /// With --live: answer the `_Stop` round at POINT with TEXT instead of asking the
        /// servers ("what would the model do with this wording?").
        #[arg(long, value_name = "TEXT", requires = "live")]
        objection: Option<String>,

        /// With --live: write the recorded prefix and the live continuation to OUT, one
        /// transcript that replays.
        #[arg(long, value_name = "OUT", requires = "live")]
        record: Option<PathBuf>,
    },

    /// Read transcripts.
    #[command(subcommand)]
    Transcript(TranscriptCommand),

    /// The configured MCP servers: what they offer, and the logins of OAuth-protected ones.
    #[command(subcommand)]
    Mcp(McpCommand),

    /// The hook command of another agent host: `_` hooks at its events.
    ///
    /// The host runs it at its hook events with the event's JSON on stdin; it asks the `_` hook
    /// the event stands for of every server a `hookloop mcp proxy` of this host serves (only
    /// those MCP_HOOK_SERVERS allows, each within SPROUT_AGENT_HOOK_TIMEOUT_MS), keeps the
    /// session's `_Stop` budget (SPROUT_AGENT_STOP_MAX_REJECTIONS) between invocations, and
    /// answers in the host's own format and exit status. It fails open: on any error it
    /// answers "no objection" and says why on stderr.
    Hook {
        /// The host: claude-code, codex, gemini, cursor or goose.
        host: String,
    },

    /// Set another agent host up for `_` hooks: its MCP servers behind `hookloop mcp proxy`,
    /// `hookloop hook <host>` at its events.
    #[command(subcommand)]
    Hooks(HooksCommand),

    /// The demo's todo MCP server, over stdio (the demo starts it from this binary).
    #[command(hide = true)]
    TodoServer,
}

#[derive(Debug, Subcommand)]
enum HooksCommand {
    /// Put the host's stdio MCP servers behind `hookloop mcp proxy` and register
    /// `hookloop hook <host>` at its events, in the host's own files (the project's, or with
    /// --user the user's). A second install changes nothing.
    Install(HooksArgs),
    /// Take it back out: each server's own command, and the host's hooks but hookloop's.
    Uninstall(HooksArgs),
}

#[derive(Debug, clap::Args)]
struct HooksArgs {
    /// The host: claude-code, codex, gemini or cursor (goose: by hand, see the README).
    host: String,
    /// The project's files, under the current directory (the default).
    #[arg(long, conflicts_with = "user")]
    project: bool,
    /// The user's files, under the home directory (Codex: CODEX_HOME).
    #[arg(long)]
    user: bool,
    /// Print the change, as a diff, and write nothing.
    #[arg(long)]
    dry_run: bool,
}

#[derive(Debug, Subcommand)]
enum TranscriptCommand {
    /// Show a recorded session as a person reads it, rebuilt by replaying its facts.
    ///
    /// Each prompt, each model request (its messages as sent, with the part the request before
    /// also sent folded, and the tools offered when they changed), each reply, tool call and
    /// result, hook round (servers, answers, latencies, timeouts, kills), objection with the
    /// budget left, and compaction with its sizes, each at its recorded time. A transcript that
    /// was cut short or that diverges is shown up to its last good record, with where it stops
    /// (exit status 1); exit 2 when the file cannot be read.
    Show {
        /// The transcript (JSONL).
        #[arg(value_name = "FILE")]
        file: PathBuf,

        /// Print the session as one JSON document instead of text.
        #[arg(long, conflicts_with = "html")]
        json: bool,

        /// Write the session as one self-contained HTML page to OUT (no script, nothing
        /// fetched): a timeline picture above the conversation.
        #[arg(long, value_name = "OUT")]
        html: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum McpCommand {
    /// Log in to an OAuth-protected HTTP server and store its tokens.
    ///
    /// Prints the authorization URL (and opens a browser when there is a display), waits for
    /// the redirect on a loopback address, and stores the tokens in
    /// $XDG_CONFIG_HOME/hookloop/mcp-oauth.json (mode 0600), replacing an earlier login.
    /// Sessions then use them, refreshing them as they expire; a server that needs a login it
    /// does not have fails to start and names this command.
    Login {
        /// The server's name in the configuration.
        server: String,

        /// MCP servers, in the `.mcp.json` format. Default: ./.mcp.json.
        #[arg(long, value_name = "FILE")]
        mcp_config: Option<PathBuf>,

        /// A client id registered with the authorization server beforehand (its secret, if
        /// any, in HOOKLOOP_OAUTH_CLIENT_SECRET); else hookloop registers itself.
        #[arg(long, value_name = "ID")]
        client_id: Option<String>,

        /// The HTTPS URL of a client metadata document to use as the client id, where the
        /// authorization server accepts one.
        #[arg(long, value_name = "URL")]
        client_metadata_url: Option<String>,
    },

    /// Forget the stored tokens of a server.
    Logout {
        /// The server's name in the configuration.
        server: String,

        /// MCP servers, in the `.mcp.json` format. Default: ./.mcp.json.
        #[arg(long, value_name = "FILE")]
        mcp_config: Option<PathBuf>,
    },

    /// Run a stdio MCP server behind hookloop, for a host (Claude Code, Codex…) to start in
    /// its place: the host's traffic is relayed, the server's `_` tools are taken out of every
    /// tools/list the host sees and the host model's calls to them refused, and hook commands
    /// (`hookloop hook <host>`) call them on the same live connection through a private socket,
    /// $XDG_RUNTIME_DIR/hookloop-bridge/<host pid>/<NAME>.sock (else
    /// /tmp/hookloop-bridge-<uid>/…), mode 0600 in directories of mode 0700. Exit status: the
    /// server's.
    Proxy {
        /// The server's name, as MCP_HOOK_SERVERS names it.
        #[arg(long, default_value = "server")]
        name: String,

        /// The server's command and its arguments, after `--`.
        #[arg(value_name = "COMMAND", required = true, last = true)]
        command: Vec<String>,
    },

    /// Start each configured server and show its transport, protocol version, tools, hooks
    /// and login.
    List {
        /// MCP servers, in the `.mcp.json` format. Default: ./.mcp.json.
        #[arg(long, value_name = "FILE")]
        mcp_config: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::TodoServer = cli.command {
        // It runs its own runtime; its stdout is its protocol stream.
        return todo_server();
    }
    if let Command::Hooks(hooks) = &cli.command {
        let (action, args) = match hooks {
            HooksCommand::Install(args) => (hookloop::bridge::install::Action::Install, args),
            HooksCommand::Uninstall(args) => (hookloop::bridge::install::Action::Uninstall, args),
        };
        return cli::hooks::run(action, &args.host, args.user, args.dry_run);
    }
    if let Command::Hook { host } = &cli.command {
        // Sync, before logging and the runtime: it runs at every event of the host, and its
        // stderr is the host's to show.
        return ExitCode::from(u8::try_from(hookloop::bridge::command::main(host)).unwrap_or(1));
    }
    // A replay re-enacts warnings the session logged when it ran; they are not news. One with
    // live tools runs servers now, and what goes wrong with them is.
    let default_log = match cli.command {
        Command::Replay {
            live_tools: true, ..
        } => "warn",
        Command::Replay { .. } | Command::Transcript(_) => "error",
        _ => "warn",
    };
    cli::ignore_file_size_signal();
    let telemetry = match cli::init_logging(default_log) {
        Ok(telemetry) => telemetry,
        Err(failure) => return failure.report(),
    };
    let runtime = match runtime().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("hookloop: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The command runs as a task: a wake-up of `block_on`'s own future always goes through the
    // driver's eventfd (a system call and another turn of the poll loop), while a task woken
    // from the runtime's thread is queued in place.
    let code = runtime.block_on(async move {
        tokio::spawn(run(cli.command)).await.unwrap_or_else(|e| {
            eprintln!("hookloop: the command failed: {e}");
            ExitCode::FAILURE
        })
    });
    // Children and in-flight requests are done with; do not wait on stray blocking reads.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    telemetry.shutdown();
    code
}

/// Runs one command (other than the todo server, served apart).
async fn run(command: Command) -> ExitCode {
    match command {
        Command::Demo => cli::demo::main().await,
        Command::Run {
            mcp_config,
            command_hooks,
            json,
            record,
            redact_content,
            prompt,
        } => {
            cli::run::main(
                mcp_config,
                command_hooks,
                json,
                record,
                redact_content,
                prompt,
            )
            .await
        }
        Command::Acp => cli::acp::main().await,
        Command::Replay {
            paths,
            until: Some(point),
            objection,
            record,
            mcp_config,
            ..
        } => match paths.as_slice() {
            [file] => {
                cli::transcript::fork(
                    file,
                    &point,
                    objection.as_deref(),
                    record.as_deref(),
                    mcp_config.as_deref(),
                )
                .await
            }
            _ => cli::Failure::usage("--live replays one FILE").report(),
        },
        Command::Replay {
            paths,
            junit,
            live_tools: false,
            allow_truncated,
            ..
        } => cli::replay(&paths, junit.as_deref(), allow_truncated),
        Command::Replay {
            paths,
            live_tools: true,
            mcp_config,
            allow_truncated,
            ..
        } => match paths.as_slice() {
            [file] => cli::replay_live(file, mcp_config.as_deref(), allow_truncated).await,
            _ => cli::Failure::usage("--live-tools replays one FILE").report(),
        },
        Command::Transcript(TranscriptCommand::Show { file, json, html }) => {
            let format = match (json, html) {
                (_, Some(out)) => cli::transcript::ShowFormat::Html(out),
                (true, None) => cli::transcript::ShowFormat::Json,
                (false, None) => cli::transcript::ShowFormat::Text,
            };
            cli::transcript::show(&file, format)
        }
        Command::Mcp(McpCommand::Login {
            server,
            mcp_config,
            client_id,
            client_metadata_url,
        }) => {
            let client = cli::mcp::LoginClient {
                client_id,
                client_metadata_url,
            };
            cli::mcp::login(&server, mcp_config.as_deref(), client).await
        }
        Command::Mcp(McpCommand::Logout { server, mcp_config }) => {
            cli::mcp::logout(&server, mcp_config.as_deref())
        }
        Command::Mcp(McpCommand::Proxy { name, command }) => cli::mcp::proxy(&name, &command).await,
        Command::Mcp(McpCommand::List { mcp_config }) => {
            cli::mcp::list(mcp_config.as_deref()).await
        }
        // Served above, outside this runtime.
        Command::TodoServer | Command::Hook { .. } | Command::Hooks(_) => {
            ExitCode::from(cli::exit::USAGE)
        }
    }
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
