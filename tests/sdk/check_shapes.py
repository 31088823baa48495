"""Validates request and answer bodies against the official OpenAI and Anthropic Python SDKs'
type definitions: each request must validate as the SDK's create-params type *and* read back
unchanged (so no key the SDK does not know), each answer must validate as the SDK's response
model, each stream event as the SDK's stream event type (`ChatCompletionChunk`,
`RawMessageStreamEvent`; the SDKs skip `ping` and stop at `[DONE]` before parsing, and so do
the callers). Input: JSON lines {"dialect", "kind", "name", "body"} on stdin; kind is
`request`, `stream_request`, `answer` or `event`."""

import collections.abc
import json
import sys

from pydantic import BaseModel, TypeAdapter

import anthropic
import openai
from anthropic.types import Message, RawMessageStreamEvent, message_create_params
from openai.types.chat import ChatCompletion, ChatCompletionChunk, completion_create_params

REQUESTS = {
    "openai": TypeAdapter(completion_create_params.CompletionCreateParamsNonStreaming),
    "anthropic": TypeAdapter(message_create_params.MessageCreateParamsNonStreaming),
}
STREAM_REQUESTS = {
    "openai": TypeAdapter(completion_create_params.CompletionCreateParamsStreaming),
    "anthropic": TypeAdapter(message_create_params.MessageCreateParamsStreaming),
}
ANSWERS = {"openai": ChatCompletion, "anthropic": Message}
EVENTS = {
    "openai": TypeAdapter(ChatCompletionChunk),
    "anthropic": TypeAdapter(RawMessageStreamEvent),
}


def force(value):
    """Pydantic validates `Iterable` fields lazily; walking them forces every check. A union
    may match a response model the SDK accepts back as a param; it counts as what was set."""
    if isinstance(value, BaseModel):
        # A response model keeps unknown keys as extras; those its request twin (`TextBlock`
        # → `TextBlockParam`) declares, such as `cache_control`, are known.
        # Validating the dump as that twin checks the extras' values too; keys neither knows
        # are dropped, which the caller's comparison with the sent body catches.
        twin = None
        for module in (anthropic.types, openai.types.chat):
            twin = twin or getattr(module, type(value).__name__ + "Param", None)
        dumped = value.model_dump(exclude_unset=True, by_alias=True)
        if twin is None:
            if value.model_extra:
                raise ValueError(f"keys the SDK does not know: {sorted(value.model_extra)}")
            return force(dumped)
        return force(TypeAdapter(twin).validate_python(dumped))
    if isinstance(value, dict):
        return {k: force(v) for k, v in value.items()}
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return value
    if isinstance(value, collections.abc.Iterable):
        return [force(v) for v in value]
    return value


def check(case):
    dialect, kind, body = case["dialect"], case["kind"], case["body"]
    if kind in ("request", "stream_request"):
        types = REQUESTS if kind == "request" else STREAM_REQUESTS
        validated = force(types[dialect].validate_python(body))
        if validated != body:
            raise ValueError(
                "keys the SDK does not know, or values it rewrote:\n"
                f"sent:      {json.dumps(body, sort_keys=True)}\n"
                f"validated: {json.dumps(validated, sort_keys=True)}"
            )
    elif kind == "event":
        EVENTS[dialect].validate_python(body)
    else:
        ANSWERS[dialect].model_validate(body)


def main():
    passed = failed = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        case = json.loads(line)
        try:
            check(case)
            passed += 1
        except Exception as error:  # report every failure, not just the first
            failed += 1
            # pydantic lists every union member it tried; the first lines say enough.
            lines = str(error).splitlines()
            shown = "\n".join(lines[:12] + (["..."] if len(lines) > 12 else []))
            print(f"FAIL {case['dialect']} {case['kind']} {case['name']}: {shown}")
    print(f"openai {openai.__version__}, anthropic {anthropic.__version__}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed or not passed else 0)


main()
