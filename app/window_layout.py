"""The main window's widgets and layout: sidebar | header, banner, transcript, composer; status bar."""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QSize, Qt, QTimer
from PySide6.QtGui import QIcon, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractButton,
    QComboBox,
    QFrame,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.attachments import AttachmentStrip
from app.banner import Banner
from app.chat_view import ChatView
from app.composer import Composer
from app.conversation_list import ConversationList
from app.icons import icon
from app.model_picker import ModelPicker
from app.paths import resource
from app.scroll_area import fit_to_screen
from app.settings import MESSAGE_DETAILS
from app.text_count import TextCounter
from app.text_fit import ElidedLabel, WrappedLabel

SEND_TIP = "Send (Enter)"
# The Stop button and Edit ▸ Stop say what they stop: the answer, or the model's load.
STOP_TIP, STOP_LOAD_TIP = "Stop the answer (Esc)", "Stop loading the model (Esc)"
STOP_ACTION, STOP_LOAD_ACTION = "&Stop answer\tEsc", "&Stop loading the model\tEsc"


KEYS_HINT = "Enter to send · Shift+Enter for a new line · Esc to stop"


def attach_tip(video: bool, vision: bool = True) -> str:
    """The attach button's tooltip and accessible name: videos are named only for a model that takes them."""
    if not vision:
        return "Attach files: this model reads text only (images and videos need a SmolVLM model)"
    kinds = "images, videos or PDFs" if video else "images or PDFs"
    return f"Attach {kinds} (or drop / paste them, or a folder)"


def composer_hint(video: bool, vision: bool = True) -> str:
    """The line under the composer: the keys, and what may be dropped for the loaded model."""
    if not vision:
        return f"{KEYS_HINT} · this model reads text only"
    return f"{KEYS_HINT} · drop or paste images, {'videos, ' if video else ''}PDFs or a folder"


def show_attach_kinds(window, video: bool, vision: bool = True) -> None:
    """Say on the attach button and the hint under the composer what the loaded model takes (they said
    "images or PDFs" to a video model, and offered images to a text-only model)."""
    window.attach_button.setToolTip(attach_tip(video, vision))
    window.attach_button.setAccessibleName(attach_tip(video, vision))
    window.composer_hint.setText(composer_hint(video, vision))


def tool_button(name: str, icon_name: str, tip: str) -> QToolButton:
    button = QToolButton()
    button.setObjectName(name)
    button.setIcon(icon(icon_name))
    button.setIconSize(QSize(20, 20))
    button.setToolTip(tip)
    button.setAccessibleName(tip)
    button.setCursor(Qt.CursorShape.PointingHandCursor)
    return button


def build_ui(window) -> None:
    """Create ``window``'s widgets as attributes and connect them to its slots."""
    window.model_picker = ModelPicker()
    header = QFrame()
    header.setObjectName("header")
    logo = QLabel()
    logo.setPixmap(QIcon(str(resource("smolchat.svg"))).pixmap(QSize(26, 26), window.devicePixelRatioF()))
    title = QLabel("Smolchat")
    title.setObjectName("appTitle")
    window.settings_button = tool_button("settingsButton", "settings", "Settings (Ctrl+,)")
    header_layout = QHBoxLayout(header)
    header_layout.setContentsMargins(16, 10, 16, 10)
    header_layout.setSpacing(10)
    for widget in (logo, title):
        header_layout.addWidget(widget)
    header_layout.addStretch(1)
    header_layout.addWidget(window.model_picker)
    header_layout.addWidget(window.settings_button)

    window.sidebar = ConversationList()
    window.new_chat_button = window.sidebar.new_button
    window.banner = Banner()
    window.transcript = ChatView()
    window.attachments = AttachmentStrip()
    window.composer = Composer()
    window.attach_button = tool_button("attachButton", "attach", attach_tip(video=False))
    window.stop_button = tool_button("stopButton", "stop", STOP_TIP)
    window.send_button = tool_button("sendButton", "send", SEND_TIP)

    composer_frame = QFrame()
    composer_frame.setObjectName("composerFrame")
    row = QHBoxLayout()
    row.setSpacing(6)
    row.addWidget(window.attach_button, 0, Qt.AlignmentFlag.AlignBottom)
    row.addWidget(window.composer, 1)
    row.addWidget(window.stop_button, 0, Qt.AlignmentFlag.AlignBottom)
    row.addWidget(window.send_button, 0, Qt.AlignmentFlag.AlignBottom)
    frame_layout = QVBoxLayout(composer_frame)
    frame_layout.setContentsMargins(10, 6, 10, 8)
    frame_layout.setSpacing(4)
    frame_layout.addWidget(window.attachments)
    frame_layout.addLayout(row)
    # Wraps in a narrow window (half a laptop screen) instead of holding it 730 px wide, and keeps the
    # window tall enough for its lines (see WrappedLabel: the message box was squeezed instead).
    hint = window.composer_hint = WrappedLabel(composer_hint(video=True))
    hint.setObjectName("composerHint")
    hint.setAlignment(Qt.AlignmentFlag.AlignHCenter)
    bottom = QVBoxLayout()
    bottom.setContentsMargins(20, 0, 20, 10)
    bottom.setSpacing(4)
    bottom.addWidget(composer_frame)
    bottom.addWidget(hint)  # centred by its own alignment: an aligned item gets no height for its width

    chat = QWidget()
    chat.setObjectName("central")
    layout = QVBoxLayout(chat)
    layout.setContentsMargins(0, 0, 0, 0)
    layout.setSpacing(0)
    # The composer's row joins the window first, so that it heads the focus chain: see set_tab_order.
    layout.addLayout(bottom)
    layout.insertWidget(0, header)
    layout.insertWidget(1, window.banner)
    layout.insertWidget(2, window.transcript, 1)
    splitter = QSplitter()
    splitter.setObjectName("mainSplitter")
    splitter.addWidget(chat)
    splitter.insertWidget(0, window.sidebar)
    splitter.setStretchFactor(1, 1)
    splitter.setSizes([240, 840])
    splitter.setChildrenCollapsible(False)
    window.setCentralWidget(splitter)

    # Both end in "…" (the whole text in the tooltip) where a narrow window leaves them too little
    # room; the attachments' count keeps its width first, the model and statistics take what is left.
    window.stats_label = ElidedLabel()
    window.stats_label.setObjectName("statusStats")
    # (A label's text is its accessible name, said again when it changes: a name of its own would hide
    # "ready", "loading…" or why an answer stopped from a screen reader. What it is: the description.)
    window.stats_label.setAccessibleDescription("Model and answer statistics")
    window.stats_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
    window.pending_label = ElidedLabel()
    window.pending_label.setObjectName("pendingTokens")
    window.pending_label.setAccessibleDescription("Tokens of the attachments, and of a text too long for the context")
    # The image detail of the message being written: Settings' choice until the user picks another
    # for this message (shown only while images are attached; back to Settings' after sending).
    window.detail_combo = QComboBox()
    window.detail_combo.setObjectName("messageDetail")
    window.detail_combo.setAccessibleName("Image detail of this message")
    window.detail_combo.setToolTip("How finely this message's images are read: more tiles see more, and take "
                                   "longer. Settings ▸ Image detail is the default.")
    for key, label in MESSAGE_DETAILS.items():
        window.detail_combo.addItem(label, key)
    window.detail_combo.setVisible(False)
    window.statusBar().addWidget(window.stats_label, 1)
    window.statusBar().addPermanentWidget(window.detail_combo)
    window.statusBar().addPermanentWidget(window.pending_label)
    window.statusBar().setSizeGripEnabled(False)

    window.composer.submitted.connect(window.send_message)
    window.detail_combo.currentIndexChanged.connect(window._count_pending_tokens)
    window.composer.textChanged.connect(window._update_actions)
    # A long text is counted once typing pauses (tokenizing a book chapter takes milliseconds, not
    # nothing), to say before Send that it is beyond the context.
    window.text_count_timer = QTimer(window)
    window.text_count_timer.setSingleShot(True)
    window.text_count_timer.setInterval(300)
    window.text_count_timer.timeout.connect(window._show_pending)
    window.composer.textChanged.connect(window._text_edited)
    # On the worker thread: the controller is looked up there, the backend counts thread-safely.
    window.text_counter = TextCounter(lambda text: window.controller.count_text_tokens(text), window)
    window.text_counter.counted.connect(window._on_text_counted)
    window.composer.files_added.connect(window.add_files)
    window.composer.image_pasted.connect(window.add_image_data)
    window.composer.refused.connect(window.banner.show_error)
    window.attachments.changed.connect(window._update_actions)
    window.attachments.changed.connect(window._count_pending_tokens)
    window.attachments.changed.connect(window._withdraw_attach_notes)
    window.attach_button.clicked.connect(window._pick_files)
    window.send_button.clicked.connect(window.send_message)
    window.stop_button.clicked.connect(window.stop)
    window.settings_button.clicked.connect(window.open_settings_dialog)
    window.model_picker.model_chosen.connect(window.load_model)
    window.model_picker.manage_requested.connect(window.open_model_manager)
    window.transcript.message_action.connect(window._on_message_action)
    # After the action (connected later, called later): a delete or another version changes what the search finds.
    window.transcript.message_action.connect(lambda _action, _index: window.update_find())
    window.answer_finished.connect(lambda _result: window.update_find())
    window.sidebar.new_requested.connect(window.new_chat)
    window.sidebar.open_requested.connect(window.open_conversation)
    window.sidebar.rename_requested.connect(window.rename_conversation)
    window.sidebar.delete_requested.connect(window.delete_conversation)
    window.sidebar.search_changed.connect(lambda _text: window.search_typed())
    window.sidebar.find_step.connect(window.step_find)
    window.sidebar.search_due.connect(window.search_if_due)
    QShortcut(QKeySequence(Qt.Key.Key_Escape), window, window.stop)
    # Ctrl+Z undoes a delete the banner offers to undo, else the newest delete (a chat's or a message's);
    # a text field with the focus keeps the key for its own undo (Qt gives an editor's standard keys to
    # the editor first).
    QShortcut(QKeySequence.StandardKey.Undo, window, window.undo_delete)
    set_tab_order(window)
    fit_to_screen(window, window.size())  # no larger than a small (or scaled) screen
    window.composer.setFocus()


#: The main window's size, place and maximized state (QWidget.saveGeometry) and the sidebar's width
#: (QSplitter.saveState) at the last close, in settings.ini.
GEOMETRY_KEY, SPLITTER_KEY = "window/geometry", "window/splitter"
#: The most of a narrowed window's width the chat list keeps, and the window height below which the
#: keys hint under the message box is left out (trial 62: at 800 × 500 with a large font the list kept
#: 45% of the width, and the hint's three lines left the messages ~150 px).
SIDEBAR_SHARE, SHORT_WINDOW = 0.35, 560


def fit_small_window(window, old: QSize) -> None:
    """After a resize from ``old``: a narrower window takes the chat list down to
    :data:`SIDEBAR_SHARE` of it (not below its minimum; widened, it keeps the width it was given), and a
    window shorter than :data:`SHORT_WINDOW` leaves the keys hint out (Help ▸ Keyboard shortcuts has them)."""
    splitter = window.centralWidget()
    sizes = splitter.sizes()
    total = sum(sizes)
    if old.isValid() and window.width() < old.width() and total > 0:
        cap = max(window.sidebar.minimumSizeHint().width(), int(total * SIDEBAR_SHARE))
        if sizes[0] > cap:
            splitter.setSizes([cap, total - cap])
    window.composer_hint.setVisible(window.height() >= SHORT_WINDOW)


def restore_geometry(window) -> None:
    """Open the window as it was closed (trial 60: it opened at 1080 x 720 in the default place every
    time). Qt moves a window saved on a screen no longer attached onto one that is; a value that is not
    a saved geometry (edited by hand) is ignored, the default size applies."""
    geometry = window.qsettings.value(GEOMETRY_KEY)
    if isinstance(geometry, QByteArray) and window.restoreGeometry(geometry) and not window.isMaximized():
        fit_to_screen(window, window.size())  # a screen smaller (or scaled up) since
    state = window.qsettings.value(SPLITTER_KEY)
    if isinstance(state, QByteArray):
        window.centralWidget().restoreState(state)


def save_geometry(window) -> None:
    """What :func:`restore_geometry` reads, at a close."""
    window.qsettings.setValue(GEOMETRY_KEY, window.saveGeometry())
    window.qsettings.setValue(SPLITTER_KEY, window.centralWidget().saveState())


def set_tab_order(window) -> None:
    """Tab goes sidebar → header → banner → transcript (its messages) → composer, and round again.

    Qt chains a window's widgets in the order they joined it and appends each new message's widgets
    (copy, edit, delete, regenerate, its text) at the end of the chain. The composer's row used to end
    it, so Tab from the composer went through three buttons a message before New chat or Settings
    (trial 38). Now the composer's row heads the chain (build_ui adds it first) and the transcript ends
    it, so the messages appended later land between the transcript and the composer, where they are on
    the screen, and the rest are put in order between.
    """
    sidebar = window.sidebar
    # The attachments' scroll area took a Tab of its own and showed nothing: each chip's button does.
    window.attachments.findChild(QScrollArea).setFocusPolicy(Qt.FocusPolicy.NoFocus)
    chain = [window.attach_button, window.composer, window.send_button, window.stop_button, window.detail_combo,
             sidebar.new_button, sidebar.search, sidebar.find_row.older, sidebar.find_row.newer, sidebar.list,
             window.model_picker, window.settings_button,
             *window.banner.findChildren(QAbstractButton), window.transcript]
    for first, second in zip(chain, chain[1:]):
        QWidget.setTabOrder(first, second)
