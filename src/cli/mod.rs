//! The binary's plumbing: logging, configuration errors, exit codes, and the wiring of the real
//! model provider and MCP host into sessions.

pub mod acp;
mod ask;
pub mod demo;
pub mod hooks;
pub mod mcp;
pub mod run;
pub mod script;
pub mod transcript;
mod wire;

use std::fmt;
use std::io::Write as _;
use std::process::ExitCode;

/// The environment, as `--help` shows it after each command's options.
pub const ENV_HELP: &str = "\
Environment (an invalid value stops start-up with a message naming it, exit status 2):
  HOOKLOOP_PROVIDER                  openai (Chat Completions, default) or anthropic (Messages)
  HOOKLOOP_MODEL                     the model name; required by run and acp
  OPENAI_API_KEY, ANTHROPIC_API_KEY  the provider's key; optional with a custom base URL
  OPENAI_BASE_URL                    default https://api.openai.com/v1
  ANTHROPIC_BASE_URL                 default https://api.anthropic.com
  HOOKLOOP_LLM_TIMEOUT_SECS          per model request attempt not streamed, default 120
  HOOKLOOP_LLM_MAX_RETRIES           retries on 408, 429, 5xx and connection errors, default 3, at most 10
  HOOKLOOP_STREAM                    0 = whole replies instead of streamed ones, default 1
  HOOKLOOP_LLM_IDLE_TIMEOUT_SECS     streamed: longest silence between two pieces, default 60
  MCP_HOOK_SERVERS                   servers whose hooks run: unset = none, * = all, or a,b
  HOOKLOOP_COMMAND_HOOKS             command hooks of other hosts, [NAME=]PATH:...; acp reads
                                     a relative PATH in each session's directory
  SPROUT_AGENT_HOOK_TIMEOUT_MS       per hook call, default 2500
  SPROUT_AGENT_STOP_MAX_REJECTIONS   _Stop objections per session, default 3 (0 = never ask)
  HOOKLOOP_MAX_ROUNDS                model requests per prompt, default 0 = unlimited
  HOOKLOOP_TOOL_CONCURRENCY          tool calls of one reply run at once, default 8
  HOOKLOOP_MAX_CONTEXT_TOKENS        the model's context window, default 200000
  HOOKLOOP_MAX_OUTPUT_TOKENS         reserved for output, default 8192
  HOOKLOOP_SYSTEM_PROMPT(_FILE)      the system prompt, or a file holding it
  HOOKLOOP_RECORD_DIR                acp: write each session's transcript in this folder
  HOOKLOOP_LOG                       log filter for stderr (tracing syntax), default warn
  HOOKLOOP_OAUTH_CLIENT_SECRET       mcp login --client-id: the pre-registered client's secret
  XDG_CONFIG_HOME                    OAuth tokens live in $XDG_CONFIG_HOME/hookloop/mcp-oauth.json
                                     (default ~/.config/hookloop/mcp-oauth.json)
See the README for the full table.";

/// Exit statuses of `hookloop run` (and of start-up failures of every command).
pub mod exit {
    /// The model ended its turn.
    pub const OK: u8 = 0;
    /// The run failed: the model could not be reached, a server could not be configured.
    pub const FAILED: u8 = 1;
    /// Invalid arguments or environment.
    pub const USAGE: u8 = 2;
    /// The output limit cut the model's reply.
    pub const MAX_TOKENS: u8 = 3;
    /// The prompt's round cap was reached.
    pub const MAX_TURN_REQUESTS: u8 = 4;
    /// The model refused.
    pub const REFUSAL: u8 = 5;
    /// The provider stopped for a reason hookloop does not know.
    pub const OTHER_STOP: u8 = 6;
    /// The prompt was cancelled (Ctrl-C).
    pub const CANCELLED: u8 = 130;
}

/// Why a command could not do its work: a message for stderr and an exit status.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    /// A bad setting or argument (exit 2).
    pub fn usage(message: impl fmt::Display) -> Self {
        Self {
            code: exit::USAGE,
            message: message.to_string(),
        }
    }

    /// Anything else that stops the command (exit 1).
    pub fn failed(message: impl fmt::Display) -> Self {
        Self {
            code: exit::FAILED,
            message: message.to_string(),
        }
    }

    /// Prints the message, without control characters, and gives the exit status. A stderr that cannot be written loses
    /// the message, never the status (`eprintln!` would panic).
    pub fn report(self) -> ExitCode {
        // A message may quote a peer (a server's error, an authorization server's refusal),
        // and name a URL whose query or user info is a credential.
        let message = hookloop::text::without_url_secrets(&self.message);
        let message = hookloop::text::for_terminal(&message);
        let _ = writeln!(std::io::stderr(), "hookloop: {message}");
        ExitCode::from(self.code)
    }
}

impl From<hookloop::ConfigError> for Failure {
    fn from(e: hookloop::ConfigError) -> Self {
        Self::usage(e)
    }
}

/// `hookloop replay PATH...`: replays every transcript given or found beneath a folder, one per
/// core; prints one line per file, each divergence in full on stderr, and a summary. Exit 1
/// when any diverged, or when a record is cut short or ends mid-prompt (unless
/// `allow_truncated`), else 2 when any could not be read, else 0.
pub fn replay(
    paths: &[std::path::PathBuf],
    junit: Option<&std::path::Path>,
    allow_truncated: bool,
) -> ExitCode {
    use hookloop::transcript::{Outcome, default_threads, replay_files, suite_files};
    let files = match suite_files(paths) {
        Ok(files) => files,
        Err(e) => return Failure::usage(e).report(),
    };
    if files.is_empty() {
        return Failure::usage("no transcript (*.jsonl) found").report();
    }
    let mut report = replay_files(&files, default_threads());
    if allow_truncated {
        report.accept_not_whole();
    }
    for result in &report.results {
        println!("{result}");
        match &result.outcome {
            Outcome::Diverged(divergence) => eprintln!(
                "{}: the replay diverged\n{divergence}",
                result.path.display()
            ),
            Outcome::NotWhole(replay) => eprintln!(
                "{}: the replay matched as far as the record goes, but it is not whole \
                 (--allow-truncated accepts that)\n{replay}",
                result.path.display()
            ),
            Outcome::Unreadable(message) => {
                eprintln!("{}: {message}", result.path.display());
            }
            Outcome::Passed(_) => {}
        }
    }
    println!("{report}");
    if let Some(out) = junit
        && let Err(e) = report.save_junit(out)
    {
        return Failure::failed(format!("cannot write {}: {e}", out.display())).report();
    }
    if report.diverged() > 0 || report.not_whole() > 0 {
        ExitCode::from(exit::FAILED)
    } else if report.unreadable() > 0 {
        ExitCode::from(exit::USAGE)
    } else {
        ExitCode::from(exit::OK)
    }
}

/// `hookloop replay --live-tools`: the record's model side against live servers.
pub async fn replay_live(
    file: &std::path::Path,
    mcp_config: Option<&std::path::Path>,
    allow_truncated: bool,
) -> ExitCode {
    let transcript = match hookloop::transcript::Transcript::read(file) {
        Ok(transcript) => transcript,
        Err(e) => return Failure::usage(format!("{}: {e}", file.display())).report(),
    };
    if transcript.header.content_redacted {
        let refused = hookloop::transcript::TranscriptError::ContentRedacted;
        return Failure::usage(format!("{}: {refused}", file.display())).report();
    }
    let host = match live_host(mcp_config, &transcript.header.config.policy).await {
        Ok(host) => host,
        Err(failure) => return failure.report(),
    };
    let report = hookloop::transcript::replay_live(&transcript, &host).await;
    if report.is_clean() && (report.truncated.is_none() || allow_truncated) {
        println!("{report}");
        ExitCode::from(exit::OK)
    } else {
        eprintln!("{}: {report}", file.display());
        ExitCode::from(exit::FAILED)
    }
}

/// Logs go to stderr only (stdout carries answers and protocol frames), filtered by
/// `HOOKLOOP_LOG` (tracing's filter syntax), or `default` when it is unset. With the `otel`
/// feature, the engine's trace spans also go to the OTLP exporter the `OTEL_*` variables ask
/// for, if any; [`Telemetry::shutdown`] sends what is left at exit.
pub fn init_logging(default: &str) -> Result<Telemetry, Failure> {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;

    let filter = match std::env::var("HOOKLOOP_LOG") {
        Ok(spec) => tracing_subscriber::EnvFilter::try_new(&spec)
            .map_err(|e| Failure::usage(format!("HOOKLOOP_LOG={spec:?} is invalid: {e}")))?,
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(Failure::usage("HOOKLOOP_LOG is not valid UTF-8"));
        }
        Err(std::env::VarError::NotPresent) => tracing_subscriber::EnvFilter::new(default),
    };
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(|| LossyStderr)
        // On a failed write the subscriber would report it with `eprintln!`, which panics
        // when stderr is what failed.
        .log_internal_errors(false)
        .with_ansi(ansi)
        .with_target(false);
    #[cfg(feature = "otel")]
    {
        use tracing_subscriber::filter::FilterExt as _;

        let logs = logs.with_filter(filter.and(hookloop::telemetry::export::once_per_kind()));
        let exporter = hookloop::telemetry::export::Exporter::from_env()
            .map_err(|e| Failure::usage(e.to_string()))?;
        let spans = exporter.as_ref().map(|exporter| exporter.layer());
        tracing_subscriber::registry().with(logs).with(spans).init();
        Ok(Telemetry { exporter })
    }
    #[cfg(not(feature = "otel"))]
    {
        tracing_subscriber::registry()
            .with(logs.with_filter(filter))
            .init();
        Ok(Telemetry {})
    }
}

/// The process's span exporter, when the `otel` feature built one.
pub struct Telemetry {
    #[cfg(feature = "otel")]
    exporter: Option<hookloop::telemetry::export::Exporter>,
}

impl Telemetry {
    /// How long the exit waits for the collector to take the last spans.
    #[cfg(feature = "otel")]
    const SHUTDOWN: std::time::Duration = std::time::Duration::from_secs(2);

    /// Sends the spans still queued, waiting at most two seconds for the collector.
    pub fn shutdown(self) {
        #[cfg(feature = "otel")]
        if let Some(exporter) = self.exporter {
            exporter.shutdown(Self::SHUTDOWN);
        }
    }
}

/// Stderr for logs: a line that cannot be written (a closed pipe, a full disk, a file at its
/// size limit) is dropped, and the agent goes on. Logging must never end the process.
struct LossyStderr;

impl std::io::Write for LossyStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // One write is one formatted event. A URL in it (a dependency's message names one)
        // keeps no query or user info: a presigned URL's signature is a credential. Whatever
        // was not written is lost on purpose: claiming it all stops a retry loop.
        let _ = hookloop::text::WithoutUrlSecrets(std::io::stderr()).write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

/// Makes a write past the file-size limit (`RLIMIT_FSIZE`) fail with `EFBIG` instead of
/// raising `SIGXFSZ`, whose default action ends the process: a log or transcript file that
/// reaches the limit loses its writes, not the session.
pub fn ignore_file_size_signal() {
    #[cfg(unix)]
    // SAFETY: setting a signal's disposition to SIG_IGN installs no handler and is done before
    // any thread is started.
    if unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) } == libc::SIG_ERR {
        tracing::debug!("could not ignore SIGXFSZ");
    }
}

/// The live servers of `--mcp-config` and the command hooks of `HOOKLOOP_COMMAND_HOOKS`, for a
/// replay that goes on live; the replayed machine asks the record's allowlist, as `run` asks
/// its own.
pub(crate) async fn live_host(
    mcp_config: Option<&std::path::Path>,
    policy: &hookloop::Policy,
) -> Result<wire::Host, Failure> {
    let servers = wire::load_mcp_config(mcp_config)?;
    let cwd = std::env::current_dir().unwrap_or_else(|_| ".".into());
    let hooks = wire::load_command_hooks(&wire::command_hook_specs_from_env()?, &cwd)?;
    wire::warn_unconfigured_hook_servers(policy, &servers, &hooks);
    wire::connect(servers, hooks).await
}
