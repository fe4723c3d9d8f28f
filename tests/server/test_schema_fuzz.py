"""schemathesis against the server's own OpenAPI schema (the tiny model behind it): no 500s, and every
error in the documented shape. Bounded: 20 examples per operation (60 for chat), answers of at most 8 tokens."""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, given, settings

MAX_TOKENS = 8


def bound(body):
    """Keep generated answers short (the schema allows up to the context) and name the served model
    (else nearly every case is a 404), without hiding bad values of other types."""
    if isinstance(body, dict):
        if isinstance(body.get("model"), str):
            body["model"] = "tiny-f32"
        for key in ("max_tokens", "max_completion_tokens"):
            value = body.get(key)
            if value is None or (isinstance(value, int) and not isinstance(value, bool) and value > MAX_TOKENS):
                body[key] = MAX_TOKENS
    return body


CALLS: dict[tuple[str, int], int] = {}


def check(case) -> None:
    case.body = bound(case.body)
    response = case.call(timeout=30)
    CALLS[case.path, response.status_code] = CALLS.get((case.path, response.status_code), 0) + 1
    assert response.status_code < 500, f"{case.method} {case.path}: {response.status_code}: {response.text[:300]}"
    if response.status_code >= 400 and case.path.startswith(("/v1", "/tokenize", "/detokenize", "/tokenizer_info")):
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"]


def test_no_server_errors_and_errors_are_openai_shaped(url):
    # The Python API rather than schemathesis' pytest plugin, which does not load under pytest 9.
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} >= {"/v1/chat/completions", "/v1/completions", "/v1/embeddings",
                                              "/v1/models", "/v1/model/info", "/health", "/metrics",
                                              "/tokenize", "/detokenize", "/tokenizer_info"}
    for operation in operations:
        # Derandomized: the same examples every run. Random ones reached no valid chat request (no
        # 200) in some runs: a valid body needs every one of its many generated fields to be right.
        examples = 60 if operation.path == "/v1/chat/completions" else 20
        run = settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck),
                       database=None, derandomize=True)(given(case=operation.as_strategy())(check))
        run()
    chat = {status: n for (path, status), n in CALLS.items() if path == "/v1/chat/completions"}
    assert sum(chat.values()) >= 20 and 200 in chat and 400 in chat, CALLS
