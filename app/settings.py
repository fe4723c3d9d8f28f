"""User settings (QSettings, an ini file in the app data folder) and the models the user has.

Sampling values the user never changed are not stored: they follow the loaded model's
generation_config.json, then the engine's defaults.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path

from PySide6.QtCore import QSettings

from app.paths import data_dir
from app.video_attachments import DEFAULT_FPS, DEFAULT_MAX_FRAMES, clamp_fps, clamp_max_frames
from engine.api import DETAILS, GenerationParams

# The sampling values the settings dialog edits; their defaults are the engine's own.
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "repetition_penalty", "max_new_tokens")
ENGINE_DEFAULTS = {f.name: f.default for f in fields(GenerationParams) if f.name in SAMPLING_KEYS}
_DETAIL_LABELS = {"full": "Reference (full tiles)", "balanced": "Balanced", "fast": "Fast (one tile)"}
IMAGE_DETAILS = {detail: _DETAIL_LABELS.get(detail, detail.capitalize()) for detail in DETAILS}
DEVICES = ("auto", "cuda", "mps", "cpu")
DTYPES = ("auto", "float32", "bfloat16", "float16")
CACHE_KINDS = ("paged", "contiguous")  # the engine's default first
WEIGHTS = ("auto", "int8")  # engine.registry.WEIGHTS; int8 applies on the CPU only
THEMES = ("system", "light", "dark")
# AppSettings fields that need the model loaded again when they change.
ENGINE_KEYS = ("device", "dtype", "cache_kind", "context_size", "weights")


def open_settings() -> QSettings:
    """Smolchat's QSettings: always an ini file beside the conversations (portable, testable)."""
    return QSettings(str(data_dir() / "settings.ini"), QSettings.Format.IniFormat)


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
    image_detail: str = "full"
    device: str = "auto"
    dtype: str = "auto"
    cache_kind: str = "paged"
    weights: str = "auto"
    context_size: int = 0  # 0: the model's own context length
    theme: str = "system"
    video_max_frames: int = DEFAULT_MAX_FRAMES  # at most this many frames of a video (1..64)
    video_fps: float = DEFAULT_FPS  # frames sampled per second of video

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
        return options

    def device_arg(self) -> str | None:
        return None if self.device == "auto" else self.device

    def dtype_arg(self) -> str | None:
        return None if self.dtype == "auto" else self.dtype


def load_settings(qs: QSettings | None = None) -> AppSettings:
    qs = qs or open_settings()
    s = AppSettings()
    s.system_prompt = str(qs.value("chat/system_prompt", "") or "")
    for key in SAMPLING_KEYS:
        raw = qs.value(f"sampling/{key}")
        if raw not in (None, ""):
            try:
                s.overrides[key] = type(ENGINE_DEFAULTS[key])(raw)
            except (TypeError, ValueError):
                pass
    seed = qs.value("sampling/seed")
    s.seed = int(seed) if seed not in (None, "") else None
    s.image_detail = _choice(qs.value("chat/image_detail"), tuple(IMAGE_DETAILS), "full")
    s.device = _choice(qs.value("engine/device"), DEVICES, "auto")
    s.dtype = _choice(qs.value("engine/dtype"), DTYPES, "auto")
    s.cache_kind = _choice(qs.value("engine/cache_kind"), CACHE_KINDS, CACHE_KINDS[0])
    s.weights = _choice(qs.value("engine/weights"), WEIGHTS, WEIGHTS[0])
    try:
        s.context_size = max(0, int(qs.value("engine/context_size", 0) or 0))
    except (TypeError, ValueError):
        s.context_size = 0
    s.theme = _choice(qs.value("ui/theme"), THEMES, "system")
    s.video_max_frames = clamp_max_frames(qs.value("chat/video_max_frames", DEFAULT_MAX_FRAMES))
    s.video_fps = clamp_fps(qs.value("chat/video_fps", DEFAULT_FPS))
    return s


def save_settings(s: AppSettings, qs: QSettings | None = None) -> None:
    qs = qs or open_settings()
    qs.setValue("chat/system_prompt", s.system_prompt)
    for key in SAMPLING_KEYS:
        if key in s.overrides:
            qs.setValue(f"sampling/{key}", s.overrides[key])
        else:
            qs.remove(f"sampling/{key}")
    qs.setValue("sampling/seed", "" if s.seed is None else s.seed)
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


def _choice(value, allowed: tuple[str, ...], default: str) -> str:
    return value if value in allowed else default


# -- the user's models ----------------------------------------------------------------------------
def known_models(qs: QSettings | None = None) -> list[dict]:
    """Models the user downloaded or added: ``[{"name", "path", "repo_id"}]``, in the order added."""
    qs = qs or open_settings()
    try:
        models = json.loads(str(qs.value("models/known", "[]") or "[]"))
    except ValueError:
        return []
    return [m for m in models if isinstance(m, dict) and m.get("path")]


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
    return str((qs or open_settings()).value("models/last", "") or "")


def set_last_model(path: str, qs: QSettings | None = None) -> None:
    qs = qs or open_settings()
    qs.setValue("models/last", path)
    qs.sync()
