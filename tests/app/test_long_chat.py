"""A long chat opens with only its last messages built as widgets; earlier ones are built as the view
is scrolled up to them, above what is shown, and every action still finds the right stored message."""

from __future__ import annotations

from PySide6.QtCore import QPoint

from app.backends.fake import FakeBackend
from app.chat_view import EARLIER_BATCH, SHOWN_AT_OPEN, StoredMessage
from app.messages import AssistantMessage, UserMessage
from app.store import Store

PAIRS = 150  # 300 messages


def long_chat(data_dir, pairs: int = PAIRS, answer: str = "Answer {i}, a sentence long enough to wrap once "
                                                             "or twice in a bubble of the transcript.") -> list[int]:
    """A stored chat of ``pairs`` questions and answers; returns its message ids, oldest first."""
    store = Store(data_dir)
    chat = store.create_conversation("long")
    ids = []
    for i in range(pairs):
        ids.append(store.add_message(chat.id, "user", f"Question {i}").id)
        ids.append(store.add_message(chat.id, "assistant", answer.format(i=i), stats={"model_name": "Fake"}).id)
    store.close()
    return ids


def ids_shown(win) -> list[int]:
    return [m.message_id for m in win.transcript.widgets()]


def in_layout(win) -> list[int]:
    """The ids of the built message widgets in the order the column lays them out."""
    column = win.transcript._column
    items = (column.itemAt(i).widget() for i in range(column.count()))
    return [w.message_id for w in items if isinstance(w, (UserMessage, AssistantMessage))]


def settle(qtbot, win) -> None:
    qtbot.wait(50)


def test_a_long_chat_opens_with_its_last_messages_built(qtbot, make_window, data_dir):
    ids = long_chat(data_dir)
    win = make_window(FakeBackend())
    settle(qtbot, win)
    entries = win.transcript.widgets()
    assert ids_shown(win) == ids  # every message has its entry, in order
    assert win.transcript.built() == SHOWN_AT_OPEN
    assert all(isinstance(e, StoredMessage) for e in entries[:-SHOWN_AT_OPEN])
    assert all(isinstance(e, (UserMessage, AssistantMessage)) for e in entries[-SHOWN_AT_OPEN:])
    assert in_layout(win) == ids[-SHOWN_AT_OPEN:]
    assert [m["text"] for m in win.transcript.messages()][:2] == ["Question 0", "Answer 0, a sentence long enough "
                                                                  "to wrap once or twice in a bubble of the transcript."]
    bar = win.transcript.verticalScrollBar()
    assert bar.maximum() > win.transcript.viewport().height() and bar.value() == bar.maximum()  # at the end


def top_message(win):
    """The built message at the top of the view and its y in the viewport."""
    view = win.transcript
    for message in view.widgets():
        if isinstance(message, StoredMessage):
            continue
        y = message.mapTo(view.viewport(), QPoint(0, 0)).y()
        if y + message.height() > 0:
            return message, y
    raise AssertionError("nothing shown")


def test_scrolling_up_builds_earlier_messages_and_keeps_the_view_still(qtbot, make_window, data_dir):
    ids = long_chat(data_dir)
    win = make_window(FakeBackend())
    settle(qtbot, win)
    bar = win.transcript.verticalScrollBar()
    bar.setValue(win.transcript.viewport().height() // 2)  # within a screen of the first one built
    message, y = top_message(win)
    qtbot.waitUntil(lambda: win.transcript.built() >= SHOWN_AT_OPEN + EARLIER_BATCH, timeout=5000)
    settle(qtbot, win)
    assert top_message(win) == (message, y)  # the same message where it was, the new ones above it
    assert bar.value() > win.transcript.viewport().height()
    for _ in range(40):  # to the top, a batch at a time
        if win.transcript.built() == len(ids):
            break
        bar.setValue(0)
        settle(qtbot, win)
    assert win.transcript.built() == len(ids)
    assert in_layout(win) == ids
    assert ids_shown(win) == ids


def test_a_chat_of_short_messages_builds_until_the_view_is_full(qtbot, make_window, data_dir):
    ids = long_chat(data_dir, answer="{i}")
    win = make_window(FakeBackend())
    win.resize(1080, 2000)  # taller than the last 40 messages
    qtbot.waitUntil(lambda: win.transcript.verticalScrollBar().maximum() > win.transcript.viewport().height(),
                    timeout=5000)
    settle(qtbot, win)
    assert SHOWN_AT_OPEN < win.transcript.built() < len(ids)
    assert in_layout(win) == ids[-win.transcript.built():]


def test_editing_an_earlier_message_builds_it_and_shows_it(qtbot, make_window, data_dir):
    ids = long_chat(data_dir)
    win = make_window(FakeBackend(tokens=["Fine", "."]))
    settle(qtbot, win)
    win.begin_edit(2, "Question 1, edited", [], [])  # as a kept edit is resumed after a restart
    assert win.transcript.built() == len(ids) - 2
    message = win.transcript.message_widget(2)
    assert isinstance(message, UserMessage) and message.message_id == ids[2]
    assert in_layout(win) == ids[2:]
    qtbot.waitUntil(lambda: message.visibleRegion().boundingRect().height() > 0, timeout=5000)
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        win.send_message()
    texts = [m["text"] for m in win.transcript.messages()]
    assert texts == ["Question 0", texts[1], "Question 1, edited", "Fine."]
    assert win.transcript.widgets()[2].actions_row.versions.text() == "‹ 2 / 2 ›"


def test_actions_on_a_long_chat_find_the_right_stored_messages(qtbot, make_window, data_dir):
    ids = long_chat(data_dir)
    fake = FakeBackend(tokens=["New", "."])
    win = make_window(fake)
    settle(qtbot, win)
    last_user = len(ids) - 2
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):  # a new version of the last answer
        win.transcript.widgets()[-1].actions_row.button("regenerate").click()
    assert [t[1] for t in fake.calls[-1]["turns"]] == [m.text for m in win.keeper.messages()[:last_user]]
    assert win.transcript.widgets()[-1].text == "New."
    win.transcript.widgets()[-1].actions_row.versions.previous.click()  # back to the stored one
    assert ids_shown(win) == ids
    assert win.transcript.widgets()[-1].text.startswith("Answer 149,")

    win.transcript.widgets()[-4].actions_row.button("delete").click()  # a question and its answer
    assert ids_shown(win) == ids[:-4] + ids[-2:] == [m.id for m in win.keeper.messages()]
    assert in_layout(win) == ids_shown(win)[-win.transcript.built():]
    assert isinstance(win.transcript.widgets()[0], StoredMessage)  # nothing earlier was built for it


def test_removing_every_built_message_builds_the_end_again(qtbot, make_window, data_dir):
    ids = long_chat(data_dir)
    win = make_window(FakeBackend())
    settle(qtbot, win)
    win.transcript.remove_from(len(ids) - SHOWN_AT_OPEN)
    assert win.transcript.built() == SHOWN_AT_OPEN
    assert in_layout(win) == ids[-2 * SHOWN_AT_OPEN:-SHOWN_AT_OPEN]
    settle(qtbot, win)
    assert win.transcript.widgets()[-1].actions_row.isVisible()
