"""Hugging Face-style files (config.json, tokenizer.json, ...) derived from GGUF metadata.

A GGUF file describes its model with llama.cpp's metadata keys (``llama.block_count``,
``tokenizer.ggml.tokens`` ...) instead of config and tokenizer files. This module turns those keys
into the files the rest of the engine reads from a model folder, the way transformers does when it
loads a GGUF (``transformers.integrations.ggml.GGUF_CONFIG_MAPPING`` for the config keys,
``integrations/gguf/gguf_tokenizer_mapping.py`` for the tokenizer), so a GGUF checkpoint and the
safetensors checkpoint it came from give the same folder contents. Pure functions of a ``meta``
mapping (key -> value as ``gguf.ReaderField.contents()`` returns it): no file access, no torch.

Where transformers' conversion is lossy we follow llama.cpp, which is what the file was written for:
the pre-tokenizer named by ``tokenizer.ggml.pre`` (transformers falls back to plain GPT-2 splitting
for names it does not know, such as SmolLM's ``smollm``, which splits digits one by one).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from engine.api.errors import ModelLoadError
from engine.tokenizer import _bytes_to_unicode  # GPT-2's byte alphabet: one copy of the table

# llama.cpp token types (llama_token_type): 3 = control (special), 4 = user-defined (added, not special).
TOKEN_CONTROL = 3
TOKEN_USER_DEFINED = 4

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# tokenizer.ggml.pre -> family (llama.cpp src/llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_*).
PRE_TOKENIZERS = {
    "smollm": "smollm",
    "gpt-2": "gpt2", "gpt2": "gpt2", "phi-2": "gpt2",
    "llama-bpe": "llama3", "llama3": "llama3", "llama-v3": "llama3", "dbrx": "llama3", "smaug-bpe": "llama3",
}


class GGUFMetadataError(ModelLoadError):
    """The GGUF's metadata lacks a key the conversion needs, or describes something unsupported."""


def _f32(value: float) -> float:
    """A float32 metadata value as the short decimal it was written from (9.99999974e-06 -> 1e-05).

    GGUF stores floats as float32; ``repr`` of the numpy float32 is the shortest string that reads
    back to the same float32, which is what config.json held before conversion.
    """
    import numpy as np

    return float(repr(np.float32(value)).removeprefix("np.float32(").removesuffix(")"))


def _require(meta: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in meta:
        raise GGUFMetadataError(f"{where}: metadata key {key!r} is missing")
    return meta[key]


def _token_id(meta: Mapping[str, Any], name: str) -> int | None:
    value = meta.get(f"tokenizer.ggml.{name}_token_id")
    return int(value) if value is not None else None


# -- config.json -----------------------------------------------------------------------------------


def llama_config(meta: Mapping[str, Any], tensor_names: set[str], where: str) -> dict:
    """``model_type: llama`` config.json of a llama-architecture GGUF (``LlamaConfig`` fields).

    ``tie_word_embeddings`` is true when the file has no ``output.weight`` (llama.cpp then reuses
    ``token_embd``). ``head_dim`` comes from ``attention.key_length``, else ``rope.dimension_count``,
    else ``hidden_size / heads``; ``rope_theta`` defaults to llama.cpp's 10000 when the key is absent.

    Raises:
        GGUFMetadataError: a required ``llama.*`` key is missing, or rope scaling is set.
    """
    a = "llama"
    hidden = int(_require(meta, f"{a}.embedding_length", where))
    heads = int(_require(meta, f"{a}.attention.head_count", where))
    kv_heads = int(meta.get(f"{a}.attention.head_count_kv", heads))
    head_dim = meta.get(f"{a}.attention.key_length", meta.get(f"{a}.rope.dimension_count", hidden // heads))
    scaling = meta.get(f"{a}.rope.scaling.type")
    if scaling not in (None, "none"):
        raise GGUFMetadataError(f"{where}: rope scaling {scaling!r} is not supported")
    if "rope_freqs.weight" in tensor_names:
        raise GGUFMetadataError(f"{where}: rope frequency factors (rope_freqs, Llama 3.1 scaling) are not supported")
    tokens = meta.get("tokenizer.ggml.tokens") or ()
    rope_theta = _f32(meta.get(f"{a}.rope.freq_base", 10000.0))
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": int(_require(meta, f"{a}.feed_forward_length", where)),
        "num_hidden_layers": int(_require(meta, f"{a}.block_count", where)),
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": int(head_dim),
        "hidden_act": "silu",
        "rms_norm_eps": _f32(_require(meta, f"{a}.attention.layer_norm_rms_epsilon", where)),
        "rope_theta": rope_theta,
        "rope_parameters": {"rope_theta": rope_theta, "rope_type": "default"},  # transformers 5 spelling
        "max_position_embeddings": int(_require(meta, f"{a}.context_length", where)),
        "vocab_size": int(meta.get(f"{a}.vocab_size", len(tokens))),
        "tie_word_embeddings": "output.weight" not in tensor_names,
        "attention_bias": "blk.0.attn_q.bias" in tensor_names,
        "mlp_bias": False,
        "dtype": "float32",
    }
    for hf_key, key in (("bos_token_id", "bos"), ("eos_token_id", "eos"), ("pad_token_id", "padding"),
                        ("unk_token_id", "unknown")):
        if (token_id := _token_id(meta, key)) is not None:
            config[hf_key] = token_id
    return config


def idefics3_config(text_meta: Mapping[str, Any], text_tensors: set[str], clip_meta: Mapping[str, Any],
                    where: str) -> dict:
    """``model_type: idefics3`` config.json of a SmolVLM pair: the llama text GGUF + its clip mmproj.

    The vision tower and projector come from the mmproj's ``clip.vision.*`` keys (projector type
    ``idefics3``), ``image_token_id`` is the id of ``<image>`` in the text model's vocabulary.

    Raises:
        GGUFMetadataError: a required key is missing, the projector is not idefics3, or the
            vocabulary has no ``<image>`` token.
    """
    projector = clip_meta.get("clip.projector_type")
    if projector != "idefics3":
        raise GGUFMetadataError(f"{where}: mmproj projector type {projector!r} is not supported (supported: idefics3)")
    if not clip_meta.get("clip.use_gelu", True):
        raise GGUFMetadataError(f"{where}: mmproj vision activation is not GELU (clip.use_gelu is false)")
    v = "clip.vision"
    text = llama_config(text_meta, text_tensors, where)
    tokens = list(text_meta.get("tokenizer.ggml.tokens") or ())
    if "<image>" not in tokens:
        raise GGUFMetadataError(f"{where}: the text model's vocabulary has no <image> token")
    vision = {
        "model_type": "idefics3_vision",
        "hidden_size": int(_require(clip_meta, f"{v}.embedding_length", where)),
        "intermediate_size": int(_require(clip_meta, f"{v}.feed_forward_length", where)),
        "num_hidden_layers": int(_require(clip_meta, f"{v}.block_count", where)),
        "num_attention_heads": int(_require(clip_meta, f"{v}.attention.head_count", where)),
        "patch_size": int(_require(clip_meta, f"{v}.patch_size", where)),
        "image_size": int(_require(clip_meta, f"{v}.image_size", where)),
        "num_channels": 3,
        "layer_norm_eps": _f32(clip_meta.get(f"{v}.attention.layer_norm_epsilon", 1e-6)),
        "hidden_act": "gelu_pytorch_tanh",
    }
    return {
        "architectures": ["Idefics3ForConditionalGeneration"],
        "model_type": "idefics3",
        "image_token_id": tokens.index("<image>"),
        "scale_factor": int(clip_meta.get(f"{v}.projector.scale_factor", 2)),
        "tie_word_embeddings": text["tie_word_embeddings"],
        "vocab_size": text["vocab_size"],
        "text_config": text,
        "vision_config": vision,
    }


def generation_config(meta: Mapping[str, Any]) -> dict:
    """bos/eos/pad ids; eos also lists llama.cpp's end-of-turn token (``eot_token_id``) when it differs."""
    out: dict[str, Any] = {}
    if (bos := _token_id(meta, "bos")) is not None:
        out["bos_token_id"] = bos
    eos = [i for i in (_token_id(meta, "eos"), _token_id(meta, "eot")) if i is not None]
    eos = list(dict.fromkeys(eos))
    if eos:
        out["eos_token_id"] = eos[0] if len(eos) == 1 else eos
    if (pad := _token_id(meta, "padding")) is not None:
        out["pad_token_id"] = pad
    return out


def image_processor_configs(clip_meta: Mapping[str, Any]) -> tuple[dict, dict]:
    """(preprocessor_config.json, processor_config.json) of an idefics3 mmproj.

    Tiles are ``clip.vision.image_size`` pixels; images are first resized to a longest edge of
    ``clip.vision.preproc_image_size`` (written by newer converters), else 4 tiles wide, SmolVLM's
    published setting (2048 for 512-px tiles). Resampling is LANCZOS (1), as in SmolVLM's files.
    """
    v = "clip.vision"
    tile = int(clip_meta[f"{v}.image_size"])
    patch = int(clip_meta[f"{v}.patch_size"])
    scale = int(clip_meta.get(f"{v}.projector.scale_factor", 2))
    pre = {
        "image_processor_type": "Idefics3ImageProcessor",
        "processor_class": "Idefics3Processor",
        "do_convert_rgb": True, "do_image_splitting": True, "do_normalize": True, "do_pad": True,
        "do_rescale": True, "do_resize": True,
        "image_mean": [_f32(x) for x in clip_meta.get(f"{v}.image_mean", (0.5, 0.5, 0.5))],
        "image_std": [_f32(x) for x in clip_meta.get(f"{v}.image_std", (0.5, 0.5, 0.5))],
        "max_image_size": {"longest_edge": tile},
        "size": {"longest_edge": int(clip_meta.get(f"{v}.preproc_image_size", 4 * tile))},
        "resample": 1,
        "rescale_factor": 1 / 255,
    }
    proc = {"processor_class": "Idefics3Processor", "image_seq_len": (tile // patch) ** 2 // scale**2}
    return pre, proc


# -- tokenizer -------------------------------------------------------------------------------------


def build_tokenizer(meta: Mapping[str, Any], where: str) -> Tokenizer:
    """The byte-level BPE tokenizer (``tokenizer.ggml.model == "gpt2"``) a GGUF describes.

    Vocabulary, merges, special tokens and post-processor as transformers builds them
    (``byte_level_tokenizer`` + ``add_gguf_special_tokens``): control tokens (type 3) become special
    added tokens, user-defined ones (type 4) plain added tokens; a token spelled outside the byte
    alphabet is re-spelled byte by byte, and a control token outside it (a llama.cpp mislabel) is
    not added. The pre-tokenizer follows ``tokenizer.ggml.pre`` (:data:`PRE_TOKENIZERS`).

    Raises:
        GGUFMetadataError: no vocabulary, a sentencepiece (``llama``) or other tokenizer model, or a
            pre-tokenizer this engine does not know (the message says to put tokenizer.json beside).
    """
    hint = "; put the model's tokenizer.json beside the GGUF to use it instead"
    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise GGUFMetadataError(
            f"{where}: tokenizer model {kind!r} is not supported (supported: gpt2 byte-level BPE){hint}")
    tokens = list(_require(meta, "tokenizer.ggml.tokens", where))
    types = list(meta.get("tokenizer.ggml.token_type") or ())
    pre = meta.get("tokenizer.ggml.pre") or "gpt-2"
    family = PRE_TOKENIZERS.get(pre)
    if family is None:
        raise GGUFMetadataError(
            f"{where}: pre-tokenizer {pre!r} is not supported (supported: {', '.join(PRE_TOKENIZERS)}){hint}")
    spelling = _bytes_to_unicode()
    alphabet = set(spelling.values())
    vocab = {
        tok if set(tok) <= alphabet else "".join(spelling[b] for b in tok.encode("utf-8")): i
        for i, tok in enumerate(tokens)
    }
    merges = [tuple(m.split(" ")) for m in meta.get("tokenizer.ggml.merges") or ()]
    # Llama 3 vocabularies are applied whole-word first (HF tokenizer.json and llama.cpp both ignore merges there).
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, dropout=None, unk_token=None,
                               continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False,
                               byte_fallback=False, ignore_merges=family == "llama3"))
    if family == "llama3":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    elif family == "smollm":  # llama.cpp: "\p{N}" first, then GPT-2's regex
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    control = [t for t, k in zip(tokens, types) if k == TOKEN_CONTROL and set(t) <= alphabet]
    if control:
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
    user = [t for t, k in zip(tokens, types) if k == TOKEN_USER_DEFINED and t in vocab]
    if user:
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in user])
    bos = _token_id(meta, "bos")
    if meta.get("tokenizer.ggml.add_bos_token") and bos is not None:
        b = tokens[bos]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{b}:0 $A:0", pair=f"{b}:0 $A:0 {b}:1 $B:1", special_tokens=[(b, bos)])
    else:
        tok.post_processor = processors.TemplateProcessing(single="$A:0", pair="$A:0 $B:1", special_tokens=[])
    return tok


def special_tokens(meta: Mapping[str, Any]) -> dict[str, str]:
    """bos/eos/unk/pad token strings (transformers' ``get_gguf_tokenizer``)."""
    tokens = meta.get("tokenizer.ggml.tokens") or ()
    out = {}
    for name, key in (("bos_token", "bos"), ("eos_token", "eos"), ("unk_token", "unknown"), ("pad_token", "padding")):
        token_id = _token_id(meta, key)
        if token_id is not None and 0 <= token_id < len(tokens):
            out[name] = tokens[token_id]
    return out


def tokenizer_config(meta: Mapping[str, Any]) -> dict:
    """tokenizer_config.json: special tokens, BOS/EOS flags and the chat template (``tokenizer.chat_template``)."""
    config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast", **special_tokens(meta)}
    for flag in ("add_bos_token", "add_eos_token"):
        if (value := meta.get(f"tokenizer.ggml.{flag}")) is not None:
            config[flag] = bool(value)
    if (template := meta.get("tokenizer.chat_template")) is not None:
        config["chat_template"] = template
    return config


def dumps(obj: Any) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"
