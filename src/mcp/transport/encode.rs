//! The `tools/call` request line, written directly.
//!
//! rmcp serialises a request's parameters into a `serde_json::Value` first (to merge the
//! `_meta` it keeps in the request's extensions with the parameters' own), then serialises that
//! value: several times the cost of the line, on the request the engine sends most. This writes
//! the same bytes straight from the typed request. Anything it does not write the same way (a
//! retry carrying input responses or request state, a legacy `_meta` extension) is left to
//! rmcp's serialisation, and the tests hold the two to the same bytes.

use std::io::Write as _;

use rmcp::model::{CallToolRequest, JsonObject, MetaObject, RequestId, RequestMetaObject};
use serde_json::Value;

/// Appends the line of request `id` calling a tool, without its newline, as rmcp writes it;
/// `false` (with `out` as it was) for a request this does not write.
pub(super) fn write_call_tool(
    out: &mut Vec<u8>,
    id: &RequestId,
    request: &CallToolRequest,
) -> bool {
    let params = &request.params;
    if params.input_responses.is_some()
        || params.request_state.is_some()
        || request.extensions.get::<MetaObject>().is_some()
    {
        return false;
    }
    let before = out.len();
    if write(out, id, request).is_err() {
        out.truncate(before);
        return false;
    }
    true
}

fn write(out: &mut Vec<u8>, id: &RequestId, request: &CallToolRequest) -> serde_json::Result<()> {
    let params = &request.params;
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    serde_json::to_writer(&mut *out, id)?;
    out.extend_from_slice(br#","method":"tools/call","params":{"#);
    // rmcp's merge: the parameters' own `_meta` first, each key the extensions' `_meta` also
    // has taking that value in place, then the extensions' other keys in their order.
    let own = params.meta.as_ref().map(|meta| &meta.0.0);
    let extension = request
        .extensions
        .get::<RequestMetaObject>()
        .map(|meta| &meta.0.0);
    let mut first = true;
    if own.is_some() || extension.is_some() {
        out.extend_from_slice(br#""_meta":{"#);
        let mut entry = |out: &mut Vec<u8>, key: &str, value: &Value| {
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
            serde_json::to_writer(&mut *out, key)?;
            out.push(b':');
            serde_json::to_writer(&mut *out, value)
        };
        if let Some(own) = own {
            for (key, value) in own {
                let value = extension.and_then(|e| e.get(key)).unwrap_or(value);
                entry(out, key, value)?;
            }
        }
        if let Some(extension) = extension {
            for (key, value) in extension {
                if !own.is_some_and(|own: &JsonObject| own.contains_key(key)) {
                    entry(out, key, value)?;
                }
            }
        }
        out.extend_from_slice(b"},");
    }
    // rmcp takes the parameters' own `_meta` out of their map with a swap-remove, which
    // moves the last field (the arguments, when there are any) to the front.
    let name = |out: &mut Vec<u8>| {
        out.extend_from_slice(br#""name":"#);
        serde_json::to_writer(&mut *out, &params.name)
    };
    match &params.arguments {
        Some(arguments) if own.is_some() => {
            out.extend_from_slice(br#""arguments":"#);
            serde_json::to_writer(&mut *out, arguments)?;
            out.push(b',');
            name(out)?;
        }
        Some(arguments) => {
            name(out)?;
            out.extend_from_slice(br#","arguments":"#);
            serde_json::to_writer(&mut *out, arguments)?;
        }
        None => name(out)?,
    }
    // Writing to a Vec cannot fail.
    let _ = out.write_all(b"}}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use rmcp::model::{
        CallToolRequestParams, ClientRequest, InputResponses, JsonRpcMessage, NumberOrString,
    };
    use rmcp::service::{RoleClient, TxJsonRpcMessage};
    use serde_json::json;

    use super::*;

    fn object(value: Value) -> JsonObject {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    fn request(params: CallToolRequestParams) -> CallToolRequest {
        CallToolRequest::new(params)
    }

    /// The line rmcp writes for `request`, and the one written here.
    fn both(id: RequestId, request: CallToolRequest) -> (String, Option<String>) {
        let mut ours = Vec::new();
        let written = write_call_tool(&mut ours, &id, &request);
        let message: TxJsonRpcMessage<RoleClient> =
            JsonRpcMessage::request(ClientRequest::CallToolRequest(request), id);
        let theirs = serde_json::to_string(&message).unwrap();
        (theirs, written.then(|| String::from_utf8(ours).unwrap()))
    }

    fn assert_same(id: RequestId, request: CallToolRequest) {
        let (theirs, ours) = both(id, request);
        assert_eq!(ours.as_deref(), Some(theirs.as_str()));
    }

    #[test]
    fn a_call_without_arguments_or_meta_is_written_as_rmcp_writes_it() {
        assert_same(
            NumberOrString::Number(7),
            request(CallToolRequestParams::new("list")),
        );
    }

    #[test]
    fn a_call_with_arguments_and_a_progress_token_is_written_as_rmcp_writes_it() {
        let mut call = request(
            CallToolRequestParams::new("add").with_arguments(object(json!({
                "title": "a \"quoted\" é\n title",
                "n": 3,
                "x": 1.5,
                "nested": {"z": [1, null, true], "a": {}},
            }))),
        );
        call.extensions.insert(RequestMetaObject(MetaObject(object(
            json!({"progressToken": 12}),
        ))));
        assert_same(NumberOrString::Number(12), call);
    }

    #[test]
    fn a_hook_call_merges_its_own_meta_with_the_extensions_meta_as_rmcp_does() {
        let mut params = CallToolRequestParams::new("_PreToolUse")
            .with_arguments(object(json!({"tool": "todo__list", "arguments": {}})));
        params.meta = Some(RequestMetaObject(MetaObject(object(json!({
            "hookloop/session": "s1",
            "progressToken": "theirs",
            "hookloop/hook": {"name": "_PreToolUse"},
        })))));
        let mut call = request(params);
        call.extensions.insert(RequestMetaObject(MetaObject(object(
            json!({"progressToken": 3, "io.example/other": [1]}),
        ))));
        assert_same(NumberOrString::String("req-3".into()), call);
    }

    #[test]
    fn a_call_with_only_its_own_meta_is_written_as_rmcp_writes_it() {
        let mut params = CallToolRequestParams::new("_Stop").with_arguments(JsonObject::new());
        params.meta = Some(RequestMetaObject(MetaObject(object(json!({"k": "v"})))));
        assert_same(NumberOrString::Number(0), request(params));
        let mut params = CallToolRequestParams::new("_Stop");
        params.meta = Some(RequestMetaObject::default());
        assert_same(NumberOrString::Number(1), request(params));
    }

    /// The fields serde knows `CallToolRequestParams` by, read off its `Deserialize`: a field
    /// rmcp adds is one `write` does not write, so a new one must fail here first.
    fn params_fields() -> &'static [&'static str] {
        use serde::de::{self, Deserialize, Visitor};

        struct Fields(Option<&'static [&'static str]>);

        #[derive(Debug)]
        struct Stop;
        impl std::fmt::Display for Stop {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("stop")
            }
        }
        impl std::error::Error for Stop {}
        impl de::Error for Stop {
            fn custom<T: std::fmt::Display>(_: T) -> Self {
                Stop
            }
        }

        impl<'de> de::Deserializer<'de> for &mut Fields {
            type Error = Stop;
            fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
                Err(Stop)
            }
            fn deserialize_struct<V: Visitor<'de>>(
                self,
                _: &'static str,
                fields: &'static [&'static str],
                _: V,
            ) -> Result<V::Value, Stop> {
                self.0 = Some(fields);
                Err(Stop)
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
                byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
                identifier ignored_any
            }
        }

        let mut fields = Fields(None);
        let _ = CallToolRequestParams::deserialize(&mut fields);
        fields.0.expect("a struct's fields")
    }

    #[test]
    fn every_field_of_the_parameters_is_one_the_direct_writer_knows() {
        let mut fields = params_fields().to_vec();
        fields.sort_unstable();
        assert_eq!(
            fields,
            [
                "_meta",
                "arguments",
                "inputResponses",
                "name",
                "requestState"
            ],
            "rmcp's tools/call parameters changed: teach `write` the new field, or leave it to rmcp"
        );
    }

    #[test]
    fn a_retry_with_input_responses_or_state_is_left_to_rmcp() {
        let params = CallToolRequestParams::new("ask")
            .with_input_responses(InputResponses::default())
            .with_request_state("opaque");
        let (_, ours) = both(NumberOrString::Number(2), request(params));
        assert_eq!(ours, None);
        let mut call = request(CallToolRequestParams::new("ask"));
        call.extensions
            .insert(MetaObject(object(json!({"legacy": true}))));
        let (_, ours) = both(NumberOrString::Number(3), call);
        assert_eq!(ours, None);
    }
}
