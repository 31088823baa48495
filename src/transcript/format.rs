//! The transcript format, version 3: JSON Lines, one header line and then one line per event.
//!
//! ```text
//! {"format":"hookloop-transcript","version":3,"engine":"0.1.0","config":{...},"catalog":{...}}
//! {"at_ms":0,"fact":{"fact":"catalog_changed","catalog":{...}}}
//! {"at_ms":0,"fact":{"fact":"prompted","text":"Finish the feature."}}
//! {"at_ms":0,"effect":{"effect":"call_llm","purpose":{"kind":"turn"},"messages":1,"digest":{"system":"…","messages":"…",…}}}
//! {"at_ms":812,"supervision":{"fact":"server_exited","server":"todo","at_ms":790,...}}
//! {"at_ms":812,"supervision":{"order":"start_server","server":"todo","after_ms":143}}
//! ```
//!
//! `supervision` records are the MCP host's [`Supervisor`](crate::supervisor::Supervisor): its
//! facts carry their own `at_ms` on the host's clock; the record's is the driver's.
//!
//! Field order is the order of the structs below, so a transcript diffs cleanly under review.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::machine::{AgentId, Catalog, Effect, Input, Policy};
use crate::supervisor::{self, SupervisorPolicy};

use crate::transcript::redact::{REDACTED, Redaction};

/// The value of the header's `format` field.
pub const FORMAT: &str = "hookloop-transcript";

/// The format version this engine writes. Version 3 added the `prompt_interrupted` fact, which
/// closes a prompt a crash cut; a version 2 record is a version 3 record without it, and reads
/// as one.
pub const VERSION: u32 = 3;

/// The oldest format version this engine reads.
pub const OLDEST_VERSION: u32 = 2;

/// The first line of a transcript: what the session was, before anything happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Header {
    /// Always [`FORMAT`].
    pub format: String,
    /// The format version, [`VERSION`] for what this engine writes.
    pub version: u32,
    /// The version of the engine that wrote the transcript.
    pub engine: String,
    /// The machine's configuration: everything a replay needs to rebuild it.
    pub config: RecordedConfig,
    /// How the MCP servers were launched, with secrets redacted. Informative: a replay never
    /// starts them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<ServerEntry>,
    /// Every server's tools, hooks included, when recording started.
    pub catalog: Catalog,
    /// The restart policy of the host's supervisor, when the host has one: with it a replay
    /// checks the recorded supervision orders too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supervision: Option<SupervisorPolicy>,
    /// Prompts, replies, tool arguments and output, and hook answers were replaced by their
    /// lengths as they were recorded (`--redact-content`): the record can be read and shared,
    /// not replayed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub content_redacted: bool,
}

impl Header {
    /// A header for a session run with `config`, with an empty catalog.
    pub fn new(config: &Config) -> Self {
        Self::from_parts(
            config.policy().clone(),
            config.system_prompt().map(str::to_owned),
        )
    }

    /// A header for a machine built with this policy and system prompt.
    pub fn from_parts(policy: Policy, system_prompt: Option<String>) -> Self {
        Self {
            format: FORMAT.to_owned(),
            version: VERSION,
            engine: ENGINE_VERSION.to_owned(),
            config: RecordedConfig {
                policy,
                system_prompt,
            },
            servers: Vec::new(),
            catalog: Catalog::default(),
            supervision: None,
            content_redacted: false,
        }
    }

    /// The same header for a recording whose content is replaced by lengths.
    #[must_use]
    pub fn with_content_redacted(mut self) -> Self {
        self.content_redacted = true;
        self
    }

    /// The same header with this tool catalog.
    #[must_use]
    pub fn with_catalog(mut self, catalog: Catalog) -> Self {
        self.catalog = catalog;
        self
    }

    /// The same header with this supervision policy.
    #[must_use]
    pub fn with_supervision(mut self, policy: Option<SupervisorPolicy>) -> Self {
        self.supervision = policy;
        self
    }

    /// The same header with these server launch configurations, redacted by `redaction`.
    /// ([`Recorder`](crate::transcript::Recorder) applies the default redaction again when it
    /// writes, so a header built by hand cannot leak a well-known secret either.)
    #[must_use]
    pub fn with_servers(
        mut self,
        servers: impl IntoIterator<Item = ServerEntry>,
        redaction: &Redaction,
    ) -> Self {
        self.servers = servers
            .into_iter()
            .map(|entry| redaction.apply(entry))
            .collect();
        self
    }
}

/// The engine version written into headers.
pub const ENGINE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The part of the configuration the machine sees. Holds no secret: API keys live in the model
/// client, which a transcript does not record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RecordedConfig {
    /// The machine's policy.
    pub policy: Policy,
    /// The system prompt, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
}

/// How one MCP server was launched: a command (stdio) or a URL (streamable HTTP).
///
/// Values of `env` and `headers` may be secrets: they go through a [`Redaction`] before they
/// are written.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerEntry {
    /// The server's configured name.
    pub name: String,
    /// Its command, for a stdio server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Its arguments, for a stdio server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Its environment (values redacted as the header says).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Its URL, for a remote server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Its HTTP headers (values redacted as the header says).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

// Beside the entry it redacts, so that the redaction's rules (`redact.rs`) need nothing of the
// header's.
impl Redaction {
    /// The entry with every secret value replaced by [`REDACTED`].
    pub fn apply(&self, mut entry: ServerEntry) -> ServerEntry {
        for (name, value) in entry.env.iter_mut().chain(entry.headers.iter_mut()) {
            if self.is_secret(name) {
                REDACTED.clone_into(value);
            }
        }
        if let Some(url) = &mut entry.url {
            *url = self.redact_url(url);
        }
        entry.args = self.redact_args(&entry.args);
        entry
    }
}

/// One event of the session, with its virtual time.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// Milliseconds since the session started, on the driver's clock (tokio's, so a test with
    /// a paused clock records the same times on every run).
    pub at_ms: u64,
    /// What happened.
    pub event: Event,
}

/// What crossed the machine's boundary, or the supervisor's.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// An order the machine emitted.
    Effect(Effect),
    /// A fact fed to the machine.
    Fact(Input),
    /// A fact fed to the host's supervisor, or an order it gave (written as `supervision`).
    Supervision(supervisor::Event),
    /// An order a subagent's machine emitted (written as `effect` beside `agent`).
    AgentEffect {
        /// The subagent: the id of the `agent` call that started it.
        agent: AgentId,
        /// The order.
        effect: Effect,
    },
    /// A fact fed to a subagent's machine (written as `fact` beside `agent`).
    AgentFact {
        /// The subagent: the id of the `agent` call that started it.
        agent: AgentId,
        /// The fact.
        fact: Input,
    },
}

impl Event {
    /// The subagent whose lane the event is on; `None` for the top-level agent's and the
    /// supervisor's.
    pub fn agent(&self) -> Option<&AgentId> {
        match self {
            Self::AgentEffect { agent, .. } | Self::AgentFact { agent, .. } => Some(agent),
            Self::Effect(_) | Self::Fact(_) | Self::Supervision(_) => None,
        }
    }
}

impl Record {
    /// An effect at `at_ms`.
    pub fn effect(at_ms: u64, effect: Effect) -> Self {
        Self {
            at_ms,
            event: Event::Effect(effect),
        }
    }

    /// A fact at `at_ms`.
    pub fn fact(at_ms: u64, fact: Input) -> Self {
        Self {
            at_ms,
            event: Event::Fact(fact),
        }
    }

    /// An effect of the subagent `agent` at `at_ms`.
    pub fn agent_effect(at_ms: u64, agent: AgentId, effect: Effect) -> Self {
        Self {
            at_ms,
            event: Event::AgentEffect { agent, effect },
        }
    }

    /// A fact of the subagent `agent` at `at_ms`.
    pub fn agent_fact(at_ms: u64, agent: AgentId, fact: Input) -> Self {
        Self {
            at_ms,
            event: Event::AgentFact { agent, fact },
        }
    }

    /// A supervision fact or order at `at_ms`.
    pub fn supervision(at_ms: u64, event: supervisor::Event) -> Self {
        Self {
            at_ms,
            event: Event::Supervision(event),
        }
    }
}

/// A record as it is written: borrowed, so the recorder serialises without cloning.
#[derive(Serialize)]
pub(crate) struct RecordRef<'a> {
    pub(crate) at_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) agent: Option<&'a AgentId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) effect: Option<&'a Effect>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fact: Option<&'a Input>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) supervision: Option<&'a supervisor::Event>,
}

impl RecordRef<'_> {
    /// A record of nothing, at 0: the base the recorder fills in.
    pub(crate) const EMPTY: Self = Self {
        at_ms: 0,
        agent: None,
        effect: None,
        fact: None,
        supervision: None,
    };
}

impl<'a> From<&'a Record> for RecordRef<'a> {
    fn from(record: &'a Record) -> Self {
        let mut line = Self {
            at_ms: record.at_ms,
            ..Self::EMPTY
        };
        match &record.event {
            Event::Effect(effect) => line.effect = Some(effect),
            Event::Fact(fact) => line.fact = Some(fact),
            Event::Supervision(event) => line.supervision = Some(event),
            Event::AgentEffect { agent, effect } => {
                line.agent = Some(agent);
                line.effect = Some(effect);
            }
            Event::AgentFact { agent, fact } => {
                line.agent = Some(agent);
                line.fact = Some(fact);
            }
        }
        line
    }
}

/// A record as it is read: exactly one of `effect`, `fact` and `supervision`, and with an
/// effect or a fact, optionally the subagent whose it is.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordLine {
    at_ms: u64,
    #[serde(default)]
    agent: Option<AgentId>,
    #[serde(default)]
    effect: Option<Effect>,
    #[serde(default)]
    fact: Option<Input>,
    #[serde(default)]
    supervision: Option<supervisor::Event>,
}

impl Serialize for Record {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        RecordRef::from(self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Record {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let line = RecordLine::deserialize(deserializer)?;
        let event = match (line.effect, line.fact, line.supervision) {
            (Some(effect), None, None) => match line.agent {
                Some(agent) => Event::AgentEffect { agent, effect },
                None => Event::Effect(effect),
            },
            (None, Some(fact), None) => match line.agent {
                Some(agent) => Event::AgentFact { agent, fact },
                None => Event::Fact(fact),
            },
            (None, None, Some(_)) if line.agent.is_some() => {
                return Err(serde::de::Error::custom(
                    "a supervision record belongs to the host, not to an agent: it has no `agent`",
                ));
            }
            (None, None, Some(event)) => Event::Supervision(event),
            (None, None, None) => {
                return Err(serde::de::Error::custom(
                    "a record needs an `effect`, a `fact` or a `supervision`",
                ));
            }
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => {
                return Err(serde::de::Error::custom(
                    "a record holds one of an effect, a fact and a supervision, not several",
                ));
            }
        };
        Ok(Self {
            at_ms: line.at_ms,
            event,
        })
    }
}

/// A whole transcript, read into memory.
#[derive(Clone, Debug, PartialEq)]
pub struct Transcript {
    /// The header.
    pub header: Header,
    /// The records, in order.
    pub records: Vec<Record>,
    /// The line in the file of each record (1-based; the header is line 1).
    pub lines: Vec<usize>,
    /// Set when the last line was cut short (the writer crashed mid-line); the records before
    /// it are intact and usable.
    pub truncated: Option<Truncation>,
}

/// A last line that was cut short and left out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Truncation {
    /// Its line number.
    pub line: usize,
    /// How many bytes of it there were.
    pub bytes: usize,
    /// Why it did not parse.
    pub reason: String,
}

impl Transcript {
    /// A transcript of these records, each numbered as if written by a recorder.
    pub fn new(header: Header, records: Vec<Record>) -> Self {
        let lines = (2..records.len() + 2).collect();
        Self {
            header,
            records,
            lines,
            truncated: None,
        }
    }

    /// The transcript as JSON Lines, exactly as a recorder writes it.
    pub fn to_jsonl(&self) -> String {
        let mut out = Vec::new();
        write_line(&mut out, &self.header);
        for record in &self.records {
            write_line(&mut out, &RecordRef::from(record));
        }
        // serde_json writes UTF-8.
        String::from_utf8(out).unwrap_or_default()
    }

    /// The line of record `index`, or the line after the last record for `index == len`.
    pub fn line_of(&self, index: usize) -> usize {
        self.lines
            .get(index)
            .copied()
            .unwrap_or_else(|| self.lines.last().map_or(2, |last| last + 1))
    }
}

/// Appends `value` as one JSON line.
pub(crate) fn write_line(out: &mut Vec<u8>, value: &impl Serialize) {
    // Our records are plain data with string keys; serialising them into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
    out.push(b'\n');
}
