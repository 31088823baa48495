//! `hookloop acp`: the Agent Client Protocol agent on stdio, with the real provider and host.

use std::process::ExitCode;

use std::path::Path;

use hookloop::acp::{
    self, AgentOptions, Created, Permissions, ServerStart, SessionFactory, SessionSpec,
};
use hookloop::machine::Machine;
use hookloop::mcp::command_hooks::{CommandHooks, SourceSpec};
use hookloop::transcript::RecordDir;
use hookloop::{Config, Session};

use super::{Failure, wire};

/// Serves until stdin ends. Configuration is checked before the first frame is read.
pub async fn main() -> ExitCode {
    let factory = match Factory::from_env() {
        Ok(factory) => factory,
        Err(failure) => return failure.report(),
    };
    let options = match AgentOptions::from_env() {
        Ok(options) => options,
        Err(e) => return Failure::from(e).report(),
    };
    tracing::info!("serving the Agent Client Protocol on stdio");
    let served = acp::serve(factory, options, tokio::io::stdin(), acp::Output::stdout()).await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => Failure::failed(e).report(),
    }
}

/// Builds each session from the environment's configuration and the client's MCP servers.
struct Factory {
    config: Config,
    llm: wire::SharedLlm,
    /// Where each session's transcript goes (`HOOKLOOP_RECORD_DIR`), if anywhere.
    record_dir: Option<RecordDir>,
    /// What a session does when one of its servers fails (`HOOKLOOP_ACP_SERVERS`).
    start: ServerStart,
    /// `HOOKLOOP_COMMAND_HOOKS`: read for each session, a relative path in its directory.
    command_hooks: Vec<SourceSpec>,
}

impl Factory {
    fn from_env() -> Result<Self, Failure> {
        let command_hooks = wire::command_hook_specs_from_env()?;
        // What every session shares is checked before the first frame.
        let shared: Vec<SourceSpec> = command_hooks
            .iter()
            .filter(|spec| spec.path().is_absolute())
            .cloned()
            .collect();
        wire::load_command_hooks(&shared, Path::new("/"))?;
        Ok(Self {
            config: Config::from_env()?,
            llm: wire::model_from_env()?,
            record_dir: RecordDir::from_env()
                .map_err(|e| Failure::usage(format!("{}: {e}", RecordDir::ENV_VAR)))?,
            start: ServerStart::from_env()?,
            command_hooks,
        })
    }

    /// The session's command hooks, read in its directory, and the configuration they need.
    fn hooks_of(&self, spec: &SessionSpec) -> Result<(CommandHooks, Config), String> {
        let hooks = wire::session_command_hooks(&self.command_hooks, &spec.cwd)?;
        let config = wire::with_hook_details(self.config.clone(), &hooks).map_err(|f| f.message)?;
        Ok((hooks, config))
    }
}

impl SessionFactory for Factory {
    type Llm = wire::SharedLlm;
    type Host = wire::Host;
    type Error = String;

    async fn create(&self, spec: SessionSpec) -> Result<Created<Self::Llm, Self::Host>, String> {
        let (hooks, config) = self.hooks_of(&spec)?;
        let config = config
            .into_builder()
            .ask_permission(spec.permissions == Permissions::Ask)
            .build()
            .map_err(|e| e.to_string())?;
        let (host, failed) = wire::connect_spec(&spec, self.start, &config, hooks)
            .await
            .map_err(|f| f.message)?;
        let mut session = Session::new(config, self.llm.clone(), host);
        let mut record = None;
        if let Some(dir) = &self.record_dir {
            let (recorder, path) = session
                .record_in(dir)
                .map_err(|e| format!("cannot record the session: {e}"))?;
            tracing::info!(path = %path.display(), "recording the session");
            session.host().set_transcript_path(Some(&path));
            record = Some((recorder, path));
        }
        let mut created = Created::new(session).without(failed);
        created.record = record;
        Ok(created)
    }

    async fn restore(
        &self,
        spec: SessionSpec,
        machine: Machine,
    ) -> Result<Created<Self::Llm, Self::Host>, String> {
        // The restored machine keeps the policy it was recorded under.
        let (hooks, config) = self.hooks_of(&spec)?;
        let (host, failed) = wire::connect_spec(&spec, self.start, &config, hooks)
            .await
            .map_err(|f| f.message)?;
        let session = Session::with_machine(config, machine, self.llm.clone(), host);
        Ok(Created::new(session).without(failed))
    }

    fn record_dir(&self) -> Option<&Path> {
        self.record_dir.as_ref().map(RecordDir::path)
    }
}
