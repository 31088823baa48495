//! The catalog as the machine uses it: the model-visible tools and, per hook, the allowed
//! servers that expose it.

use std::collections::{HashMap, HashSet};

use super::digest::Digest;
use super::input::Catalog;
use super::message::ToolSpec;
use super::planted::{self, Bug};
use crate::hooks::{self, Hook, ServerName};

/// The catalog as the machine uses it.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tools {
    pub(super) model: Vec<ToolSpec>,
    /// Names this catalog for [`Lineage::tools`](super::Lineage::tools); 0 for the empty
    /// default.
    pub(super) lineage: u64,
    pub(super) names: HashSet<String>,
    /// Model-facing names of the tools their server marks destructive (`destructiveHint`).
    pub(super) destructive: HashSet<String>,
    /// Per hook, the allowed servers that expose it, in configuration order.
    hooks: HashMap<Hook, Vec<ServerName>>,
    pub(super) bytes: usize,
    /// The digest of `model`, for the requests that offer it.
    pub(super) digest: Digest,
}

impl Tools {
    /// The tools of `catalog`, and `builtin` (the `agent` tool, when the agent may start
    /// subagents) after them.
    pub(super) fn new(
        catalog: &Catalog,
        allow: &hooks::HookServers,
        builtin: Option<ToolSpec>,
    ) -> Self {
        let mut tools = Self {
            lineage: super::fresh_lineage(),
            ..Self::default()
        };
        for entry in &catalog.servers {
            let server = &entry.server;
            for tool in &entry.tools {
                if hooks::is_hook(&tool.name) {
                    // Hooks never reach the model, whatever the allowlist says; only allowed
                    // servers are ever called.
                    if (allow.allows(server.as_str()) || planted::on(Bug::HookOnDisallowedServer))
                        && let Some(hook) = Hook::from_tool_name(&tool.name)
                        && !(Hook::SUBAGENT.contains(&hook)
                            && planted::on(Bug::SubagentServersDropped))
                    {
                        let list = tools.hooks.entry(hook).or_default();
                        if !list.contains(server) {
                            list.push(server.clone());
                        }
                    }
                    if !planted::on(Bug::HookOffered) {
                        continue;
                    }
                }
                let name = hooks::qualify(server.as_str(), &tool.name);
                if tools.names.insert(name.clone()) {
                    if tool.hints.destructive == Some(true) {
                        tools.destructive.insert(name.clone());
                    }
                    let spec = ToolSpec {
                        name,
                        description: tool.description.clone(),
                        input_schema: tool.input_schema.clone(),
                    };
                    tools.bytes += spec.size_bytes();
                    tools.model.push(spec);
                }
            }
        }
        if let Some(spec) = builtin
            && tools.names.insert(spec.name.clone())
        {
            tools.bytes += spec.size_bytes();
            tools.model.push(spec);
        }
        tools.digest = Digest::of_tools(&tools.model);
        tools
    }

    /// The allowed servers that expose `hook`, in configuration order.
    pub(super) fn servers(&self, hook: Hook) -> &[ServerName] {
        self.hooks.get(&hook).map_or(&[], Vec::as_slice)
    }

    /// These tools with `server` gone from every hook's servers: `Bug::KilledServerForgotten`.
    pub(super) fn forgetting(&self, server: &ServerName) -> Self {
        let mut tools = self.clone();
        for servers in tools.hooks.values_mut() {
            servers.retain(|s| s != server);
        }
        tools
    }

    /// These tools, and those of `before` they lack still offered: `Bug::WithdrawnToolOffered`.
    pub(super) fn keeping(mut self, before: &Self) -> Self {
        for spec in &before.model {
            if self.names.insert(spec.name.clone()) {
                self.bytes += spec.size_bytes();
                self.model.push(spec.clone());
            }
        }
        self.digest = Digest::of_tools(&self.model);
        self
    }
}
