"""Request bodies of the OpenAI-compatible endpoints (pydantic; they make the OpenAPI schema at /docs).

Unknown fields are ignored, as OpenAI clients send many (``user``, ``metadata``, ``store``, ...);
values out of range fail validation (400), as do integers and booleans sent as another type
(``"max_tokens": "5"``, ``"stream": "yes"``: OpenAI refuses them too). Fields for what the server
cannot do (``tools``, ``response_format`` JSON modes, ``logit_bias``, audio output, ``suffix``,
``best_of``, ``prediction``, ``web_search_options``, and other servers' output constraints: vLLM's
``guided_*`` and ``structured_outputs``, llama.cpp's ``grammar`` and ``json_schema``) are declared, so
that a request asking for them gets a 400 rather than an answer that ignores them. Sampling fields
are ``None`` when the client left them out.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from engine.api.events import MAX_TOP_LOGPROBS

Finite = Annotated[float, Field(allow_inf_nan=False)]

#: The longest ``stop`` string accepted (characters). OpenAI documents at most 4 stop sequences but
#: no length; a bound keeps a request from making the server hold back (and match against) megabytes
#: of text per answer. Stop strings in practice are a few characters ("\n\n", "</s>", "User:").
MAX_STOP_CHARS = 512
StopString = Annotated[str, Field(max_length=MAX_STOP_CHARS)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")

    #: Fields whose JSON null means "not given": their default applies. OpenAI's API reference marks
    #: them nullable ("boolean or null"), and clients send null for what they leave unset.
    null_is_default: ClassVar[frozenset[str]] = frozenset()

    @model_validator(mode="before")
    @classmethod
    def _nulls_to_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and cls.null_is_default:
            return {k: v for k, v in data.items() if v is not None or k not in cls.null_is_default}
        return data


class ImageURL(_Body):
    """``url``: a ``data:`` URI, raw base64, or (with ``--allow-remote-media``) an http(s) URL."""

    url: str
    detail: Literal["low", "auto", "high"] = "auto"


class TextPart(_Body):
    type: Literal["text"]
    text: str


class ImagePart(_Body):
    type: Literal["image_url"]
    image_url: ImageURL | str


class VideoPart(_Body):
    type: Literal["video_url"]
    video_url: ImageURL | str


def _at_most(limit: int, what: str) -> BeforeValidator:
    """A list of more than ``limit`` items refused before any item is checked: each bad item is an
    error of its own, and 600,000 of them took the server minutes to gather and word, the event loop
    and /health with it (trial 67). ``what``: the items, as the message names them."""
    def check(value: Any) -> Any:
        if isinstance(value, list) and len(value) > limit:
            raise PydanticCustomError("too_long", f"{len(value):,} {what}; the limit is {limit:,}")
        return value
    return BeforeValidator(check)


#: The most messages, and content parts in all, a request may hold: each takes at least a token, a
#: message 3 of the chat template, so more than a 48K-token context could hold (:data:`Messages`).
MAX_MESSAGES = MAX_PARTS = 16384
MAX_TOOLS = 128  # (OpenAI's limit on tools; refused here anyway, the list only bounded)

Part = Annotated[TextPart | ImagePart | VideoPart, Field(discriminator="type")]
#: A user's or system message's content list: OpenAI refuses an empty one ("expected an array with
#: minimum length 1"); answered, it was a 512-token answer to nothing.
Parts = Annotated[list[Part], Field(min_length=1)]


class _MessageFields(_Body):
    name: str | None = None


class UserMessage(_MessageFields):
    role: Literal["user"]
    content: str | Parts


class SystemMessage(_MessageFields):
    role: Literal["system", "developer"]
    content: str | Parts


class RefusalPart(_Body):
    """OpenAI's refusal in an earlier answer (a model declining): read as that answer's text."""

    type: Literal["refusal"]
    refusal: str


AnswerPart = Annotated[TextPart | ImagePart | VideoPart | RefusalPart, Field(discriminator="type")]


class AssistantMessage(_MessageFields):
    """An earlier answer; its content may be null (a tool call's turn in another server's history).
    ``tool_calls`` / ``function_call`` are parsed so that they are refused with their reason
    (:func:`server.conversation._to_turns`), not dropped: the turn would read as an empty answer."""

    role: Literal["assistant"]
    content: str | list[AnswerPart] | None = None
    refusal: str | None = None  # OpenAI's message-level refusal: the answer's text (after any content)
    tool_calls: list[Any] | None = None
    function_call: Any = None

    @model_validator(mode="after")
    def _refusal_field_as_text(self):
        if self.refusal:
            if not self.content or (isinstance(self.content, str) and not self.content.strip()):
                self.content = self.refusal
            elif isinstance(self.content, str):
                self.content = f"{self.content}\n{self.refusal}"
            else:
                self.content = [*self.content, TextPart(type="text", text=self.refusal)]
        return self

    @field_validator("content", mode="after")
    @classmethod
    def _refusal_parts_as_text(cls, content):
        if not isinstance(content, list):
            return content
        return [TextPart(type="text", text=p.refusal) if isinstance(p, RefusalPart) else p for p in content]


class ToolMessage(_MessageFields):
    """A tool's result (``tool``, or the older ``function``) in a history from a server that runs
    tools: parsed so that it is refused with its reason (:func:`server.conversation._to_turns`),
    not with a schema error about the role."""

    role: Literal["tool", "function"]
    content: str | list[Part] | None = None


#: A chat message, told apart by ``role``: a user's or system message needs its content.
Message = Annotated[UserMessage | SystemMessage | AssistantMessage | ToolMessage, Field(discriminator="role")]

def _few_parts_in_all(messages: Any) -> Any:
    """The messages' content parts counted together, before any is checked: within each message's
    bound, 100 messages of 16,384 bad parts held the server 23 s (trial 68)."""
    if isinstance(messages, list):
        parts = sum(len(m["content"]) for m in messages if isinstance(m, dict) and isinstance(m.get("content"), list))
        if parts > MAX_PARTS:
            raise PydanticCustomError("too_long", f"{parts:,} content parts in the messages: more than any context "
                                      f"holds; the limit is {MAX_PARTS:,}")
    return messages


#: A conversation: 1 to MAX_MESSAGES messages of MAX_PARTS content parts in all.
Messages = Annotated[list[Message], Field(min_length=1), BeforeValidator(_few_parts_in_all),
                     _at_most(MAX_MESSAGES, "messages: more than any context holds")]


class StreamOptions(_Body):
    null_is_default = frozenset({"include_usage"})

    include_usage: StrictBool = False


class SamplingFields(_Body):
    """Fields chat and text completions share."""

    null_is_default = frozenset({"stream", "n", "ignore_eos"})

    model: str
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    temperature: Annotated[float, Field(ge=0, le=2, allow_inf_nan=False)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | None = None
    top_k: Annotated[StrictInt, Field(ge=-1)] | None = None
    min_p: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False)] | None = None
    max_tokens: Annotated[StrictInt, Field(ge=1)] | None = None
    stop: StopString | Annotated[list[StopString], Field(max_length=4)] | None = None
    # OpenAI's seed is a 64-bit signed integer, the engine's (and vLLM's, llama.cpp's) unsigned: either
    # is taken, a negative one modulo 2**64 (two's complement: -1 is 2**64 - 1, as the same bits).
    seed: Annotated[StrictInt, Field(ge=-2**63, lt=2**64), AfterValidator(lambda seed: seed % 2**64)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2, allow_inf_nan=False)] | None = None
    presence_penalty: Annotated[float, Field(ge=-2, le=2, allow_inf_nan=False)] | None = None
    # Below 0.01 the penalized logits overflow float32 (found by tests/server/test_schema_fuzz.py).
    repetition_penalty: Annotated[float, Field(ge=0.01, le=10, allow_inf_nan=False)] | None = None
    n: Annotated[StrictInt, Field(ge=1, le=128)] = 1
    user: str | None = None
    ignore_eos: StrictBool = Field(False, description="vLLM's extension: decode to max_tokens (benchmarks)")
    logit_bias: dict[str, float] | None = Field(None, description="not supported: a non-empty map is a 400")
    # Other servers' ways to constrain the output (vLLM's guided decoding and structured_outputs,
    # llama.cpp's grammar and json_schema): declared so that a request using one is refused
    # (routes_generate.refuse_unsupported), not answered with unconstrained text. Any type: the
    # 400 says the parameter is not supported, whatever its value's shape.
    guided_json: Any = Field(None, description="vLLM's: not supported (a 400 unless null, \"\" or [])")
    guided_regex: Any = Field(None, description="vLLM's: not supported (a 400 unless null, \"\" or [])")
    guided_choice: Any = Field(None, description="vLLM's: not supported (a 400 unless null, \"\" or [])")
    guided_grammar: Any = Field(None, description="vLLM's: not supported (a 400 unless null, \"\" or [])")
    structured_outputs: Any = Field(None, description="vLLM's: not supported (a 400 unless null, \"\" or [])")
    grammar: Any = Field(None, description="llama.cpp's: not supported (a 400 unless null, \"\" or [])")
    json_schema: Any = Field(None, description="llama.cpp's: not supported (a 400 unless null, \"\" or [])")
    response_format: dict | None = Field(None, description="only {\"type\": \"text\"}: JSON modes are a 400")


class TemplateFields(_Body):
    """vLLM's chat-template fields, which ``/v1/chat/completions`` and ``/tokenize`` read alike
    (:func:`server.conversation.template_mode`). ``None``: not given (JSON null too); a last assistant
    message is then continued (Open WebUI's "Continue response", llama-server's prefill) unless
    ``add_generation_prompt`` is true."""

    add_generation_prompt: StrictBool | None = Field(
        None, description="end with the assistant's opening (default true); false: the prompt ends where the "
                          "last message does, and a chat answer continues from there")
    continue_final_message: StrictBool | None = Field(
        None, description="leave the last message, an assistant's, open and continue it (needs "
                          "add_generation_prompt false); false: a last assistant message is closed and answered "
                          "after; left out, a last assistant message is continued unless add_generation_prompt is true")


class ChatRequest(SamplingFields, TemplateFields):
    """``POST /v1/chat/completions``."""

    null_is_default = SamplingFields.null_is_default | {"logprobs"}

    messages: Messages
    max_completion_tokens: Annotated[StrictInt, Field(ge=1)] | None = None
    logprobs: StrictBool = False
    top_logprobs: Annotated[StrictInt, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    # Accepted so that a client's defaults pass, refused when they ask for what this server cannot
    # do (a 400 instead of an answer that silently ignores them): see routes_generate.refuse_unsupported.
    tools: Annotated[list[dict], _at_most(MAX_TOOLS, "tools")] | None = Field(
        None, description="not supported: a non-empty list is a 400 unless tool_choice is \"none\"")
    tool_choice: str | dict | None = None
    functions: Annotated[list[dict], _at_most(MAX_TOOLS, "functions")] | None = Field(
        None, description="the legacy form of tools: not supported either")
    function_call: str | dict | None = None
    modalities: Annotated[list[str], _at_most(8, "modalities")] | None = Field(
        None, description="only [\"text\"]: audio output is a 400")
    audio: dict | None = Field(None, description="not supported (no audio output): a 400")
    prediction: Any = Field(None, description="OpenAI's Predicted Outputs: not supported (a 400 unless null, \"\" or [])")
    web_search_options: Any = Field(None, description="OpenAI's web search: not supported (a 400 unless null, \"\" or [])")


class CompletionRequest(SamplingFields):
    """``POST /v1/completions`` (plain text, no chat template)."""

    null_is_default = SamplingFields.null_is_default | {"echo"}

    # The shape within the list (one string, token ids, one list of token ids; ints, not floats or
    # bools) is checked by routes_generate.one_prompt, whose 400s name what is wrong in words.
    prompt: str | Annotated[list[Any], Field(min_length=1)] = Field(
        description="one prompt: a string, a list of one string, a list of token ids ([1, 2, 3]) or a list "
                    "of one list of token ids ([[1, 2, 3]], as lm-evaluation-harness sends it); several "
                    "prompts in one request are a 400 (one completion per request)")
    # 0 only with echo: the prompt alone, scored with logprobs (lm-evaluation-harness, vLLM)
    max_tokens: Annotated[StrictInt, Field(ge=0)] | None = Field(
        None, description="tokens to generate; default 16, as OpenAI's legacy completions and vLLM's")
    logprobs: Annotated[StrictInt, Field(ge=0, le=5)] | None = None
    echo: StrictBool = Field(False, description="the prompt comes first in the text, and with logprobs its tokens "
                             "are scored too (the first one's entry is null)")
    best_of: Annotated[StrictInt, Field(ge=1)] | None = Field(None, description="only 1: one completion per request")
    suffix: str | None = Field(None, description="not supported (no insertion): a non-empty suffix is a 400")


class EmbeddingItem(_Body):
    """An extension for images: ``{"text": ..., "image_url": ...}`` (either or both). Other fields
    (a ``video_url``) are refused, not dropped: the vector would silently leave them out."""

    model_config = ConfigDict(extra="forbid")

    text: str = ""
    image_url: ImageURL | str | None = None


def _not_empty(value: Any) -> Any:
    """An empty list refused in one sentence before a union's members see it: each list member's
    own "at least 1 item" error, joined, read "... not 0 or Value should have ..." (a trial)."""
    if isinstance(value, list) and not value:
        raise PydanticCustomError("too_short", "must not be empty (send a string, or a list of at least one)")
    return value


#: The most inputs one embeddings request may hold.
MAX_INPUTS = 256


class EmbeddingRequest(_Body):
    """``POST /v1/embeddings``: a string, a list of strings, or items with images. Token ids (OpenAI
    takes them too) are parsed so that the route refuses them in words, not with a schema error."""

    model: str
    input: Annotated[str | Annotated[list[str | EmbeddingItem], Field(min_length=1, max_length=MAX_INPUTS)] |
                     Annotated[list[StrictInt] | list[list[StrictInt]], Field(min_length=1)],
                     _at_most(MAX_INPUTS, "inputs"), BeforeValidator(_not_empty)]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[StrictInt, Field(ge=1)] | None = None
    user: str | None = None


class TokenizeRequest(TemplateFields):
    """``POST /tokenize`` (vLLM's shape): a text (``prompt``), or chat ``messages`` rendered as a chat
    request's prompt. ``model`` may be left out (lm-evaluation-harness sends none); when given it must
    name the served model."""

    null_is_default = frozenset({"return_token_strs"})

    model: str | None = None
    prompt: str | None = Field(None, description="a text, tokenized as /v1/completions reads its prompt "
                               "(special-token strings are those tokens)")
    messages: Messages | None = Field(
        None, description="instead of prompt: chat messages, tokenized exactly as /v1/chat/completions' prompt "
                          "(images and videos counted as the chat reads them)")
    add_special_tokens: StrictBool | None = Field(
        None, description="add what the tokenizer's post-processor adds (a BOS); default true for prompt, false "
                          "for messages, as vLLM (nothing for SmolVLM's and SmolLM2's tokenizers)")
    return_token_strs: StrictBool = Field(False, description="also return each token's vocabulary string")


class DetokenizeRequest(_Body):
    """``POST /detokenize`` (vLLM's shape): token ids to their text, special tokens included."""

    model: str | None = None
    # Each id is checked in routes_tokenize (integers, not bools, in the vocabulary), whose 400s name it.
    tokens: list[Any] = Field(description="token ids: integers in the model's vocabulary")
