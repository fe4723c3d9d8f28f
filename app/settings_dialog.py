"""Settings: system prompt, sampling, image detail, device/dtype, KV cache, theme, and (beside them)
the remote engines (:mod:`app.engines_settings`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QBoxLayout,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.engines_settings import EnginesPanel
from app.scroll_area import ContentScroll, content_room, fit_to_screen
from app.settings import (
    CACHE_KINDS,
    CONTEXT_RULE,
    DEVICES,
    DTYPES,
    ENGINE_KEYS,
    IMAGE_DETAILS,
    LABELS,
    MAX_CONTEXT,
    SAMPLING_KEYS,
    SEED_RULE,
    THEMES,
    WEIGHTS,
    AppSettings,
    parse_context_size,
    parse_seed,
    weights_from_environment,
)
from app.video_attachments import FPS_RANGE, MAX_FRAMES_LIMIT


def _combo(name: str, accessible: str, items: dict[str, str] | tuple[str, ...], current: str) -> QComboBox:
    combo = QComboBox()
    combo.setObjectName(name)
    combo.setAccessibleName(accessible)
    pairs = items.items() if isinstance(items, dict) else ((i, LABELS.get(i, i)) for i in items)
    for value, label in pairs:
        combo.addItem(label, value)
    combo.setCurrentIndex(max(0, combo.findData(current)))
    return combo


def _offer_only(combo: QComboBox, devices: Sequence[str]) -> None:
    """Grey out the devices this computer lacks (trial 62: CUDA picked on a machine without one failed
    the reload after OK, and took the other engine choices made with it back too)."""
    if not devices:
        return
    model = combo.model()
    for row in range(combo.count()):
        value = combo.itemData(row)
        if value != "auto" and value not in devices:
            combo.setItemText(row, f"{combo.itemText(row)} (not on this computer)")
            model.item(row).setEnabled(False)


class RefusedValue(ValueError):
    """A field's value the settings cannot take: ``field`` (the widget) and ``reason`` (one line)."""

    def __init__(self, field: QWidget, reason: str) -> None:
        super().__init__(reason)
        self.field, self.reason = field, reason


class SettingsDialog(QDialog):
    """Edits a copy of :class:`AppSettings`; ``applied(AppSettings)`` on OK / Apply.

    Sampling fields show the effective value; only values that differ from the model's defaults
    (``model_defaults``, from its generation_config.json) are kept as overrides.
    """

    applied = Signal(object)

    def __init__(self, settings: AppSettings, model_defaults: dict | None = None, parent: QWidget | None = None,
                 devices: Sequence[str] = ()):
        """``devices``: the device kinds the engine can run on here (the loaded model's
        :attr:`~engine.api.ModelInfo.devices`; empty: not known, all offered)."""
        super().__init__(parent)
        self.setObjectName("settingsDialog")
        self.setWindowTitle("Settings")
        self.settings = settings
        self.model_defaults = dict(model_defaults or {})
        values = settings.sampling(self.model_defaults)

        self.system_prompt = QPlainTextEdit(settings.system_prompt)
        self.system_prompt.setObjectName("systemPrompt")
        self.system_prompt.setAccessibleName("System prompt")
        self.system_prompt.setPlaceholderText("Optional instructions for every answer in new chats")
        self.system_prompt.setFixedHeight(72)
        self.system_prompt.setTabChangesFocus(True)  # Tab goes on to the other settings, as in the message box

        self.temperature = self._double("temperature", "Temperature", 0.0, 2.0, 0.05, values["temperature"])
        self.top_p = self._double("topP", "Top-p", 0.01, 1.0, 0.01, values["top_p"])
        self.top_k = self._int("topK", "Top-k (0: off)", 0, 1000, values["top_k"])
        self.repetition_penalty = self._double("repetitionPenalty", "Repetition penalty", 0.5, 2.0, 0.01,
                                               values["repetition_penalty"])
        self.max_new_tokens = self._int("maxNewTokens", "Maximum new tokens", 1, 32768, values["max_new_tokens"])
        self.seed = QLineEdit("" if settings.seed is None else str(settings.seed))
        self.seed.setObjectName("seed")
        self.seed.setAccessibleName("Seed")
        self.seed.setPlaceholderText("random")
        self.seed.setToolTip(f"The seed: {SEED_RULE}.")
        # Why OK / Apply refused a value (hidden while there is nothing to say).
        self.error = QLabel()
        self.error.setObjectName("settingsError")
        self.error.setAccessibleName("Settings error")
        self.error.setWordWrap(True)
        self.error.hide()
        self.seed.textChanged.connect(self._clear_error)
        self.image_detail = _combo("imageDetail", "Image detail", IMAGE_DETAILS, settings.image_detail)
        self.device = _combo("device", "Device", DEVICES, settings.device)
        _offer_only(self.device, devices)
        self.dtype = _combo("dtype", "Data type", DTYPES, settings.dtype)
        self.cache_kind = _combo("cacheKind", "KV cache kind", CACHE_KINDS, settings.cache_kind)
        from_env = weights_from_environment()[0]  # what "Same as the data type" gives (trial 59)
        same = f"From $SMOLCHAT_WEIGHTS ({from_env})" if from_env and from_env != WEIGHTS[0] else "Same as the data type"
        self.weights = _combo("weights", "Weights", dict(zip(WEIGHTS, (same,
                                                                       "int8 (less memory, faster decode)",
                                                                       "4-bit (least memory; answers change more)"))),
                              settings.weights)
        self.weights.setToolTip("int8: the text decoder's weights are stored as int8, which changes answers slightly "
                                "(a word here and there). On the CPU about 1.3-1.5x faster answers; on an NVIDIA GPU half the "
                                "memory of bfloat16 for those weights. Ignored on an Apple GPU.\n"
                                "4-bit: groups of 32 weights in 4 bits, an eighth of float32's memory and the fastest "
                                "answers on the CPU (the output layer stays int8, on a GPU too). Answers change slightly: on "
                                "SmolLM2-135M, whose weights came as 4-bit, perplexity rises 0.2% (int8: 0.7%); "
                                "checkpoints made in 16 bits may lose more. Ignored on an Apple GPU.")
        self.context_size = self._int("contextSize", "Context size in tokens (0: the model's)", 0, MAX_CONTEXT,
                                      settings.context_size)
        self.context_size.setSingleStep(1024)
        self.context_size.setSpecialValueText("Model's own")
        self.context_size.setToolTip(f"The context size: {CONTEXT_RULE}.")
        self.context_size.valueChanged.connect(self._clear_error)
        self.theme = _combo("theme", "Theme", THEMES, settings.theme)
        self.video_max_frames = self._int("videoMaxFrames", "Video: at most this many frames", 1, MAX_FRAMES_LIMIT,
                                          settings.video_max_frames)
        self.video_max_frames.setToolTip("Frames sampled from a video for SmolVLM2 models (1-64). Each frame costs "
                                         "the model's tokens per image tile: 64 on the 256M and 500M.")
        self.video_fps = self._double("videoFps", "Video: frames per second", FPS_RANGE[0], FPS_RANGE[1], 0.5,
                                      settings.video_fps)
        self.video_fps.setSuffix(" fps")

        chat = QFormLayout()
        chat.addRow("System prompt", self.system_prompt)
        chat.addRow("Image detail", self.image_detail)
        chat.addRow("Video frames (max)", self.video_max_frames)
        chat.addRow("Video sampling", self.video_fps)
        sampling = QFormLayout()
        for label, widget in (("Temperature", self.temperature), ("Top-p", self.top_p), ("Top-k", self.top_k),
                              ("Repetition penalty", self.repetition_penalty),
                              ("Max new tokens", self.max_new_tokens), ("Seed", self.seed)):
            sampling.addRow(label, widget)
        reset = QPushButton("Use the model's defaults")
        reset.setObjectName("resetSampling")
        reset.setAccessibleName("Reset sampling to the model's defaults")
        reset.clicked.connect(self.reset_sampling)
        sampling.addRow("", reset)
        engine = QFormLayout()
        for label, widget in (("Device", self.device), ("Data type", self.dtype), ("Weights", self.weights),
                              ("KV cache", self.cache_kind), ("Context size", self.context_size)):
            engine.addRow(label, widget)
        engine_note = QLabel("Changing these reloads the model.")
        engine_note.setObjectName("settingsNote")
        engine.addRow("", engine_note)
        look = QFormLayout()
        look.addRow("Theme", self.theme)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Apply
                                   | QDialogButtonBox.StandardButton.Cancel
                                   | QDialogButtonBox.StandardButton.RestoreDefaults)
        buttons.setObjectName("settingsButtons")
        restore = buttons.button(QDialogButtonBox.StandardButton.RestoreDefaults)
        restore.setToolTip("Put every setting on this side back to Smolchat's default (the servers stay); "
                           "OK or Apply saves it")
        restore.clicked.connect(self.restore_defaults)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        buttons.button(QDialogButtonBox.StandardButton.Apply).clicked.connect(self.apply)
        content = QWidget()
        content.setObjectName("settingsContent")
        columns = QHBoxLayout(content)
        columns.setContentsMargins(0, 0, 0, 0)
        left = QVBoxLayout()
        for title, form in (("Chat", chat), ("Sampling", sampling), ("Engine", engine), ("Appearance", look)):
            box = QGroupBox(title)
            box.setLayout(form)
            left.addWidget(box)
        columns.addLayout(left, 1)
        self.engines = EnginesPanel(self)  # saves servers as they are edited, not on OK
        columns.addWidget(self.engines, 1)
        # The sections scroll (only) where the screen is smaller than they are: at QT_SCALE_FACTOR=2 on
        # a 1280 x 900 screen the dialog was 789 x 729 and its Engine section and OK / Apply were off it.
        # Side by side where the screen has room for both; on a narrow (or scaled: 2x on 1280 x 900)
        # one, Engines goes under the rest, so the content scrolls down only, not sideways too.
        if content.minimumSizeHint().width() > content_room(self):
            columns.setDirection(QBoxLayout.Direction.TopToBottom)
        self.scroll = ContentScroll("settingsScroll", content)
        layout = QVBoxLayout(self)
        layout.addWidget(self.scroll, 1)
        layout.addWidget(self.error)
        layout.addWidget(buttons)
        fit_to_screen(self)

    def _double(self, name, accessible, low, high, step, value) -> QDoubleSpinBox:
        box = QDoubleSpinBox()
        box.setObjectName(name)
        box.setAccessibleName(accessible)
        box.setRange(low, high)
        box.setSingleStep(step)
        box.setDecimals(2)
        box.setValue(float(value))
        return box

    def _int(self, name, accessible, low, high, value) -> QSpinBox:
        box = QSpinBox()
        box.setObjectName(name)
        box.setAccessibleName(accessible)
        box.setRange(low, high)
        box.setValue(int(value))
        return box

    def reset_sampling(self) -> None:
        values = AppSettings().sampling(self.model_defaults)
        self.temperature.setValue(values["temperature"])
        self.top_p.setValue(values["top_p"])
        self.top_k.setValue(values["top_k"])
        self.repetition_penalty.setValue(values["repetition_penalty"])
        self.max_new_tokens.setValue(values["max_new_tokens"])
        self.seed.clear()

    def restore_defaults(self) -> None:
        """Every field at its default (:class:`AppSettings`'s, the model's for sampling): a way back
        from a device this computer lacks or a value that makes answers odd. Not saved until OK or
        Apply, as any edit; the servers of Settings ▸ Engines stay."""
        defaults = AppSettings()
        self.system_prompt.setPlainText(defaults.system_prompt)
        self.reset_sampling()
        for combo, value in ((self.image_detail, defaults.image_detail), (self.device, defaults.device),
                             (self.dtype, defaults.dtype), (self.cache_kind, defaults.cache_kind),
                             (self.weights, defaults.weights), (self.theme, defaults.theme)):
            combo.setCurrentIndex(combo.findData(value))
        self.context_size.setValue(defaults.context_size)
        self.video_max_frames.setValue(defaults.video_max_frames)
        self.video_fps.setValue(defaults.video_fps)

    def result_settings(self) -> AppSettings:
        """The settings as edited. Raises :class:`RefusedValue` (one line, naming the field) for a seed
        or a context size that is not valid."""
        widgets = {"temperature": self.temperature, "top_p": self.top_p, "top_k": self.top_k,
                   "repetition_penalty": self.repetition_penalty, "max_new_tokens": self.max_new_tokens}
        baseline = AppSettings().sampling(self.model_defaults)
        overrides = {}
        for key in SAMPLING_KEYS:
            value = widgets[key].value()
            if abs(value - baseline[key]) > 1e-9:
                overrides[key] = value
        try:
            seed = parse_seed(self.seed.text())
        except ValueError as exc:
            raise RefusedValue(self.seed, str(exc)) from None
        try:
            context_size = parse_context_size(self.context_size.value())
        except ValueError as exc:
            raise RefusedValue(self.context_size, str(exc)) from None
        return replace(
            self.settings, system_prompt=self.system_prompt.toPlainText().strip(), overrides=overrides,
            seed=seed, problems=[],
            image_detail=self.image_detail.currentData(), device=self.device.currentData(),
            dtype=self.dtype.currentData(), cache_kind=self.cache_kind.currentData(),
            weights=self.weights.currentData(),
            context_size=context_size, theme=self.theme.currentData(),
            video_max_frames=self.video_max_frames.value(), video_fps=round(self.video_fps.value(), 2),
        )

    def apply(self) -> bool:
        """Emit the edited settings; False (nothing applied, the dialog says why and puts the cursor
        in the field) for an invalid seed or context size."""
        try:
            settings = self.result_settings()
        except RefusedValue as exc:
            self._show_error(f"Not applied: {exc.reason[0].upper()}{exc.reason[1:]}.")
            exc.field.setFocus()
            exc.field.selectAll()
            return False
        self._clear_error()
        self.settings = settings
        self.applied.emit(self.settings)
        return True

    def engine_settings_failed(self, settings: AppSettings, text: str) -> None:
        """The model did not load with the engine settings applied, and they were set back to
        ``settings``' (the model in use runs on those): the fields show them, the error line says why
        (the window's banner is behind this dialog)."""
        for combo, value in ((self.device, settings.device), (self.dtype, settings.dtype),
                             (self.cache_kind, settings.cache_kind), (self.weights, settings.weights)):
            combo.setCurrentIndex(max(0, combo.findData(value)))
        self.context_size.setValue(settings.context_size)  # (clears an earlier error line)
        self.settings = replace(self.settings, **{k: getattr(settings, k) for k in ENGINE_KEYS})
        self._show_error(f"{text}\nThe engine settings are back to the ones the model runs on.")

    def _show_error(self, text: str) -> None:
        """Show why a value was refused above the buttons. The line takes its height from the
        sections' scroll area, the dialog keeps its size: OK and Apply stay under the mouse (trial 60:
        the dialog grew by the line and shrank back at the first key in the field, and a click meant
        for Apply missed), and no blank band is left once the line goes (an earlier trial)."""
        self.error.setText(text)
        self.error.show()
        self.layout().activate()
        field = self.focusWidget()
        if field is not None and self.scroll.widget().isAncestorOf(field):
            self.scroll.ensureWidgetVisible(field)  # the field refused stays in sight above the line

    def _clear_error(self) -> None:
        """Hide the refusal once its field changes; the sections take its height back."""
        if self.error.isHidden():
            return
        self.error.hide()
        self.layout().activate()

    def accept(self) -> None:
        if self.apply():
            super().accept()
