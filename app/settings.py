"""User settings (QSettings, an ini file in the app data folder) and the models the user has.

Sampling values the user never changed are not stored: they follow the loaded model's
generation_config.json, then the engine's defaults.

Every value is checked where it enters (the settings file, a chat's settings in the database, the
settings dialog, ``SMOLCHAT_THEME``) by the same rules as :class:`~engine.api.GenerationParams`: an invalid
value is left out (the default applies) and :attr:`AppSettings.problems` says so in one line, so a bad
value can never make every later message fail. What could not be read is not rewritten by loading.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path

from PySide6.QtCore import QSettings

from app import safe_files
from app.paths import data_dir
from app.video_attachments import (
    DEFAULT_FPS,
    DEFAULT_MAX_FRAMES,
    FPS_RANGE,
    MAX_FRAMES_LIMIT,
    clamp_fps,
    clamp_max_frames,
)
from engine.api import DETAILS, GenerationParams
from engine.api.events import MAX_CONTEXT, MIN_CONTEXT

# The sampling values the settings dialog edits; their defaults are the engine's own.
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "repetition_penalty", "max_new_tokens")
ENGINE_DEFAULTS = {f.name: f.default for f in fields(GenerationParams) if f.name in SAMPLING_KEYS}
_DETAIL_LABELS = {"auto": "Automatic (full on a GPU or a server, balanced on a CPU)", "full": "Reference (full tiles)",
                  "balanced": "Balanced", "fast": "Fast (one tile)"}
#: Settings' image detail until the user picks one: full on a GPU or a server, balanced on a CPU.
DEFAULT_IMAGE_DETAIL = "auto"
#: The composer's per-message choice (short: it sits in the status bar beside the token count).
MESSAGE_DETAILS = {"auto": "Auto detail", "full": "Full detail", "balanced": "Balanced detail", "fast": "Fast detail"}
IMAGE_DETAILS = {detail: _DETAIL_LABELS.get(detail, detail.capitalize()) for detail in DETAILS}
DEVICES = ("auto", "cuda", "mps", "cpu")
DTYPES = ("auto", "float32", "bfloat16", "float16")
CACHE_KINDS = ("paged", "contiguous")  # the engine's default first
WEIGHTS = ("auto", "int8", "int4")  # engine.registry.WEIGHTS; applied on the CPU and CUDA, ignored on MPS
THEMES = ("system", "light", "dark")
# AppSettings fields that need the model loaded again when they change.
ENGINE_KEYS = ("device", "dtype", "cache_kind", "context_size", "weights")
#: How Settings names the choices of its lists.
LABELS = {"auto": "Automatic", "cuda": "CUDA (NVIDIA)", "mps": "MPS (Apple)", "cpu": "CPU",
          "contiguous": "Contiguous", "paged": "Paged", "system": "Follow the system", "light": "Light",
          "dark": "Dark"}
_ENGINE_NAMES = {"device": "Device", "dtype": "Data type", "cache_kind": "KV cache kind",
                 "context_size": "Context size", "weights": "Weights"}


def describe_engine(values: dict, keys) -> str:
    """``"Device: CUDA (NVIDIA), Data type: bfloat16"``: ``values``' engine settings named by ``keys``,
    as Settings shows them."""
    def shown(key: str, value) -> str:
        if key == "context_size":
            return "the model's" if not value else f"{value:,} tokens"
        if key == "weights" and value == "auto":
            return "same as the data type"
        return LABELS.get(value, str(value))
    return ", ".join(f"{_ENGINE_NAMES[k]}: {shown(k, values[k])}" for k in ENGINE_KEYS if k in keys)


def engine_hint(settings: AppSettings) -> str:
    """For a failed load: the engine settings chosen in Settings that may be the cause ("" when all are
    automatic), where to change them (trial 60: a device this computer lacks, saved, failed every start)."""
    chosen = [k for k in ("device", "dtype", "weights") if getattr(settings, k) != "auto"]
    if not chosen:
        return ""
    return (f"\nSettings ▸ Engine has {describe_engine({k: getattr(settings, k) for k in chosen}, chosen)}: "
            "Restore Defaults there (or Automatic) uses what this computer has.")


MAX_SEED = 2**64 - 1
SEED_RULE = f"a whole number from 0 to 2^64 − 1 ({MAX_SEED:,}), or empty for a random seed"
INT_KEYS = ("top_k", "max_new_tokens")
# What the settings dialog's fields can hold (Qt spin boxes are 32-bit); larger stored values are refused.
LIMITS = {"temperature": (0.0, 2.0), "top_p": (0.01, 1.0), "top_k": (0, 1000), "repetition_penalty": (0.5, 2.0),
          "max_new_tokens": (1, 32768)}
CONTEXT_RULE = f"a whole number of tokens from {MIN_CONTEXT} to {MAX_CONTEXT}, or 0 for the model's own"


def sampling_value(key: str, raw):
    """``raw`` (a number or its text) as a valid value of sampling setting ``key``.

    Raises ValueError with a one-line reason (not a number, not finite, out of range)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise ValueError(f"{key} must be a number, got {raw!r}")
    try:
        value = int(str(raw).strip()) if key in INT_KEYS else float(str(raw).strip())
    except ValueError:
        kind = "a whole number" if key in INT_KEYS else "a number"
        raise ValueError(f"{key} must be {kind}, got {raw!r}") from None
    GenerationParams(**{key: value})  # the engine's own rule: raises ValueError naming the key
    low, high = LIMITS[key]
    if not low <= value <= high:
        raise ValueError(f"{key} must be from {low} to {high}, got {value}")
    return value


def parse_seed(raw) -> int | None:
    """A seed from text or a number: None for empty (random); ValueError naming the rule otherwise."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    text = str(raw).strip()
    if isinstance(raw, bool) or not (text.isascii() and text.isdigit()) or int(text) > MAX_SEED:  # no sign, no "²"
        raise ValueError(f"the seed must be {SEED_RULE}, got {text[:40]!r}")
    return int(text)


def parse_context_size(raw) -> int:
    """A context size from text or a number: 0 (the model's own) or ``MIN_CONTEXT``..``MAX_CONTEXT``
    tokens. Raises ValueError naming the rule: a context of a few tokens holds no question at all."""
    text = str(raw if raw is not None else 0).strip() or "0"
    if isinstance(raw, bool) or not (text.isascii() and text.isdigit()) or (
            int(text) and not MIN_CONTEXT <= int(text) <= MAX_CONTEXT):
        raise ValueError(f"the context size must be {CONTEXT_RULE}, got {text[:40]!r}")
    return int(text)


def chat_values(saved, where: str) -> tuple[dict, list[str]]:
    """The valid per-chat settings in ``saved`` (system_prompt, overrides, seed, image_detail) and
    one line per value left out. ``where`` names the source in those lines."""
    out, problems = {}, []
    if not isinstance(saved, dict):
        return out, [f"{where}: ignored its settings (not a JSON object)"] if saved not in (None, "") else []
    if "system_prompt" in saved:
        if isinstance(saved["system_prompt"], str):
            out["system_prompt"] = saved["system_prompt"]
        else:
            problems.append(f"{where}: ignored system_prompt (not text)")
    if "overrides" in saved:
        overrides = saved["overrides"] if isinstance(saved["overrides"], dict) else {}
        if not isinstance(saved["overrides"], dict):
            problems.append(f"{where}: ignored the sampling values (not a JSON object)")
        out["overrides"] = {}
        for key, raw in overrides.items():
            if key not in SAMPLING_KEYS:
                continue
            try:
                out["overrides"][key] = sampling_value(key, raw)
            except ValueError as exc:
                problems.append(f"{where}: not used: {exc}")
    if "seed" in saved:
        try:
            out["seed"] = parse_seed(saved["seed"])
        except ValueError as exc:
            problems.append(f"{where}: not used: {exc}")
    if "image_detail" in saved:
        if isinstance(saved["image_detail"], str) and saved["image_detail"] in IMAGE_DETAILS:
            out["image_detail"] = saved["image_detail"]
        else:
            problems.append(f"{where}: ignored image_detail {str(saved['image_detail'])[:40]!r} "
                            f"(one of {', '.join(IMAGE_DETAILS)})")
    return out, problems


THEME_ENV = "SMOLCHAT_THEME"
WEIGHTS_ENV = "SMOLCHAT_WEIGHTS"  # engine.registry's (which imports torch): the command line's default too


def weights_from_environment() -> tuple[str | None, str]:
    """``$SMOLCHAT_WEIGHTS`` when it is one of :data:`WEIGHTS` (any case; else None) and a line saying
    it was ignored ("" when fine). It applies where Settings ▸ Weights is "Same as the data type"."""
    value = os.environ.get(WEIGHTS_ENV, "").strip()
    if not value:
        return None, ""
    if value.lower() in WEIGHTS:
        return value.lower(), ""
    return None, (f"${WEIGHTS_ENV}: ignored {value[:40]!r} (one of {', '.join(WEIGHTS)}); the weights from "
                  "Settings apply.")


def theme_from_environment() -> tuple[str | None, str]:
    """``$SMOLCHAT_THEME`` when it is a theme (else None) and a line saying it was ignored ("" when fine)."""
    value = os.environ.get(THEME_ENV, "").strip()
    if not value:
        return None, ""
    if value in THEMES:
        return value, ""
    return None, f"${THEME_ENV}: ignored {value[:40]!r} (one of {', '.join(THEMES)}); the theme from Settings applies."


def open_settings() -> QSettings:
    """Smolchat's QSettings: always an ini file beside the conversations (portable, testable); an
    empty one of this run's own if that file holds values unsafe to read and could not be cleaned
    (:func:`set_aside_unreadable_settings`)."""
    path = data_dir() / "settings.ini"
    return QSettings(str(_stand_ins.get(path, path)), QSettings.Format.IniFormat)


def generation_defaults(folder: str | Path | None) -> dict:
    """Sampling values from ``folder/generation_config.json`` (only those it sets)."""
    if not folder:
        return {}
    try:
        data = json.loads((Path(folder) / "generation_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    out = {}
    for key in SAMPLING_KEYS:
        value = data.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = type(ENGINE_DEFAULTS[key])(value)
    if data.get("do_sample") is False:
        out["temperature"] = 0.0  # transformers: do_sample=False is greedy whatever the temperature
    return out


@dataclass
class AppSettings:
    """Everything the settings dialog edits. ``overrides`` holds only sampling values the user set."""

    system_prompt: str = ""
    overrides: dict = field(default_factory=dict)
    seed: int | None = None
    image_detail: str = field(default_factory=lambda: DEFAULT_IMAGE_DETAIL)
    device: str = "auto"
    dtype: str = "auto"
    cache_kind: str = "paged"
    weights: str = "auto"
    context_size: int = 0  # 0: the model's own context length
    theme: str = "system"
    video_max_frames: int = DEFAULT_MAX_FRAMES  # at most this many frames of a video (1..64)
    video_fps: float = DEFAULT_FPS  # frames sampled per second of video
    # Values that were invalid where they came from and were left out, one line each (not saved).
    problems: list[str] = field(default_factory=list, compare=False)

    def sampling(self, model_defaults: dict | None = None) -> dict:
        """Effective sampling values: user overrides, else the model's, else the engine's."""
        values = dict(ENGINE_DEFAULTS)
        values.update(model_defaults or {})
        values.update({k: v for k, v in self.overrides.items() if k in SAMPLING_KEYS})
        return values

    def generation_params(self, model_defaults: dict | None = None) -> dict:
        """Keyword arguments for ``engine.api.events.GenerationParams`` plus ``system_prompt``."""
        params = self.sampling(model_defaults)
        params["seed"] = self.seed
        params["image_detail"] = self.image_detail
        params["system_prompt"] = self.system_prompt
        params["video_max_frames"] = clamp_max_frames(self.video_max_frames)
        params["video_fps"] = clamp_fps(self.video_fps)
        return params

    def load_options(self) -> dict:
        """What the backend needs to load a model besides path, device and dtype."""
        options = {}
        if self.cache_kind != CACHE_KINDS[0]:
            options["cache_kind"] = self.cache_kind
        if self.context_size:
            options["context_size"] = self.context_size
        if self.weights != WEIGHTS[0]:
            options["weights"] = self.weights
        elif os.environ.get(WEIGHTS_ENV, "").strip():
            # Said here, not left to the engine: a bad value ignored (with the start's notice) rather
            # than failing every load (trial 59), a good one as Settings would give it.
            options["weights"] = weights_from_environment()[0] or WEIGHTS[0]
        return options

    def device_arg(self) -> str | None:
        return None if self.device == "auto" else self.device

    def dtype_arg(self) -> str | None:
        return None if self.dtype == "auto" else self.dtype


_set_aside: dict[Path, str] = {}  # settings file -> what set_aside_unreadable_settings said (once per run)
_stand_ins: dict[Path, Path] = {}  # settings file that must not be read -> the empty one read instead


def serialized_values(text: str) -> tuple[list[str], str | None]:
    """The keys (``section/key``) of the values in ini ``text`` that QSettings would deserialize as
    objects (``@Variant(...)``, ``@DateTime(...)``: a QDataStream, in which PySide unpickles Python
    objects), and ``text`` without their lines; None instead of the text when that is not enough to
    make it safe (the whole file must then be set aside).

    A value is decoded as QSettings decodes it (``QSettingsPrivate::iniUnescapedStringList``: quotes,
    C escapes, ``\\x`` and octal escapes of any length, a backslash before a line break continuing
    the line), so an escaped ``@`` is found too; any such marker anywhere in the value counts (a
    list's later item included). A quoted value may go on over several lines, which a line cannot
    tell: the kept text is checked once more as a whole, decoded, and any marker left means None."""
    lines, keep, keys, section = text.splitlines(keepends=True), [], [], ""
    i = 0
    while i < len(lines):
        logical = [lines[i]]
        while logical[-1].rstrip("\r\n").endswith("\\") and i + 1 < len(lines):  # continued
            i += 1
            logical.append(lines[i])
        i += 1
        whole = "".join(logical)
        stripped = whole.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            section = stripped[1:-1]
        if "=" in whole:  # (a commented-out line too: taking it out changes nothing)
            key, value = whole.split("=", 1)
            if _holds_object(_ini_unescape(value)):
                keys.append(f"{section}/{key.strip()}" if section and section != "General" else key.strip())
                continue
        keep.append(whole)
    kept = "".join(keep)
    if _holds_object(_ini_unescape(kept)):  # inside a value spread over lines (a quoted line break)
        return keys or ["a value over several lines"], None
    return keys, kept


def _holds_object(decoded: str) -> bool:
    return "@Variant(" in decoded or "@DateTime(" in decoded


_INI_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", '"': '"',
                "?": "?", "'": "'", "\\": "\\"}


def _ini_unescape(raw: str) -> str:
    """An ini value's text as QSettings reads it, quotes dropped (enough to find what it starts with)."""
    out, i = [], 0
    while i < len(raw):
        ch = raw[i]
        i += 1
        if ch == '"':
            continue
        if ch != "\\" or i >= len(raw):
            out.append(ch)
            continue
        ch = raw[i]
        i += 1
        if ch in _INI_ESCAPES:
            out.append(_INI_ESCAPES[ch])
        elif ch == "x" or ch in "01234567":
            base, digits = (16, "0123456789abcdefABCDEF") if ch == "x" else (8, "01234567")
            value = 0 if ch == "x" else int(ch)
            while i < len(raw) and raw[i] in digits:
                value = (value * base + int(raw[i], base)) & 0xFFFF
                i += 1
            out.append(chr(value))
        # else: a line break (the line goes on) or another character, which QSettings skips
    return "".join(out)


def set_aside_unreadable_settings(path: str | Path | None = None) -> str:
    """Make the settings file safe for QSettings to read, before it does, and return a line that
    says what was done ("" when the file is fine or absent); later calls in the same run return the
    same line.

    A file that is not text (binary garbage, another program's file) is moved to
    ``settings.ini.unreadable``: QSettings would parse the garbage and write its reading back over
    the file. Values QSettings would deserialize as objects (:func:`serialized_values`) are taken out
    of the file (the file as it was is kept as ``settings.ini.unreadable``): PySide unpickles them,
    so a crafted one runs code and a broken one stops the start."""
    path = Path(path) if path else data_dir() / "settings.ini"
    if path not in _set_aside:
        _set_aside[path] = _set_aside_once(path)
    return _set_aside[path]


def _set_aside_once(path: Path) -> str:
    aside = path.with_name(path.name + ".unreadable")
    try:
        data = path.read_bytes()
        text = data.decode("utf-8")
        if b"\0" in data:
            raise ValueError("NUL bytes")
    except (OSError, ValueError):
        if not path.is_file():
            return ""  # absent (or a folder: QSettings then reads nothing and reports it)
        try:
            path.replace(aside)
        except OSError as exc:
            return f"Settings file {path} is not text and could not be set aside ({exc.strerror}); the defaults apply."
        return f"Settings file {path} is not text: it was kept as {aside.name} and the defaults apply."
    keys, kept = serialized_values(text)
    if not keys:
        return ""
    try:
        if kept is None:  # no line-by-line cleaning is safe: the whole file goes aside
            path.replace(aside)
            return (f"Settings file {path} holds stored objects ({', '.join(keys)}), which Smolchat never writes: "
                    f"it was kept as {aside.name} and the defaults apply.")
        shutil.copyfile(path, aside)
        safe_files.write_text(path, kept)
    except OSError as exc:
        _stand_ins[path] = Path(tempfile.mkdtemp(prefix="smolchat-settings-")) / path.name  # never read it
        return (f"Settings file {path} holds stored objects ({', '.join(keys)}), which Smolchat never writes, "
                f"and could not be cleaned ({exc.strerror}): the defaults apply, and changes are not saved.")
    return (f"Settings file {path}: ignored {', '.join(keys)} (stored objects, which Smolchat never writes); "
            f"the file as it was is kept as {aside.name}.")


def load_settings(qs: QSettings | None = None) -> AppSettings:
    """The settings in the ini file; an invalid value is left out (its default applies) and named in
    :attr:`AppSettings.problems` (one line for the file). Never raises for what the file holds."""
    qs = qs or open_settings()
    s = AppSettings()
    ignored: list[str] = []
    if qs.status() != QSettings.Status.NoError:
        # In the user's words, not Qt's status name ("AccessError": a folder in the file's place, trial 79).
        why = ("it cannot be opened (a folder in its place, or no permission to read it): the defaults apply, and "
               "changes made now may not be kept" if qs.status() == QSettings.Status.AccessError else
               "it is not in the format of a settings file: the defaults apply")
        s.problems.append(f"Settings file {qs.fileName()} could not be read: {why}.")
    prompt = qs.value("chat/system_prompt", "")
    if isinstance(prompt, list):  # QSettings reads an unquoted "a, b" as a list: keep the user's words
        prompt = ", ".join(map(str, prompt))
    s.system_prompt = prompt if isinstance(prompt, str) else ""
    for key in SAMPLING_KEYS:
        raw = qs.value(f"sampling/{key}")
        if raw not in (None, ""):
            try:
                s.overrides[key] = sampling_value(key, raw)
            except ValueError as exc:
                ignored.append(str(exc))
    try:
        s.seed = parse_seed(qs.value("sampling/seed"))
    except ValueError as exc:
        ignored.append(str(exc))
    s.image_detail = _choice(qs, "chat/image_detail", tuple(IMAGE_DETAILS), DEFAULT_IMAGE_DETAIL, ignored)
    s.device = _choice(qs, "engine/device", DEVICES, "auto", ignored)
    s.dtype = _choice(qs, "engine/dtype", DTYPES, "auto", ignored)
    s.cache_kind = _choice(qs, "engine/cache_kind", CACHE_KINDS, CACHE_KINDS[0], ignored)
    s.weights = _choice(qs, "engine/weights", WEIGHTS, WEIGHTS[0], ignored)
    raw = qs.value("engine/context_size", 0)
    try:
        s.context_size = parse_context_size(raw)
    except ValueError:
        s.context_size = 0
        ignored.append(f"context_size {str(raw)[:40]!r} ({CONTEXT_RULE})")
    s.theme = _choice(qs, "ui/theme", THEMES, "system", ignored)
    # A value out of range or no number is said and replaced by the default, as every other key's.
    s.video_max_frames = _ranged(qs, "chat/video_max_frames", clamp_max_frames, DEFAULT_MAX_FRAMES,
                                 f"a whole number from 1 to {MAX_FRAMES_LIMIT}", ignored)
    s.video_fps = _ranged(qs, "chat/video_fps", clamp_fps, DEFAULT_FPS,
                          f"frames per second from {FPS_RANGE[0]:g} to {FPS_RANGE[1]:g}", ignored)
    if ignored:
        s.problems.append(f"Settings file {qs.fileName()}: values not used (their defaults apply instead): "
                          f"{'; '.join(ignored)}.")
    return s


#: Where an unreadable "Your models" list is kept (trial 62: it emptied the list without a word, and the
#: next model added wrote over it).
UNREADABLE_MODELS_KEY = "models/known_unreadable"


def unreadable_models(qs: QSettings | None = None) -> str:
    """One line when the saved "Your models" list cannot be read, or holds entries that cannot ("" for
    nothing), its text copied to :data:`UNREADABLE_MODELS_KEY` first (a copy already there is kept).
    Said once, at start-up: :func:`load_settings` runs at each chat opened."""
    qs = qs or open_settings()
    what = _unreadable_models(qs)
    return (f"Settings file {qs.fileName()}: {what}; its saved text is kept in the file under "
            f"{UNREADABLE_MODELS_KEY}.") if what else ""


def _unreadable_models(qs: QSettings) -> str:
    raw = _joined(qs.value("models/known"))
    if raw in (None, "", "[]"):
        return ""
    try:
        models = json.loads(raw)
    except ValueError:
        models = None
    if isinstance(models, list):
        bad = sum(1 for m in models if not (isinstance(m, dict) and isinstance(m.get("path"), str) and m["path"]))
        if not bad:
            return ""
        what = (f"{bad} entr{'y' if bad == 1 else 'ies'} of Your models could not be read and "
                f"{'is' if bad == 1 else 'are'} left out of the list")
    else:
        what = "the list of Your models could not be read: it shows only the models added from now on"
    if qs.value(UNREADABLE_MODELS_KEY) in (None, ""):
        qs.setValue(UNREADABLE_MODELS_KEY, str(raw))
        qs.sync()
    return what


def _ranged(qs: QSettings, key: str, clamp, default, rule: str, ignored: list[str]):
    """The number stored under ``key``, where ``clamp`` keeps it as it is (in range); else ``default``,
    with why in ``ignored`` (absent or empty: the default without a word)."""
    raw = qs.value(key)
    if raw in (None, ""):
        return default
    value = clamp(raw)
    try:
        kept = float(str(raw).strip()) == value
    except ValueError:
        kept = False
    if kept:
        return value
    ignored.append(f"{key.split('/')[-1]} {str(raw)[:40]!r} ({rule})")
    return default


def save_settings(s: AppSettings, qs: QSettings | None = None) -> None:
    qs = qs or open_settings()
    qs.setValue("chat/system_prompt", s.system_prompt)
    for key in SAMPLING_KEYS:
        if key in s.overrides:
            qs.setValue(f"sampling/{key}", s.overrides[key])
        else:
            qs.remove(f"sampling/{key}")
    qs.setValue("sampling/seed", "" if s.seed is None else str(s.seed))  # text: Qt ints are 64-bit signed
    qs.setValue("chat/image_detail", s.image_detail)
    qs.setValue("engine/device", s.device)
    qs.setValue("engine/dtype", s.dtype)
    qs.setValue("engine/cache_kind", s.cache_kind)
    qs.setValue("engine/weights", s.weights)
    qs.setValue("engine/context_size", s.context_size)
    qs.setValue("ui/theme", s.theme)
    qs.setValue("chat/video_max_frames", clamp_max_frames(s.video_max_frames))
    qs.setValue("chat/video_fps", clamp_fps(s.video_fps))
    qs.sync()


def _choice(qs: QSettings, key: str, allowed: tuple[str, ...], default: str, ignored: list[str]) -> str:
    """``key``'s value if it is one of ``allowed``; else ``default`` (a set but invalid value is noted)."""
    value = qs.value(key)
    if isinstance(value, str) and value in allowed:
        return value
    if value not in (None, ""):
        ignored.append(f"{key.split('/')[-1]} {str(value)[:40]!r} (one of {', '.join(allowed)})")
    return default


# -- the user's models ----------------------------------------------------------------------------
def _joined(value) -> str:
    """A stored text as written: QSettings reads an unquoted value holding commas (a JSON list edited
    by hand) as a list of its parts."""
    return ", ".join(map(str, value)) if isinstance(value, list) else "" if value is None else str(value)


def known_models(qs: QSettings | None = None) -> list[dict]:
    """Models the user downloaded or added: ``[{"name", "path", "repo_id"}]``, in the order added."""
    qs = qs or open_settings()
    try:
        models = json.loads(_joined(qs.value("models/known", "[]")) or "[]")
    except ValueError:
        return []
    if not isinstance(models, list):
        return []
    return [{"name": str(m.get("name") or Path(m["path"]).name), "path": m["path"], "repo_id": str(m.get("repo_id") or "")}
            for m in models if isinstance(m, dict) and isinstance(m.get("path"), str) and m["path"]]


def add_known_model(path: str, name: str = "", repo_id: str = "", qs: QSettings | None = None) -> None:
    qs = qs or open_settings()
    models = [m for m in known_models(qs) if m["path"] != path]
    models.append({"name": name or Path(path).name, "path": path, "repo_id": repo_id})
    qs.setValue("models/known", json.dumps(models))
    qs.sync()


def remove_known_model(path: str, qs: QSettings | None = None) -> None:
    qs = qs or open_settings()
    qs.setValue("models/known", json.dumps([m for m in known_models(qs) if m["path"] != path]))
    qs.sync()


def last_model(qs: QSettings | None = None) -> str:
    value = (qs or open_settings()).value("models/last", "")
    return value if isinstance(value, str) else ""  # a list (commas in an unquoted value) is not a path


def set_last_model(path: str, qs: QSettings | None = None) -> None:
    qs = qs or open_settings()
    qs.setValue("models/last", path)
    qs.sync()
