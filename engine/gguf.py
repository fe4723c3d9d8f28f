"""GGUF checkpoints (llama.cpp's format) as a :class:`~engine.sources.ModelSource`.

``GGUFSource`` reads a llama-architecture GGUF (SmolLM2 and the like) or a SmolVLM pair as
llama.cpp publishes it (the text model plus an ``mmproj`` GGUF holding the vision tower and
projector) with the ``gguf`` package, ggml's own reader. It presents the checkpoint exactly like a
safetensors folder: :attr:`folder` holds config.json, generation_config.json and tokenizer files
derived from the GGUF metadata (:mod:`engine.gguf_files`), and :meth:`tensors` yields Hugging Face
names with float32 values, dequantized on the fly, so models load GGUF files with no change.

Every check happens in the constructor (file format, architecture, tensor types and names), so a
bad file raises one :class:`GGUFError` with a one-line message and nothing is half-loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from gguf import GGUFReader

from engine import gguf_files
from engine.api.errors import ModelLoadError, UnsupportedModelError
from engine.gguf_files import GGUFMetadataError  # noqa: F401  (re-exported: raised for unusable metadata)
from engine.sources import ModelSource, unreadable_weights

CACHE_ENV = "SMOLCHAT_GGUF_CACHE"
# Bump when the derived files change, so caches written by older code are not reused.
FORMAT_VERSION = 1
# Q5_0 / Q5_1: llama.cpp's K-quants need rows of 256; SmolLM2's 576-wide rows fall back to Q5_0, so a
# Q4_K_M SmolLM2 is mostly Q5_0 (166 of its 211 matrices).
SUPPORTED_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K")
# Files beside the GGUF that replace the ones derived from its metadata (a Hub repo's own files).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "chat_template.json", "chat_template.jinja", "vocab.json", "merges.txt")
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")


class GGUFError(ModelLoadError):
    """A GGUF checkpoint cannot be used; the message names the file and the problem."""


class GGUFFormatError(GGUFError):
    """The file is not a GGUF file, or it is truncated."""


class GGUFArchitectureError(GGUFError, UnsupportedModelError):
    """``general.architecture`` (or the mmproj's projector) is not one this engine implements."""


class GGUFTensorTypeError(GGUFError):
    """A tensor is stored in a ggml type this engine does not dequantize."""


class GGUFMissingTextModelError(GGUFError):
    """A vision projector (mmproj) was given without the text model it belongs to."""


# -- names -----------------------------------------------------------------------------------------

# llama.cpp's tensor names (gguf.constants.TENSOR_NAMES) -> Hugging Face's, per block or global.
_LLAMA_BLOCK = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
_CLIP_BLOCK = {
    "ln1": "layer_norm1", "ln2": "layer_norm2", "ffn_up": "mlp.fc1", "ffn_down": "mlp.fc2",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_out": "self_attn.out_proj",
}
_CLIP_GLOBAL = {
    "mm.model.fc": "model.connector.modality_projection.proj",
    "v.patch_embd": "model.vision_model.embeddings.patch_embedding",
    "v.position_embd": "model.vision_model.embeddings.position_embedding",
    "v.post_ln": "model.vision_model.post_layernorm",
}
_NAME = re.compile(
    r"^(?:(?P<v>v\.)?blk\.(?P<i>\d+)\.(?P<part>[a-z0-9_]+)|(?P<glob>[a-z0-9_.]+?))\.(?P<kind>weight|bias)$")


def llama_hf_name(name: str, prefix: str = "model.") -> str | None:
    """HF name of a llama tensor (``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``).

    ``prefix`` is ``model.`` for LlamaForCausalLM, ``model.text_model.`` inside SmolVLM. None if unknown.
    """
    m = _NAME.match(name)
    if m is None or m["v"]:
        return None
    if m["i"] is not None:
        part = _LLAMA_BLOCK.get(m["part"])
        return f"{prefix}layers.{m['i']}.{part}.{m['kind']}" if part else None
    glob = {"token_embd": f"{prefix}embed_tokens", "output_norm": f"{prefix}norm", "output": "lm_head"}.get(m["glob"])
    return f"{glob}.{m['kind']}" if glob else None


def clip_hf_name(name: str) -> str | None:
    """HF name of an idefics3 mmproj tensor (``v.blk.0.ln1.weight`` -> ``...encoder.layers.0.layer_norm1.weight``)."""
    m = _NAME.match(name)
    if m is None:
        return None
    if m["i"] is not None:
        part = _CLIP_BLOCK.get(m["part"]) if m["v"] else None
        return f"model.vision_model.encoder.layers.{m['i']}.{part}.{m['kind']}" if part else None
    glob = _CLIP_GLOBAL.get(m["glob"])
    return f"{glob}.{m['kind']}" if glob else None


def unpermute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row order (``LlamaModel.permute`` in convert_hf_to_gguf.py).

    llama.cpp's rope rotates adjacent pairs, HF's rotates the two halves of each head, so the
    converter interleaves each head's rows; this is its inverse (transformers'
    ``LlamaTensorProcessor._reverse_permute_weights``). ``w``: ``[n_head * head_dim, ...]``.
    """
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


# -- reading ---------------------------------------------------------------------------------------


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200] or type(exc).__name__


#: No GGUF is a terabyte: a read that would end beyond is a damaged length or offset, not a file cut short.
_MAX_GGUF_BYTES = 1 << 40


class _PastTheEnd(Exception):
    """The header describes data beyond the file's end (ending at ``end``, a byte offset)."""

    def __init__(self, end: int):
        super().__init__(f"a read up to byte {end}")
        self.end = end


class _Reader(GGUFReader):
    """ggml's reader, saying where the header or a tensor runs past the file's end: its own reads then
    come back short and fail later with numpy's errors ("cannot reshape array...", "not enough values
    to unpack"), which tell a file cut short from no other damage. Every read of the header and of the
    tensors' data goes through ``_get``."""

    def _get(self, offset, dtype, count=1, override_order=None):
        end = int(offset) + np.dtype(dtype).itemsize * int(count)
        if end > self.data.size:
            raise _PastTheEnd(end)
        return super()._get(offset, dtype, count, override_order)


def _unreadable(path: Path, error: Exception) -> str:
    """Why ``path`` is no GGUF that can be read (see :func:`engine.sources.unreadable_weights`):
    cut short where the reader ran past its end (an empty file too), else damaged, without the
    reader's own words, which name numpy's internals."""
    size = path.stat().st_size if path.is_file() else 0
    past = isinstance(error, _PastTheEnd) and error.end <= _MAX_GGUF_BYTES
    shortfall = "0 bytes: it is empty" if size == 0 else f"{size} bytes; its header describes more" if past else None
    try:
        with path.open("rb") as f:
            foreign = f.read(4) != b"GGUF"
    except OSError:
        foreign = False
    return unreadable_weights(path, error, "GGUF", shortfall, "it does not start with GGUF" if foreign else "")


class _GGUFFile:
    """One opened, checked GGUF file: its metadata and tensors (memory-mapped, read lazily)."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.reader = _Reader(path)  # parses the header eagerly; tensor data stays memory-mapped
        except Exception as exc:  # noqa: BLE001 - numpy/struct errors of a short or foreign file, in words
            raise GGUFFormatError(_unreadable(path, exc)) from exc
        self.architecture = self.get("general.architecture")

    def get(self, key: str, default: Any = None) -> Any:
        field = self.reader.fields.get(key)
        return default if field is None else field.contents()

    def metadata(self) -> dict[str, Any]:
        """Every key -> value, except the GGUF header's own bookkeeping."""
        return {k: f.contents() for k, f in self.reader.fields.items() if not k.startswith("GGUF.")}

    @property
    def is_mmproj(self) -> bool:
        return self.architecture == "clip"

    def check_types(self) -> None:
        for t in self.reader.tensors:
            if t.tensor_type.name not in SUPPORTED_TYPES:
                raise GGUFTensorTypeError(
                    f"{self.path}: tensor {t.name!r} has type {t.tensor_type.name}, which is not supported "
                    f"(supported: {', '.join(SUPPORTED_TYPES)})")

    def shape(self, tensor) -> tuple[int, ...]:
        return tuple(int(d) for d in reversed(tensor.shape))  # ggml lists dimensions innermost first

    def dequantize(self, tensor) -> np.ndarray:
        from gguf.quants import dequantize

        return np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32).reshape(self.shape(tensor))


def _find_files(path: Path, mmproj: Path | None) -> tuple[Path, Path | None]:
    """(text model, mmproj or None) from a .gguf path or a folder, by llama.cpp's naming (``mmproj*.gguf``)."""
    def is_mmproj(p: Path) -> bool:
        return p.name.lower().startswith("mmproj")

    if path.is_dir():
        found = sorted(path.glob("*.gguf"))
        texts = [p for p in found if not is_mmproj(p)]
        projs = [p for p in found if is_mmproj(p)]
        if not texts:
            if projs:
                raise GGUFMissingTextModelError(
                    f"{path}: holds a vision projector ({projs[0].name}) but no text model GGUF beside it")
            raise GGUFError(f"{path}: no .gguf file in this folder")
        if len(texts) > 1:
            raise GGUFError(f"{path}: several text model GGUFs ({', '.join(p.name for p in texts)}); pass one file")
        text = texts[0]
    elif path.is_file():
        text = path
        projs = [p for p in sorted(path.parent.glob("*.gguf")) if is_mmproj(p) and p != path]
        if is_mmproj(path):
            raise GGUFMissingTextModelError(
                f"{path}: is a vision projector (mmproj) without its text model; pass the text model GGUF "
                "or the folder holding both")
    else:
        raise ModelLoadError(f"model file not found: {path}")
    if mmproj is None and projs:
        if len(projs) > 1:
            raise GGUFError(f"{text.parent}: several mmproj files ({', '.join(p.name for p in projs)}); pass mmproj=")
        mmproj = projs[0]
    return text, mmproj


def cache_root() -> Path:
    """``$SMOLCHAT_GGUF_CACHE``, else ``<user cache dir>/Smolchat/gguf`` (``~/.cache/Smolchat/gguf`` on Linux)."""
    override = os.environ.get(CACHE_ENV, "").strip()
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("Smolchat", appauthor=False)) / "gguf"


class GGUFSource(ModelSource):
    """A GGUF checkpoint: a llama text model, or a SmolVLM pair (text model + idefics3 ``mmproj``).

    ``path`` is a ``.gguf`` file or a folder holding one text model GGUF; an ``mmproj*.gguf`` beside
    it (or given as ``mmproj``) makes the pair an ``idefics3`` checkpoint for ``SmolVlmModel``.
    Tokenizer files beside the GGUF (tokenizer.json ...) are used instead of the derived ones.

    Raises (all :class:`~engine.api.errors.ModelLoadError`, one line naming the file):
        GGUFFormatError: not a GGUF file, or truncated.
        GGUFArchitectureError: the text model is not ``llama``, the projector not clip/idefics3.
        GGUFTensorTypeError: a tensor type outside :data:`SUPPORTED_TYPES` (tensor and type named).
        GGUFMissingTextModelError: only an mmproj was given.
        GGUFError: an unknown tensor name, several candidate files, or metadata the conversion
            cannot use (:class:`engine.gguf_files.GGUFMetadataError`).
    """

    def __init__(self, path: str | Path, mmproj: str | Path | None = None):
        text_path, mmproj_path = _find_files(Path(path).expanduser(), Path(mmproj).expanduser() if mmproj else None)
        self.text = _GGUFFile(text_path)
        if self.text.is_mmproj:
            raise GGUFMissingTextModelError(f"{text_path}: is a vision projector (mmproj) without its text model")
        self.mmproj = _GGUFFile(mmproj_path) if mmproj_path else None
        supported = "supported: llama, and clip mmproj files of SmolVLM beside a llama text model"
        if self.text.architecture != "llama":
            raise GGUFArchitectureError(
                f"{text_path}: architecture {self.text.architecture!r} is not supported ({supported})")
        if self.mmproj is not None and not self.mmproj.is_mmproj:
            raise GGUFArchitectureError(
                f"{mmproj_path}: expected a clip mmproj file, found architecture {self.mmproj.architecture!r} "
                f"({supported})")
        if self.mmproj is not None and (projector := self.mmproj.get("clip.projector_type")) != "idefics3":
            raise GGUFArchitectureError(
                f"{mmproj_path}: projector type {projector!r} is not supported (supported: idefics3, SmolVLM)")
        self._prefix = "model.text_model." if self.mmproj else "model."
        self._names: list[tuple[_GGUFFile, Any, str]] = []
        for file in (self.text, self.mmproj):
            if file is None:
                continue
            file.check_types()
            for t in file.reader.tensors:
                hf = clip_hf_name(t.name) if file.is_mmproj else llama_hf_name(t.name, self._prefix)
                if hf is None:
                    raise GGUFError(f"{file.path}: tensor {t.name!r} has no place in a "
                                    f"{'SmolVLM vision tower' if file.is_mmproj else 'llama model'}")
                self._names.append((file, t, hf))
        self._folder = self._derive_folder()

    # -- ModelSource ------------------------------------------------------------------------------

    @property
    def folder(self) -> Path:
        """Cached folder of derived config/tokenizer files (see the module docstring)."""
        return self._folder

    def tensor_names(self) -> list[str]:
        return [hf for _, _, hf in self._names]

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """HF name -> shape from the GGUF headers, without reading tensor data."""
        return {hf: file.shape(t) for file, t, hf in self._names}

    def tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield ``(hf_name, float32 tensor)`` on the CPU, dequantized one tensor at a time.

        Q/K weights of the llama text model get their rows put back in Hugging Face order
        (:func:`unpermute_rows`); everything else keeps the GGUF layout, which is already HF's.
        """
        from engine.cancellation import load_cancel_point

        heads = int(self.text.get("llama.attention.head_count"))
        kv_heads = int(self.text.get("llama.attention.head_count_kv", heads))
        for file, t, hf in self._names:
            load_cancel_point()  # dequantizing a 2B model's file takes seconds: Stop is heard per tensor
            w = file.dequantize(t)
            if not file.is_mmproj and hf.endswith(("self_attn.q_proj.weight", "self_attn.q_proj.bias")):
                w = unpermute_rows(w, heads)
            elif not file.is_mmproj and hf.endswith(("self_attn.k_proj.weight", "self_attn.k_proj.bias")):
                w = unpermute_rows(w, kv_heads)
            if not (w.flags.writeable and w.flags.c_contiguous):  # F32 data is a view of the read-only map
                w = w.copy()
            yield hf, torch.from_numpy(w)

    # -- derived folder ---------------------------------------------------------------------------

    def _beside(self, names: tuple[str, ...]) -> list[Path]:
        return [p for n in names if (p := self.text.path.parent / n).is_file()]

    def _derive_folder(self) -> Path:
        """Write the derived files once into the cache, keyed by the inputs' paths, sizes and mtimes."""
        inputs = [self.text.path] + ([self.mmproj.path] if self.mmproj else [])
        inputs += self._beside(TOKENIZER_FILES + PROCESSOR_FILES)
        stamp = [FORMAT_VERSION] + [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in inputs]
        key = hashlib.sha256(json.dumps(stamp).encode()).hexdigest()[:20]
        root = cache_root()
        # <key>/<file stem>: the folder's name is the model's name (ModelMetadata.name, `engine info`).
        folder = root / key / self.text.path.stem
        if (folder / "config.json").is_file():
            return folder
        files = self._derived_files()  # before touching the disk: a metadata error leaves nothing behind
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
        try:
            (tmp / folder.name).mkdir()
            for name, text in files.items():
                (tmp / folder.name / name).write_text(text, encoding="utf-8")
            for src in self._beside(TOKENIZER_FILES + PROCESSOR_FILES):
                shutil.copyfile(src, tmp / folder.name / src.name)
            try:
                tmp.rename(folder.parent)  # atomic: readers never see a half-written folder
            except OSError:
                if not (folder / "config.json").is_file():  # not just another process winning the race
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return folder

    def _derived_files(self) -> dict[str, str]:
        where = str(self.text.path)
        meta = self.text.metadata()
        names = {t.name for t in self.text.reader.tensors}
        dumps = gguf_files.dumps
        try:
            if self.mmproj is None:
                config = gguf_files.llama_config(meta, names, where)
            else:
                config = gguf_files.idefics3_config(meta, names, self.mmproj.metadata(),
                                                    f"{where} + {self.mmproj.path.name}")
            files = {"config.json": dumps(config), "generation_config.json": dumps(gguf_files.generation_config(meta))}
            if self.mmproj is not None and not self._beside(PROCESSOR_FILES):
                pre, proc = gguf_files.image_processor_configs(self.mmproj.metadata())
                files |= {"preprocessor_config.json": dumps(pre), "processor_config.json": dumps(proc)}
            if not self._beside(("tokenizer.json",)):
                files["tokenizer.json"] = gguf_files.build_tokenizer(meta, where).to_str(pretty=True)
                files["tokenizer_config.json"] = dumps(gguf_files.tokenizer_config(meta))
                files["special_tokens_map.json"] = dumps(gguf_files.special_tokens(meta))
            elif (template := self._template_beside(meta)) is not None:
                files["chat_template.json"] = dumps({"chat_template": template})
        except (KeyError, ValueError, TypeError, IndexError) as exc:
            raise GGUFError(f"{where}: unusable metadata ({_one_line(exc)})") from exc
        return files

    def _template_beside(self, meta: dict) -> str | None:
        """The chat template to add when tokenizer files sit beside the GGUF, or None if they hold one
        where engine.tokenizer looks (chat_template.json, tokenizer_config.json). A chat_template.jinja
        beside wins over the GGUF's own template."""
        folder = self.text.path.parent
        if (folder / "chat_template.json").is_file():
            return None
        try:
            cfg = folder / "tokenizer_config.json"
            if cfg.is_file() and "chat_template" in json.loads(cfg.read_text(encoding="utf-8")):
                return None
            jinja = folder / "chat_template.jinja"
            if jinja.is_file():
                return jinja.read_text(encoding="utf-8")
        except (OSError, ValueError) as exc:
            raise GGUFError(f"{folder}: cannot read the tokenizer files beside the GGUF ({_one_line(exc)})") from exc
        return meta.get("tokenizer.chat_template")
