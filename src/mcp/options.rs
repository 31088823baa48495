//! The host's limits and timeouts, [`HostOptions`], and the `with_*` methods an embedder sets
//! them with.

use std::path::PathBuf;
use std::time::Duration;

use crate::mcp::auth::OAuthOptions;

/// The host's limits and timeouts. The defaults suit an interactive agent.
///
/// Start from [`HostOptions::default`] and change what you need; the struct gains fields as the
/// host does, so it cannot be built field by field outside this crate:
///
/// ```
/// use std::time::Duration;
///
/// use hookloop::mcp::HostOptions;
///
/// let options = HostOptions::default()
///     .with_startup_timeout(Duration::from_secs(10))
///     .with_call_timeout(Duration::from_secs(120))
///     .with_max_tools(64)
///     .with_roots(["/srv/project"]);
/// assert_eq!(options.max_tools, 64);
/// assert_eq!(options.max_servers, HostOptions::default().max_servers);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostOptions {
    /// Sent to hook servers as `_meta["hookloop/session"]` until
    /// [`ToolHost::set_session_id`](crate::ports::ToolHost::set_session_id) names the session.
    /// Default: a random id.
    pub session_id: String,
    /// Bounds one server's start-up: spawn or connect, initialization, `tools/list`. Default 30 s.
    pub startup_timeout: Duration,
    /// Bounds one tool call. Default 600 s.
    pub call_timeout: Duration,
    /// When true, [`McpHost::connect`](crate::mcp::McpHost::connect) fails if any server fails
    /// to start; else the session starts without it. Default false.
    pub all_or_nothing: bool,
    /// Servers per session. Default 16.
    pub max_servers: usize,
    /// Tools per session, hooks included. Default 256.
    pub max_tools: usize,
    /// Text of one tool result that reaches the model; the middle of a longer one is elided.
    /// Default 50 KiB.
    pub max_output_bytes: usize,
    /// A tool description longer than this is cut, with a marker. Default 1 KiB.
    pub max_description_bytes: usize,
    /// An input schema whose JSON is longer than this is replaced by `{"type":"object"}`.
    /// Default 8 KiB.
    pub max_schema_bytes: usize,
    /// Restarts allowed after consecutive lives that ended badly (killed, crashed, failed to
    /// start again). Default 3.
    pub restart_budget: u32,
    /// The first restart waits this long; each further one twice as long, with jitter.
    /// Default 200 ms.
    pub restart_backoff: Duration,
    /// The longest wait between restarts. Default 10 s.
    pub max_restart_backoff: Duration,
    /// A life that answered a call and lasted this long before it ended badly starts a new
    /// streak of bad lives instead of extending the last one. Default 60 s.
    pub healthy_after: Duration,
    /// The directories offered to servers as their roots (the session's working directory).
    /// Default: none.
    pub roots: Vec<PathBuf>,
    /// How HTTP servers that ask for OAuth get their tokens (those whose configuration sets no
    /// `Authorization` header). Default: the user's token store, and no login.
    pub oauth: OAuthOptions,
}

impl Default for HostOptions {
    fn default() -> Self {
        Self {
            session_id: format!("{:016x}", fastrand::u64(..)),
            startup_timeout: Duration::from_secs(30),
            call_timeout: Duration::from_secs(600),
            all_or_nothing: false,
            max_servers: 16,
            max_tools: 256,
            max_output_bytes: 50 * 1024,
            max_description_bytes: 1024,
            max_schema_bytes: 8 * 1024,
            restart_budget: 3,
            restart_backoff: Duration::from_millis(200),
            max_restart_backoff: Duration::from_secs(10),
            healthy_after: Duration::from_secs(60),
            roots: Vec::new(),
            oauth: OAuthOptions::default(),
        }
    }
}

impl HostOptions {
    /// Sets [`session_id`](Self::session_id).
    pub fn with_session_id(mut self, session_id: impl Into<String>) -> Self {
        self.session_id = session_id.into();
        self
    }

    /// Sets [`startup_timeout`](Self::startup_timeout).
    pub fn with_startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// Sets [`call_timeout`](Self::call_timeout).
    pub fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// Sets [`all_or_nothing`](Self::all_or_nothing).
    pub fn with_all_or_nothing(mut self, all_or_nothing: bool) -> Self {
        self.all_or_nothing = all_or_nothing;
        self
    }

    /// Sets [`max_servers`](Self::max_servers).
    pub fn with_max_servers(mut self, max: usize) -> Self {
        self.max_servers = max;
        self
    }

    /// Sets [`max_tools`](Self::max_tools).
    pub fn with_max_tools(mut self, max: usize) -> Self {
        self.max_tools = max;
        self
    }

    /// Sets [`max_output_bytes`](Self::max_output_bytes).
    pub fn with_max_output_bytes(mut self, max: usize) -> Self {
        self.max_output_bytes = max;
        self
    }

    /// Sets [`max_description_bytes`](Self::max_description_bytes).
    pub fn with_max_description_bytes(mut self, max: usize) -> Self {
        self.max_description_bytes = max;
        self
    }

    /// Sets [`max_schema_bytes`](Self::max_schema_bytes).
    pub fn with_max_schema_bytes(mut self, max: usize) -> Self {
        self.max_schema_bytes = max;
        self
    }

    /// Sets [`restart_budget`](Self::restart_budget).
    pub fn with_restart_budget(mut self, budget: u32) -> Self {
        self.restart_budget = budget;
        self
    }

    /// Sets [`restart_backoff`](Self::restart_backoff) and
    /// [`max_restart_backoff`](Self::max_restart_backoff): the first wait and the longest.
    pub fn with_restart_backoff(mut self, first: Duration, max: Duration) -> Self {
        self.restart_backoff = first;
        self.max_restart_backoff = max;
        self
    }

    /// Sets [`healthy_after`](Self::healthy_after).
    pub fn with_healthy_after(mut self, healthy_after: Duration) -> Self {
        self.healthy_after = healthy_after;
        self
    }

    /// Sets [`roots`](Self::roots).
    pub fn with_roots<P: Into<PathBuf>>(mut self, roots: impl IntoIterator<Item = P>) -> Self {
        self.roots = roots.into_iter().map(Into::into).collect();
        self
    }

    /// Sets [`oauth`](Self::oauth).
    pub fn with_oauth(mut self, oauth: OAuthOptions) -> Self {
        self.oauth = oauth;
        self
    }
}
