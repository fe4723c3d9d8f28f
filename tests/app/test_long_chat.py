"""A long chat opens with only its last messages built as widgets; others are built as the view comes
near them and dropped again far from it (at most MAX_BUILT at once), the view held on what it shows;
every action still finds the right stored message."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt

from app.backends.fake import FakeBackend
from app.chat_view import BATCH, MAX_BUILT, SHOWN_AT_OPEN, StoredMessage
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


def steady_y(qtbot, win, message) -> int:
    """``message``'s y on the screen (in the window) once the layout has settled (unchanged over 50 ms;
    a busy machine takes longer to lay new widgets out): a banner shown above the view, as a delete's
    Undo is, leaves it there."""
    where = lambda: message.mapTo(win, QPoint(0, 0)).y()  # noqa: E731
    seen = [where()]

    def still() -> bool:
        seen.append(where())
        return seen[-1] == seen[-2]
    qtbot.wait(50)
    qtbot.waitUntil(lambda: qtbot.wait(50) or still(), timeout=5000)
    return seen[-1]


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
    qtbot.waitUntil(lambda: win.transcript.built() >= SHOWN_AT_OPEN + BATCH, timeout=5000)
    settle(qtbot, win)
    assert top_message(win) == (message, y)  # the same message where it was, the new ones above it
    assert bar.value() > win.transcript.viewport().height()
    most = 0
    for _ in range(60):  # to the top, a batch at a time, the far end dropped
        if win.transcript.built_range().start == 0:
            break
        bar.setValue(0)
        settle(qtbot, win)
        most = max(most, win.transcript.built())
        assert in_layout(win) == ids[win.transcript.built_range().start:win.transcript.built_range().stop]
    assert win.transcript.built_range().start == 0 and most == MAX_BUILT
    assert ids_shown(win) == ids
    assert all(isinstance(e, StoredMessage) for e in win.transcript.widgets()[MAX_BUILT:])

    for _ in range(60):  # and down again to the end
        if win.transcript.built_range().stop == len(ids):
            break
        message, y = top_message(win)
        bar.setValue(bar.maximum())
        settle(qtbot, win)
        assert win.transcript.built() <= MAX_BUILT
        assert in_layout(win) == ids[win.transcript.built_range().start:win.transcript.built_range().stop]
    assert win.transcript.built_range().stop == len(ids)
    last = win.transcript.widgets()[-1]
    # (scrolled on down while the last widgets get their heights, as a wheel does)
    qtbot.waitUntil(lambda: bar.setValue(bar.maximum()) or last.visibleRegion().boundingRect().height() > 0,
                    timeout=5000)
    assert last.actions_row.isVisible()


def test_a_scroll_straight_after_a_batch_is_built_moves_the_view_by_the_scroll_only(qtbot, make_window, data_dir):
    """Trial 74 F1: a wheel notch or PageUp that came before the batch built above the view was laid out
    scrolled from the old place and let go of the hold: the view leapt the batch (15 messages a notch)."""
    long_chat(data_dir)
    win = make_window(FakeBackend())
    settle(qtbot, win)
    view, bar = win.transcript, win.transcript.verticalScrollBar()
    for notch in range(3):
        bar.setValue(view.viewport().height() // 2)  # within a screen of the first one built
        start = view.built_range().start
        qtbot.waitUntil(lambda: view.built_range().start < start, timeout=5000)  # (built by a zero timer)
        message, y = top_message(win)
        bar.setValue(bar.value() - 60)  # the next notch, before any other event
        settle(qtbot, win)
        assert message.mapTo(view.viewport(), QPoint(0, 0)).y() == y + 60, notch


def test_the_scroll_bars_thumb_let_go_at_an_end_goes_to_that_end_of_the_chat(qtbot, make_window, data_dir):
    """Trial 74 F10: the bar spans the messages built only; a drag of its thumb to the top went 15 messages
    further up a drag (a batch built under the pointer). Let go at the top: the chat's first message; at
    the bottom: its newest; elsewhere, as the wheel."""
    ids = long_chat(data_dir)
    win = make_window(FakeBackend())
    settle(qtbot, win)
    view, bar = win.transcript, win.transcript.verticalScrollBar()
    built = view.built_range()
    bar.setSliderDown(True)
    bar.setValue(0)
    settle(qtbot, win)
    assert view.built_range() == built  # nothing built while the thumb is held
    bar.setSliderDown(False)
    settle(qtbot, win)
    assert view.widgets()[0].message_id == ids[0] and top_message(win)[0] is view.widgets()[0] and bar.value() == 0
    bar.setSliderDown(True)
    bar.setValue(bar.maximum())
    bar.setSliderDown(False)
    settle(qtbot, win)
    assert view.built_range().stop == len(ids) and bar.value() == bar.maximum()
    bar.setSliderDown(True)
    bar.setValue(view.viewport().height() // 3)  # near the top of what is built, not at it
    bar.setSliderDown(False)
    qtbot.waitUntil(lambda: view.built_range().start < len(ids) - SHOWN_AT_OPEN, timeout=5000)


def test_home_and_end_go_to_the_chats_first_and_newest_message(qtbot, make_window, data_dir):
    ids = long_chat(data_dir)
    win = make_window(FakeBackend())
    settle(qtbot, win)
    win.transcript.setFocus()
    qtbot.keyClick(win.transcript, Qt.Key.Key_Home)
    settle(qtbot, win)
    first = win.transcript.widgets()[0]
    assert isinstance(first, UserMessage) and first.message_id == ids[0]
    assert win.transcript.verticalScrollBar().value() == 0
    assert win.transcript.built() <= MAX_BUILT and isinstance(win.transcript.widgets()[-1], StoredMessage)
    win.actions["chat_end"].trigger()
    settle(qtbot, win)
    last = win.transcript.widgets()[-1]
    assert isinstance(last, AssistantMessage)
    bar = win.transcript.verticalScrollBar()
    assert bar.value() == bar.maximum()
    win.actions["chat_start"].trigger()
    settle(qtbot, win)
    assert win.transcript.verticalScrollBar().value() == 0 and win.transcript.built_range().start == 0
    qtbot.keyClick(win.transcript, Qt.Key.Key_End)
    settle(qtbot, win)
    assert bar.value() == bar.maximum() and win.transcript.built_range().stop == len(ids)


def test_a_delete_while_scrolled_up_keeps_the_view_and_builds_little(qtbot, make_window, data_dir):
    """Trial 48: a delete or another version of a message far up rebuilt everything after it (7-20 s
    in a 5,000-message chat) and sent the view to the end."""
    ids = long_chat(data_dir, pairs=300)
    win = make_window(FakeBackend())
    settle(qtbot, win)
    win.transcript.show_message(100)
    above = win.transcript.widgets()[99]
    y = steady_y(qtbot, win, above)
    win.transcript.widgets()[100].actions_row.button("delete").click()  # question 50 and its answer
    assert steady_y(qtbot, win, above) == y
    assert ids_shown(win) == ids[:100] + ids[102:] == [m.id for m in win.keeper.messages()]
    assert win.transcript.built() <= MAX_BUILT
    assert win.transcript.widgets()[99] is above
    assert isinstance(win.transcript.widgets()[-1], StoredMessage)  # the end was not built for it


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
    assert win.transcript.built() <= MAX_BUILT
    message = win.transcript.message_widget(2)
    assert isinstance(message, UserMessage) and message.message_id == ids[2]
    lo, hi = win.transcript.built_range().start, win.transcript.built_range().stop
    assert lo == 0 and in_layout(win) == ids[lo:hi]
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
    assert win.transcript.verticalScrollBar().value() == win.transcript.verticalScrollBar().maximum()
    settle(qtbot, win)
    assert win.transcript.widgets()[-1].actions_row.isVisible()


def test_opening_a_chat_reads_it_once(qtbot, make_window, data_dir, monkeypatch):
    """Opening a chat read it five times (the branch, the unanswered check, the unreadable rows, the
    engine's history, the versions): 0.9 of the 1.2 s it took with 5,000 messages. Each row now once;
    after a write, only the rows it changed."""
    ids = long_chat(data_dir, pairs=50)
    win = make_window(FakeBackend())
    chat = win.keeper.current_id
    other = win.store.create_conversation("other").id
    win.store.add_message(other, "user", "hello")
    win.open_conversation(other)
    reads = []
    real = Store._message
    monkeypatch.setattr(Store, "_message", lambda self, row: reads.append(row["id"]) or real(self, row))
    win.open_conversation(chat)
    assert sorted(reads) == ids
    win.store.add_message(chat, "user", "one more")  # a write: the new row is read
    assert [m.text for m in win.keeper.messages()][-1] == "one more"
    assert len(reads) == len(ids) + 1  # (add_message reads the new row back, into the chat's read: trial 75 N6)


def test_going_to_the_start_while_an_answer_streams_keeps_the_answer(qtbot, make_window, data_dir):
    """The answer streaming is taken out of the view, not dropped: it goes on growing, is saved whole, and
    is there again at the end (Home mid-answer built the start around it and lost its place)."""
    long_chat(data_dir)
    win = make_window(FakeBackend(tokens=[f" w{i}" for i in range(60)], delay=0.01))
    settle(qtbot, win)
    win.composer.setPlainText("Tell me more")
    with qtbot.waitSignal(win.answer_finished, timeout=20_000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: len(win.transcript.widgets()[-1].text) > 10, timeout=5000)
        win.transcript.show_start()
        assert win.transcript.built_range().start == 0
        assert win.transcript.verticalScrollBar().value() == 0
        win.transcript.show_start()  # again, while it streams
    answer = win.transcript.widgets()[-1]
    whole = "".join(f" w{i}" for i in range(60)).strip()
    assert isinstance(answer, AssistantMessage) and answer.text == whole
    assert win.keeper.messages()[-1].text == whole and win.keeper.messages()[-1].status == "done"
    assert win.transcript.built_range().start == 0  # the view stayed at the start
    assert win.transcript.widgets().count(answer) == 1 and answer not in win.transcript.widgets()[:-1]
    win.actions["chat_end"].trigger()
    settle(qtbot, win)
    assert win.transcript.widgets()[-1] is answer and in_layout(win)[-1] == answer.message_id
    qtbot.waitUntil(lambda: answer.visibleRegion().boundingRect().height() > 0, timeout=3000)
    assert answer.actions_row.isVisible() and answer.footer()


def test_undo_of_a_delete_far_up_shows_the_message_where_it_was(qtbot, make_window, data_dir):
    """Trial 49: Undo re-drew the chat at its end, the place scrolled back to lost."""
    from PySide6.QtWidgets import QPushButton

    ids = long_chat(data_dir, pairs=150)
    win = make_window(FakeBackend())
    win.sidebar.search.setText("Question 50")
    win.transcript.show_message(100)
    steady_y(qtbot, win, win.transcript.widgets()[100])
    win.transcript.widgets()[100].actions_row.button("delete").click()
    assert win.sidebar.find_row.label.text() == "0 matches in this chat"
    undo = win.banner.findChild(QPushButton, "bannerAction")
    qtbot.mouseClick(undo, Qt.MouseButton.LeftButton)
    assert ids_shown(win) == ids
    back = win.transcript.widgets()[100]
    assert isinstance(back, UserMessage) and back.message_id == ids[100]
    y = steady_y(qtbot, win, back)
    assert 0 <= y < win.transcript.viewport().height()
    assert win.sidebar.find_row.label.text() == "1 match in this chat"
