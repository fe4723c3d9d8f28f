"""Tokenizer, chat template and streaming detokenizer of a checkpoint folder (any model family).

Built on the ``tokenizers`` library (``tokenizer.json``) and a sandboxed jinja2 chat template, with
no torch and no transformers. ``Tokenizer.encode_chat`` gives exactly the ids of transformers'
``processor.apply_chat_template(...)`` followed by ``processor(text=..., images=...)`` for ordinary
text, but never lets text typed by a user become a special token or an image slot.
"""

from __future__ import annotations

import codecs
import functools
import json
import os
import re
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer as _HfTokenizer

from engine.api.errors import ConfigError

#: Bounds of the tokenizer's memo of trusted pieces (Tokenizer._cached): the distinct strings of a
#: few conversations (image and video prompts per tile grid, template pieces, messages' text
#: chunks), each at most SPLIT_CACHE_TEXT_CHARS long, SPLIT_CACHE_CHARS in all (a chunk's ids take
#: up to ~9 bytes a character: ~20 MB at most).
SPLIT_CACHE_ENTRIES = 1024
SPLIT_CACHE_TEXT_CHARS = 1 << 16
SPLIT_CACHE_CHARS = 1 << 21
#: Texts at least this long are encoded with the GIL released (tokenizers' ``encode`` holds it for
#: the whole call: a 1.8M-character text kept every other thread, a server's event loop included,
#: waiting 1.1 s on this project's CPU; its ``encode_batch`` lets it go). Shorter texts keep the
#: plain call: releasing and taking back the GIL could make the engine thread wait for it.
RELEASE_GIL_CHARS = 1 << 14

#: Where a chat template can live, first match wins (transformers' order): ``chat_template.json``
#: (key ``chat_template``), ``chat_template.jinja`` (the file is the template), ``tokenizer_config.json``.
TEMPLATE_FILES = ("chat_template.json", "chat_template.jinja", "tokenizer_config.json")


class PromptImage(Protocol):
    """What :meth:`Tokenizer.encode_chat` needs of a processed image; the model's processor makes it
    (e.g. :class:`engine.models.smolvlm.processing.ProcessedImage`). The tokenizer knows nothing else
    of an image layout.

    Attributes:
        image_token: the special token the chat template writes for an image part.
        prompt: the text that replaces it (special tokens allowed), e.g. SmolVLM's tile grid.
        num_image_tokens: how many feature slots ``prompt`` holds.
    """

    image_token: str
    prompt: str
    num_image_tokens: int


@dataclass(frozen=True, slots=True)
class EncodedRun:
    """Items of trusted text already tokenized: ``ids`` and the text they spell (special tokens by
    name). One stands for the span of an image's or video's prompt between its first and last
    special token (:meth:`Tokenizer._media_items`)."""

    ids: tuple[int, ...]
    text: str


@dataclass(frozen=True)
class EncodedPrompt:
    """A chat rendered, expanded and tokenized.

    Attributes:
        text: the full prompt string, every image placeholder replaced by its expansion.
        input_ids: token ids of ``text`` (no BOS is added; ``<|im_start|>`` comes from the template).
        num_image_tokens: how many feature slots the images' expansions hold (SmolVLM: tiles * 64).
        message_chunks: message index -> where in ``input_ids`` the text chunk holding the message's
            first text part begins (after the special token before it, or 0): where a replayed
            answer's ids go (``ChatSession._replay_answers``).
    """

    text: str
    input_ids: list[int]
    num_image_tokens: int
    message_chunks: dict[int, int] = field(default_factory=dict)


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table used by byte-level BPE (``ByteLevel`` decoder)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


_CHAR_TO_BYTE = {c: b for b, c in _bytes_to_unicode().items()}


# ``str.translate`` table from a byte-level token's characters to latin-1 characters, one per byte.
# Characters outside GPT-2's table map to U+0100, which latin-1 cannot encode: tokenizers'
# ``ByteLevel`` decoder reads a token as bytes only when every character is in the table, and takes
# it as its own UTF-8 text otherwise (tokenizers 0.23, ``decoders/byte_level.rs``), for added and
# special tokens too.
_TO_LATIN1 = {ord(c): chr(b) for c, b in _CHAR_TO_BYTE.items()}
_TO_LATIN1.update({i: "\u0100" for i in range(256) if chr(i) not in _CHAR_TO_BYTE})


def _load_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"Cannot read {path}: {exc}") from exc


def _normalize_messages(messages: list[dict], as_string: bool = False) -> list[dict]:
    """Copy messages with content as a list of parts (``[{"type": "text", "text": s}]`` for a string),
    or with ``as_string`` as one string (the text parts joined), for templates that concatenate
    ``message['content']`` (SmolLM2's ChatML).

    Raises:
        ValueError: a malformed message, or an image part when ``as_string``.
    """
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or "role" not in message:
            raise ValueError(f"message {i} must be a dict with a 'role', got {message!r}")
        content = message.get("content", "")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        elif not isinstance(content, list):
            raise ValueError(f"message {i} content must be a str or a list of parts")
        content = [dict(part) for part in content]
        if as_string:
            if any(part.get("type") != "text" for part in content):
                raise ValueError(f"message {i} has a non-text part but this chat template takes text only")
            content = "".join(str(part.get("text", "")) for part in content)
        out.append({**message, "content": content})
    return out


def content_is_list(template: str) -> bool:
    """Whether a chat template reads message content as a list of typed parts (SmolVLM:
    ``content[0]['type']``) rather than one string (ChatML templates like SmolLM2's): the same test
    as vLLM's content-format detection, reduced to looking for a part's ``type``."""
    return re.search(r"""\[\s*['"]type['"]\s*\]|\.type\b""", template) is not None


def _compile_template(source: str) -> jinja2.Template:
    """Compile a chat template like transformers' ``_compile_jinja_template`` (``chat_template_utils.py``)."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source)


def find_chat_template(folder: Path, tokenizer_config: dict | None = None) -> str | None:
    """The chat template of ``folder`` from the first of :data:`TEMPLATE_FILES` that has one, else ``None``.

    Raises:
        ConfigError: a template file exists but cannot be read.
    """
    path = folder / "chat_template.json"
    if path.is_file():
        template = _load_json(path).get("chat_template")
        if template:
            return template
    path = folder / "chat_template.jinja"
    if path.is_file():
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"Cannot read {path}: {exc}") from exc
    if tokenizer_config is None:
        path = folder / "tokenizer_config.json"
        tokenizer_config = _load_json(path) if path.is_file() else {}
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template}
        template = named.get("default") or next(iter(named.values()), None)
    return template or None


class Tokenizer:
    """Byte-level BPE tokenizer of a checkpoint plus its chat template.

    No model-specific token is required: image tokens belong to the processor's images
    (:class:`PromptImage`), stop tokens to the model's generation config. ``special_tokens_map``
    (``bos_token``, ``eos_token``, ...) is passed to the template as transformers does.
    """

    def __init__(self, tokenizer: _HfTokenizer, chat_template: str | None, special_tokens_map: dict | None = None):
        self._tok = tokenizer
        # Text chunks are encoded with special-token matching off (``encode_special_tokens``), set
        # around each call under this lock. A second instance for that cost ~0.12 s of every load.
        self._encode_lock = threading.Lock()
        self._aside_tok: _HfTokenizer | None = None  # encode_aside's copy, made on first use
        self.chat_template = chat_template
        self._template = _compile_template(chat_template) if chat_template else None
        #: How the template wants ``message['content']``: a list of parts, or one string.
        self.content_as_list = content_is_list(chat_template) if chat_template else True
        self.special_tokens_map = {
            key: (value["content"] if isinstance(value, dict) else value)
            for key, value in (special_tokens_map or {}).items()
            if isinstance(value, (str, dict))
        }
        added = tokenizer.get_added_tokens_decoder()
        specials = {tok.content: idx for idx, tok in added.items() if tok.special}
        self._special_ids = specials
        self.special_ids = frozenset(specials.values())
        pattern = "|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True))
        self._special_re = re.compile(f"({pattern})") if pattern else None
        self._special_names = {idx: name for name, idx in specials.items()}
        # _cached's results by key, least recently used first, and the characters of their texts.
        # The same strings come back on every turn of a conversation (an image's prompt of ~900
        # special tokens, the template's pieces, earlier messages): splitting a 13-tile photo's
        # prompt took 0.4 ms of a follow-up's 0.9 ms prompt encoding (the alternation of every
        # special token, tried at each character).
        self._split_cache: OrderedDict[str | tuple, tuple] = OrderedDict()
        self._split_chars = 0
        self._split_lock = threading.Lock()
        # Markers for user text while the template renders (:meth:`_render_marked`). The nonce is per
        # tokenizer, not per call: the pattern compiles once (a fresh one cost ~0.35 ms a prompt, and
        # a follow-up question encodes the conversation twice), and user text never reaches the
        # rendered string (it is swapped out before rendering), so nothing there can forge a marker.
        self._nonce = secrets.token_hex(8)
        self._marker_re = re.compile(f"\ue000{self._nonce}:(\\d+)\ue001")
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        self._token_bytes: dict[int, bytes] = {}  # token_bytes' results, by id

    @classmethod
    def from_pretrained(cls, folder: str | os.PathLike) -> Tokenizer:
        """Load ``tokenizer.json``, the chat template and the special-token map from a folder.

        The template comes from the first of :data:`TEMPLATE_FILES` that has one
        (``tokenizer_config.json``'s may be a list of named templates, where ``"default"`` wins).
        The special-token map (``bos_token``, ``eos_token``, ``pad_token``, ``unk_token`` ...) is
        ``tokenizer_config.json``'s ``*_token`` entries, then ``special_tokens_map.json`` for the ones
        it lacks. ``added_tokens.json`` entries missing from ``tokenizer.json`` are added as special tokens.

        Raises:
            ConfigError: ``tokenizer.json`` is missing or unreadable, or a template file is unreadable.
        """
        folder = Path(folder)
        path = folder / "tokenizer.json"
        if not path.is_file():
            raise ConfigError(f"Missing tokenizer.json in {folder}")
        try:
            tok = _HfTokenizer.from_file(str(path))
        except Exception as exc:  # the Rust side raises plain Exception
            raise ConfigError(f"Cannot read {path}: {exc}") from exc
        added_path = folder / "added_tokens.json"
        if added_path.is_file():
            from tokenizers import AddedToken

            missing = [t for t in _load_json(added_path) if tok.token_to_id(t) is None]
            if missing:
                tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in missing])
        config = _load_json(folder / "tokenizer_config.json") if (folder / "tokenizer_config.json").is_file() else {}
        smap = {k: v for k, v in config.items() if k.endswith("_token") and isinstance(v, (str, dict))}
        if (folder / "special_tokens_map.json").is_file():
            for key, value in _load_json(folder / "special_tokens_map.json").items():
                smap.setdefault(key, value)
        return cls(tok, find_chat_template(folder, config), smap)

    @functools.cached_property
    def max_token_chars(self) -> int:
        """The most characters of text one token stands for: the longest vocabulary entry, special
        tokens included (a byte-level entry holds one character per byte, and a character is at
        least one byte; a SentencePiece entry is its own text, ``<0xE2>`` longer than its byte)."""
        return max((len(entry) for entry in self._tok.get_vocab(with_added_tokens=True)), default=1)

    def least_tokens(self, chars: int) -> int:
        """A lower bound on the tokens of any text of ``chars`` characters, known without encoding it:
        no token stands for more than :attr:`max_token_chars` of them, halved for a normalizer that
        joins characters (NFC composes "e" + U+0301 into one). An 18 MB request took 12-22 s of the
        engine thread to encode only to be refused as longer than the context (trial 39)."""
        return chars // (2 * self.max_token_chars)

    # -- plain encode / decode --------------------------------------------------------------------

    def encode(self, text: str, allow_special: bool = False) -> list[int]:
        """Token ids of ``text``; no BOS/EOS added.

        With ``allow_special=False`` (default) special-token strings such as ``<image>`` are
        encoded as ordinary text; with ``True`` they become their special ids, as transformers does.
        """
        with self._encode_lock:
            self._tok.encode_special_tokens = not allow_special
            try:
                if len(text) >= RELEASE_GIL_CHARS:  # the same ids, without holding the GIL
                    return self._tok.encode_batch([text], add_special_tokens=False)[0].ids
                return self._tok.encode(text, add_special_tokens=False).ids
            finally:
                self._tok.encode_special_tokens = False

    def encode_aside(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """:meth:`encode` with ``allow_special=True`` (``/v1/completions``' reading of a prompt), for
        threads other than the engine's (a server's ``/tokenize``): the GIL is released while the
        Rust side works, and it runs on a copy of the tokenizer of its own (made on first use, ~0.1 s),
        so the engine thread's encodes never wait on :meth:`encode`'s lock behind a long text.
        ``add_special_tokens``: what the tokenizer's post-processor adds (transformers'
        ``tokenizer(text)``; nothing for SmolVLM's and SmolLM2's), which :meth:`encode` never adds."""
        return self._aside().encode_batch([text], add_special_tokens=add_special_tokens)[0].ids

    def decode_aside(self, ids: Sequence[int]) -> str:
        """:meth:`decode` (special tokens kept) with the GIL released, for threads other than the engine's."""
        return self._aside().decode_batch([list(ids)], skip_special_tokens=False)[0]

    def special_affixes(self) -> tuple[list[int], list[int]]:
        """The ids the post-processor puts before and after a text's own (a BOS, an EOS; both empty
        for SmolVLM's and SmolLM2's tokenizers)."""
        plain = self._aside().encode("a", add_special_tokens=False).ids
        full = self._aside().encode("a", add_special_tokens=True).ids
        for start in range(len(full) - len(plain) + 1):
            if full[start:start + len(plain)] == plain:
                return full[:start], full[start + len(plain):]
        return [], []

    def _aside(self) -> _HfTokenizer:
        """The copy :meth:`encode_aside` uses; never changed after it is made (its special-token
        strings are matched), so threads share it without a lock."""
        copy = self._aside_tok
        if copy is None:
            with self._encode_lock:
                if self._aside_tok is None:
                    self._aside_tok = _HfTokenizer.from_str(self._tok.to_str())
                copy = self._aside_tok
        return copy

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Text of ``ids`` (byte-level decoding; invalid UTF-8 becomes U+FFFD)."""
        return self._tok.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def id_to_token(self, idx: int) -> str | None:
        return self._tok.id_to_token(idx)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def token_bytes(self, idx: int) -> bytes:
        """The raw bytes token ``idx`` stands for (an id without a token: ``b""``).

        Mirrors tokenizers' ``ByteLevel`` decoder, which every token goes through, added and special
        ones too: a token whose characters are all in GPT-2's byte table stands for those bytes
        (``"Ġhi"`` -> ``b" hi"``); a token with any other character stands for its own UTF-8
        (``"<|spé€|>"``, ``"naïve€"``). Computed for the ids a stream meets, ~2 us each, and kept:
        a table of the whole vocabulary cost 49-99 ms of a load's GIL time for a 49k vocabulary
        (this project's 2-core CPU).

        Raises:
            IndexError: ``idx`` is not in ``[0, vocab_size)``.
        """
        cached = self._token_bytes.get(idx)
        if cached is not None:
            return cached
        if not 0 <= idx < self.vocab_size:
            raise IndexError(f"token id {idx} is outside the vocabulary (size {self.vocab_size})")
        token = self._tok.id_to_token(idx) or ""
        try:
            cached = token.translate(_TO_LATIN1).encode("latin-1")
        except UnicodeEncodeError:  # a character outside the table: the token is its own text
            cached = token.encode("utf-8")
        self._token_bytes[idx] = cached
        return cached

    # -- chat ---------------------------------------------------------------------------------------

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """Render the chat template as transformers does (image parts become what the template writes).

        Contents are normalized to what the template reads (:func:`content_is_list`): a list of
        parts for SmolVLM's (``content[0]['type']``), one string for ChatML ones like SmolLM2's. The result is
        for display and comparison; to feed
        the model use :meth:`encode_chat`, which keeps user text away from special tokens.

        Raises:
            ConfigError: the checkpoint has no chat template.
            ValueError: malformed messages. jinja2.TemplateError: the template refused them.
        """
        if self._template is None:
            raise ConfigError(f"This tokenizer has no chat template ({' / '.join(TEMPLATE_FILES)})")
        return self._template.render(
            messages=_normalize_messages(messages, as_string=not self.content_as_list),
            add_generation_prompt=add_generation_prompt,
            **self.special_tokens_map,
        )

    def _render_marked(self, messages: list[dict], add_generation_prompt: bool,
                       continue_final_message: bool = False,
                       owners: list[int] | None = None) -> list[tuple[str, bool]]:
        """Render with each text part swapped for a unique marker; return (piece, is_user_text) pairs.
        ``owners`` (a list to fill): the message index of each user-text piece, in order.

        ``continue_final_message``: the rendering ends right after the last message's last text part,
        as transformers' ``apply_chat_template(continue_final_message=True)`` cuts it at the tag it
        appends to that part (``chat_template_utils.render_jinja_template``).

        Raises:
            ValueError: ``continue_final_message`` and the last message has no text part, or the
                template did not write it.
        """
        texts: list[str] = []
        senders: list[int] = []  # the message of each text part
        marked = _normalize_messages(messages)
        final = None  # the marker index of the last message's last text part
        for m, message in enumerate(marked):
            for part in message["content"]:
                if part.get("type") == "text":
                    texts.append(str(part.get("text", "")))
                    senders.append(m)
                    part["text"] = f"\ue000{self._nonce}:{len(texts) - 1}\ue001"
                    if m == len(marked) - 1:
                        final = len(texts) - 1
        if continue_final_message and final is None:
            raise ValueError("continue_final_message is set but the final message has no text to continue")
        rendered = self.apply_chat_template(marked, add_generation_prompt)
        pieces: list[tuple[str, bool]] = []
        for i, piece in enumerate(self._marker_re.split(rendered)):
            pieces.append((texts[int(piece)], True) if i % 2 else (piece, False))
            if i % 2 and owners is not None:
                owners.append(senders[int(piece)])
            if continue_final_message and i % 2 and int(piece) == final:
                return pieces
        if continue_final_message:
            raise ValueError("continue_final_message is set but the chat template did not write the final message")
        return pieces

    def _split_special(self, text: str) -> tuple[str | int, ...]:
        """Split trusted text at special-token strings: plain strings and special ids, in order."""
        if self._special_re is None:
            return (text,)
        return self._cached(text, lambda: tuple(
            self._special_ids[s] if i % 2 else s for i, s in enumerate(self._special_re.split(text)) if s))

    def _media_items(self, text: str) -> tuple[str | int | EncodedRun, ...]:
        """:meth:`_split_special` of an image's or video's prompt with the span from its first
        special token to its last as one :class:`EncodedRun`.

        That span is bounded by special tokens, so each text chunk inside it is encoded alone
        wherever the prompt stands, exactly as :meth:`encode_chat`'s loop would encode it; text
        before the first special token and after the last stays a plain item, since it joins the
        template's text around it. A 13-tile photo's prompt is ~900 items and ~30 of them text: the
        run makes a follow-up's encoding of the conversation one ``extend`` for the photo instead
        of a Python step per token.
        """
        return self._cached(("media", text), lambda: self._encode_runs(self._split_special(text)))

    def _encode_runs(self, items: tuple[str | int, ...]) -> tuple[str | int | EncodedRun, ...]:
        specials = [i for i, item in enumerate(items) if item.__class__ is not str]
        if not specials:
            return items
        first, last = specials[0], specials[-1]
        ids: list[int] = []
        text: list[str] = []
        names = self._special_names
        for item in items[first:last + 1]:
            if item.__class__ is str:
                ids.extend(self.encode(item))
                text.append(item)
            else:
                ids.append(item)
                text.append(names[item])
        return (*items[:first], EncodedRun(tuple(ids), "".join(text)), *items[last + 1:])

    def _encode_chunk(self, text: str) -> tuple[int, ...]:
        """:meth:`encode` of a text chunk of a conversation, memoized: every turn encodes the whole
        conversation again, and each earlier message's chunk comes back unchanged (a tokenizer call
        cost ~30-40 us each on the dev VM, with its lock; a follow-up has a few per exchange)."""
        return self._cached(("ids", text), lambda: tuple(self.encode(text)))

    def _cached(self, key: str | tuple, make: Callable[[], tuple]) -> tuple:
        """``make()``, memoized by ``key`` (a text, or a tag and a text) in an LRU of at most
        SPLIT_CACHE_ENTRIES entries and SPLIT_CACHE_CHARS characters of text; texts over
        SPLIT_CACHE_TEXT_CHARS are not kept. The engine thread and a server's request threads both
        encode, hence the lock; ``make`` runs outside it."""
        cache = self._split_cache
        with self._split_lock:
            found = cache.get(key)
            if found is not None:
                cache.move_to_end(key)
                return found
        found = make()
        size = len(key if isinstance(key, str) else key[-1])
        if size <= SPLIT_CACHE_TEXT_CHARS:
            with self._split_lock:
                if key not in cache:  # another thread may have made it meanwhile
                    cache[key] = found
                    self._split_chars += size
                while len(cache) > SPLIT_CACHE_ENTRIES or self._split_chars > SPLIT_CACHE_CHARS:
                    old, _ = cache.popitem(last=False)
                    self._split_chars -= len(old if isinstance(old, str) else old[-1])
        return found

    def encode_chat(
        self,
        messages: list[dict],
        images: Sequence[PromptImage] | None = None,
        add_generation_prompt: bool = True,
        videos: list | None = None,
        continue_final_message: bool = False,
    ) -> EncodedPrompt:
        """Render, expand and tokenize a conversation.

        Messages are ``{"role": "user" | "assistant" | "system", "content": str | list[part]}`` with
        parts ``{"type": "text", "text": ...}`` or ``{"type": "image"}``; ``images`` are the processed
        images of the image parts, in order: each occurrence of an image's ``image_token`` written
        by the template is replaced by that image's ``prompt``. Only special tokens written by the
        template itself (including the image token it emits per image part) are special; text parts are tokenized
        with special-token matching off, so a user typing ``<image>`` or ``<end_of_utterance>``
        gets ordinary text tokens. The plain text between special tokens is encoded chunk by chunk,
        which is what transformers does after splitting on added tokens, so ordinary chats give
        exactly transformers' ids.

        ``videos`` are the processed videos of ``{"type": "video"}`` parts, in order (SmolVLM2): each
        ``video_token`` (``<video>``, plain text, not a special token) the template writes is replaced
        by that video's ``prompt``, as transformers' ``SmolVLMProcessor`` replaces it in the rendered text.

        ``continue_final_message`` leaves the last message open for the model to continue (an
        assistant's prefill): the prompt ends with its text, with no end-of-utterance and no
        generation prompt (``add_generation_prompt`` is ignored), as transformers'
        ``apply_chat_template(continue_final_message=True)`` renders it.

        Raises:
            ValueError: the number of image (video) parts differs from ``len(images)`` (``len(videos)``),
                or the template wrote a different number of image tokens (video tokens) (both numbers named);
                ``continue_final_message`` and the last message has no text the template writes.
        """
        images = list(images or [])
        videos = list(videos or [])
        parts = [p.get("type") for m in _normalize_messages(messages) for p in m["content"]]
        for kind, given in (("image", images), ("video", videos)):
            if parts.count(kind) != len(given):
                raise ValueError(f"the chat has {parts.count(kind)} {kind} parts but {len(given)} {kind}s were given")
        # Without images no token is an image slot: a template's image token stays an ordinary special.
        image_id = self._tok.token_to_id(images[0].image_token) if images else None
        items: list[str | int] = []  # plain text chunks and special ids
        owners: list[int] = []
        owned: dict[int, int] = {}  # index in items of a message's first text part -> the message
        seen: set[int] = set()
        n_user = 0  # user pieces met so far
        n_slots = n_videos = 0
        for piece, is_user in self._render_marked(messages, add_generation_prompt and not continue_final_message,
                                                  continue_final_message, owners):
            if is_user:
                owner, n_user = owners[n_user], n_user + 1
                if owner not in seen:
                    seen.add(owner)
                    owned[len(items)] = owner
                items.append(piece)
                continue
            for k, segment in enumerate(piece.split(videos[0].video_token) if videos else [piece]):
                if k:  # a video part's token stood here
                    if n_videos < len(videos):
                        items.extend(self._media_items(videos[n_videos].prompt))
                    n_videos += 1
                for item in self._split_special(segment):
                    if image_id is not None and item == image_id:
                        if n_slots < len(images):
                            items.extend(self._media_items(images[n_slots].prompt))
                        n_slots += 1
                    else:
                        items.append(item)
        if n_slots != len(images):
            raise ValueError(f"the chat template wrote {n_slots} image tokens but {len(images)} images were given")
        if n_videos != len(videos):
            raise ValueError(f"the chat template wrote {n_videos} video tokens but {len(videos)} videos were given")
        text_parts: list[str] = []
        ids: list[int] = []
        chunk: list[str] = []
        names = self._special_names
        chunks: dict[int, int] = {}
        for index, item in enumerate(items):  # a photo's ~900 tokens are one EncodedRun: a follow-up loops over tens
            kind = item.__class__
            if kind is str:
                if index in owned:  # (the chunk is encoded at the next special: it begins where ids end now)
                    chunks[owned[index]] = len(ids)
                chunk.append(item)
                text_parts.append(item)
                continue
            if chunk:
                ids.extend(self._encode_chunk("".join(chunk)))
                chunk.clear()
            if kind is EncodedRun:
                ids.extend(item.ids)
                text_parts.append(item.text)
            else:
                ids.append(item)
                text_parts.append(names[item])
        if chunk:
            ids.extend(self._encode_chunk("".join(chunk)))
        return EncodedPrompt(
            text="".join(text_parts),
            input_ids=ids,
            num_image_tokens=sum(image.num_image_tokens for image in [*images, *videos]),
            message_chunks=chunks,
        )


class StreamingDetokenizer:
    """Incremental decoding that never splits a UTF-8 character.

    ``add(token_id)`` appends the token's bytes and returns the text that is now complete; bytes of
    a character still being spelled out by later tokens are held back. Ids in ``skip_special_ids``
    (stop tokens, e.g. SmolVLM's ``<end_of_utterance>``) are dropped and never emitted. The concatenation of all
    ``add`` results plus ``flush()`` equals ``tokenizer.decode(ids)`` of the non-skipped ids.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special_ids: Iterable[int] = ()):
        self._tokenizer = tokenizer
        self.skip_special_ids = frozenset(skip_special_ids)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.token_ids: list[int] = []

    def add(self, token_id: int) -> str:
        """Feed one generated id; return the newly completed text (possibly ``""``)."""
        if token_id in self.skip_special_ids:
            return ""
        self.token_ids.append(token_id)
        return self._decoder.decode(self._tokenizer.token_bytes(token_id))

    def flush(self) -> str:
        """End of stream: return what is left (an unfinished character becomes U+FFFD)."""
        text = self._decoder.decode(b"", final=True)
        self._decoder.reset()
        return text

    def hold(self) -> int:
        """End of a stream that may be continued (an answer cut by its token limit or stopped): the bytes
        of an unfinished character are dropped from the text instead of becoming U+FFFD, since the
        continuation's first tokens finish that character (:meth:`prime`). Returns how many bytes
        were held back (0 to 3)."""
        held = len(self._decoder.getstate()[0])
        self._decoder.reset()
        return held

    def prime(self, token_ids: Sequence[int]) -> None:
        """Start a continuation of ``token_ids`` (an earlier answer's ids, after :meth:`hold`): the bytes
        of a character those ids leave unfinished are taken in first, so the continuation's first
        text is that whole character, not U+FFFD for each of its remaining bytes (trial 60: an emoji
        cut by the token limit read "���" once continued)."""
        tail = b"".join(self._tokenizer.token_bytes(i) for i in token_ids[-4:])[-3:]  # a character is <= 4 bytes
        for n in range(1, len(tail) + 1):  # back from the last byte, over continuation bytes, to a lead byte
            byte = tail[-n]
            if byte < 0x80:  # ASCII: every character before it is whole
                return
            if byte >= 0xC0:  # a lead byte, of a character of 2, 3 or 4 bytes
                if n < (2 if byte < 0xE0 else 3 if byte < 0xF0 else 4):
                    self._decoder.decode(tail[-n:])
                return
