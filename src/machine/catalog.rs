//! The catalog as the machine uses it: the model-visible tools and, per hook, the allowed
//! servers that expose it.

use std::collections::HashSet;

use super::input::Catalog;
use super::message::ToolSpec;
use crate::hooks::{self, Hook, ServerName};

/// The catalog as the machine uses it.
#[derive(Debug, Default)]
pub(crate) struct Tools {
    pub(super) model: Vec<ToolSpec>,
    pub(super) names: HashSet<String>,
    pub(super) stop_servers: Vec<ServerName>,
    pub(super) post_compact_servers: Vec<ServerName>,
    pub(super) bytes: usize,
}

impl Tools {
    pub(super) fn new(catalog: &Catalog, allow: &hooks::HookServers) -> Self {
        let mut tools = Self::default();
        for entry in &catalog.servers {
            let server = &entry.server;
            for tool in &entry.tools {
                if hooks::is_hook(&tool.name) {
                    // Hooks never reach the model, whatever the allowlist says; only allowed
                    // servers are ever called.
                    if allow.allows(server.as_str()) {
                        let list = if tool.name == Hook::Stop.tool_name() {
                            Some(&mut tools.stop_servers)
                        } else if tool.name == Hook::PostCompact.tool_name() {
                            Some(&mut tools.post_compact_servers)
                        } else {
                            None
                        };
                        if let Some(list) = list.filter(|list| !list.contains(server)) {
                            list.push(server.clone());
                        }
                    }
                    continue;
                }
                let name = hooks::qualify(server.as_str(), &tool.name);
                if tools.names.insert(name.clone()) {
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
        tools
    }
}
