//! The machine's notices and the host's supervision as events on the span that is current
//! where the driver reports them.

use tracing::Span;

use super::names;
use crate::hooks::Hook;
use crate::machine::{Effect, Notice, SkipReason};
use crate::ports::Observer;

/// Turns the machine's notices and the host's supervision into events on the span that is
/// current where the driver reports them (the hook round, the compaction, the prompt), and
/// records a compaction's sizes on its span. Added to every session; it costs one look at the
/// effect when no subscriber wants the events.
#[derive(Debug, Default)]
pub(crate) struct BoundaryTrace;

impl Observer for BoundaryTrace {
    fn on_effect(&mut self, _at: std::time::Duration, effect: &Effect) {
        effect_event(effect);
    }

    fn on_supervision(&mut self, _at: std::time::Duration, event: &crate::supervisor::Event) {
        let (kind, server) = match event {
            crate::supervisor::Event::Fact(fact) => (fact_kind(fact), fact.server()),
            crate::supervisor::Event::Order(order) => match order {
                crate::supervisor::Order::StartServer { server, .. } => ("restart", server),
                crate::supervisor::Order::RetireServer { server, .. } => ("retire", server),
            },
        };
        tracing::info!(
            target: names::TARGET, {
            { names::MCP_SERVER } = server.as_str(),
            { names::REASON } = kind
            },
            "{}.{kind}",
            names::EVENT_SUPERVISION
        );
    }
}

/// The event of an order that expects no answer (a notice, a kill), on the current span (the
/// nearest the trace records: the round, the compaction, the prompt); a compaction's sizes and a
/// round's outcome are also recorded on the span that is current.
pub(crate) fn effect_event(effect: &Effect) {
    match effect {
        Effect::Notify { notice } => notice_event(notice),
        Effect::KillServer { server } => tracing::info!(
            target: names::TARGET, {
            { names::MCP_SERVER } = server.as_str()
            },
            "{}",
            names::EVENT_KILL
        ),
        Effect::Finish { .. }
        | Effect::CallLlm { .. }
        | Effect::CallTools { .. }
        | Effect::CallHooks { .. }
        | Effect::AskPermission { .. } => {}
    }
}

fn fact_kind(fact: &crate::supervisor::Fact) -> &'static str {
    match fact {
        crate::supervisor::Fact::ServerStarted { .. } => "started",
        crate::supervisor::Fact::StartFailed { .. } => "start_failed",
        crate::supervisor::Fact::ServerExited { .. } => "exited",
    }
}

fn notice_event(notice: &Notice) {
    let current = Span::current();
    match notice {
        Notice::Objection {
            server,
            budget_left,
            ..
        } => {
            current.record(names::HOOK_OUTCOME, "objection");
            tracing::info!(
                target: names::TARGET, {
                { names::MCP_SERVER } = server.as_str(),
                { names::BUDGET_LEFT } = budget_left
                },
                "{}",
                names::EVENT_OBJECTION
            );
        }
        Notice::StopSkipped { reason } => {
            let reason = match reason {
                SkipReason::BudgetSpent => "budget_spent",
                SkipReason::DeclinedObjection => "declined_objection",
            };
            tracing::info!(
                target: names::TARGET, {
                { names::REASON } = reason
                },
                "{}",
                names::EVENT_STOP_SKIPPED
            );
        }
        Notice::PostCompactInjected { server, .. } => tracing::info!(
            target: names::TARGET, {
            { names::MCP_SERVER } = server.as_str(),
            { names::HOOK_NAME } = Hook::PostCompact.tool_name()
            },
            "{}",
            names::EVENT_HOOK_INJECTED
        ),
        Notice::HookInjected { hook, server, .. } => tracing::info!(
            target: names::TARGET, {
            { names::MCP_SERVER } = server.as_str(),
            { names::HOOK_NAME } = hook.tool_name()
            },
            "{}",
            names::EVENT_HOOK_INJECTED
        ),
        Notice::ToolDenied { server, tool, .. } => {
            current.record(names::HOOK_OUTCOME, "denied");
            tracing::info!(
                target: names::TARGET, {
                { names::MCP_SERVER } = server.as_str(),
                { names::TOOL_NAME } = tool.as_str()
                },
                "{}",
                names::EVENT_TOOL_DENIED
            );
        }
        Notice::Compacted {
            summarized,
            messages_before,
            messages_after,
        } => {
            current.record(names::COMPACTION_SUMMARIZED, summarized);
            current.record(names::COMPACTION_MESSAGES_BEFORE, messages_before);
            current.record(names::COMPACTION_MESSAGES_AFTER, messages_after);
            tracing::info!(
                target: names::TARGET, {
                { names::COMPACTION_SUMMARIZED } = summarized,
                { names::COMPACTION_MESSAGES_BEFORE } = messages_before,
                { names::COMPACTION_MESSAGES_AFTER } = messages_after
                },
                "{}",
                names::EVENT_COMPACTED
            );
        }
        Notice::HookFailedOpen {
            server,
            hook,
            reason,
        } => {
            // The machine's reason quotes the hook's error text or the call's failure after
            // its class (`error result: …`): content, kept only with the operator's opt-in.
            let reason = if super::content::capture_from_env() {
                crate::text::without_url_secrets(reason)
            } else {
                reason
                    .split_once(':')
                    .map_or(reason.as_str(), |(class, _)| class)
                    .into()
            };
            tracing::info!(
                target: names::TARGET, {
                { names::MCP_SERVER } = server.as_str(),
                { names::HOOK_NAME } = hook.tool_name(),
                { names::REASON } = &*reason
                },
                "{}",
                names::EVENT_HOOK_FAILED_OPEN
            )
        }
        Notice::HookSkipped {
            server,
            hook,
            reason,
        } => tracing::info!(
            target: names::TARGET, {
            { names::MCP_SERVER } = server.as_str(),
            { names::HOOK_NAME } = hook.tool_name(),
            { names::REASON } = reason.as_str()
            },
            "{}",
            names::EVENT_HOOK_SKIPPED
        ),
        Notice::PermissionRejected { tool, standing, .. } => tracing::info!(
            target: names::TARGET, {
            { names::TOOL_NAME } = tool.as_str(),
            "hookloop.permission.standing" = standing
            },
            "{}",
            names::EVENT_PERMISSION_REJECTED
        ),
        Notice::UnknownToolRefused { name } => tracing::info!(
            target: names::TARGET, {
            { names::TOOL_NAME } = name.as_str()
            },
            "{}",
            names::EVENT_UNKNOWN_TOOL
        ),
    }
}
