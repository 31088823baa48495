//! `hookloop acp`: the Agent Client Protocol agent on stdio, with the real provider and host.

use std::process::ExitCode;

use std::path::Path;

use hookloop::acp::{self, AgentOptions, Created, Permissions, SessionFactory, SessionSpec};
use hookloop::machine::Machine;
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
}

impl Factory {
    fn from_env() -> Result<Self, Failure> {
        Ok(Self {
            config: Config::from_env()?,
            llm: wire::model_from_env()?,
            record_dir: RecordDir::from_env()
                .map_err(|e| Failure::usage(format!("{}: {e}", RecordDir::ENV_VAR)))?,
        })
    }
}

impl SessionFactory for Factory {
    type Llm = wire::SharedLlm;
    type Host = wire::Host;
    type Error = String;

    async fn create(&self, spec: SessionSpec) -> Result<Created<Self::Llm, Self::Host>, String> {
        let config = self
            .config
            .clone()
            .into_builder()
            .ask_permission(spec.permissions == Permissions::Ask)
            .build()
            .map_err(|e| e.to_string())?;
        let host = wire::connect_spec(spec, &self.config)
            .await
            .map_err(|f| f.message)?;
        let mut session = Session::new(config, self.llm.clone(), host);
        let mut record = None;
        if let Some(dir) = &self.record_dir {
            let (recorder, path) = session
                .record_in(dir)
                .map_err(|e| format!("cannot record the session: {e}"))?;
            tracing::info!(path = %path.display(), "recording the session");
            record = Some((recorder, path));
        }
        let mut created = Created::new(session);
        created.record = record;
        Ok(created)
    }

    async fn restore(
        &self,
        spec: SessionSpec,
        machine: Machine,
    ) -> Result<Session<Self::Llm, Self::Host>, String> {
        let host = wire::connect_spec(spec, &self.config)
            .await
            .map_err(|f| f.message)?;
        Ok(Session::with_machine(
            self.config.clone(),
            machine,
            self.llm.clone(),
            host,
        ))
    }

    fn record_dir(&self) -> Option<&Path> {
        self.record_dir.as_ref().map(RecordDir::path)
    }
}
