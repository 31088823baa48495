//! The seams: everything the engine is plugged together with, defined here and implemented
//! above. The driver ([`Session`](crate::Session)) is handed an [`LlmClient`] and a
//! [`ToolHost`]; front ends give it a [`PermissionAsker`] and the host a [`Person`]; whoever
//! watches a session adds an [`Observer`]. The crate's own implementations live in `llm`
//! (feature `providers`), `mcp` (feature `mcp`), `acp`, `progress`, `transcript` and `testing`;
//! an embedder writing its own provider, host or front end needs nothing else from the crate
//! than this module, the machine's values ([`machine`](crate::machine)) and the hook convention
//! ([`hooks`](crate::hooks)).

mod model;
mod observer;
mod person;
mod tools;

pub use self::model::{Delta, LlmClient, LlmError, OnDelta, ResponseFault};
pub use self::observer::Observer;
pub use self::person::{
    Answer, ElicitAnswer, Elicitation, ElicitationMode, PermissionAsker, Person,
};
pub use self::tools::{HookCall, ToolHost, TransportKind};
