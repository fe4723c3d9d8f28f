"""The chat search in the open chat: its hits are counted and marked, and the view steps through them
newest first, hit by hit within a message too (F3 / Shift+F3, Enter / Shift+Enter in the search, ↑ ↓)."""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QTextFormat
from PySide6.QtWidgets import QLabel

from app.backends.fake import FakeBackend
from app.chat_view import StoredMessage
from app.find_in_chat import FindRow, hit_top, mark
from app.markdown import ZERO_WIDTH_SPACE, RichText
from app.messages import AssistantMessage
from app.store import Store
from app.text_fit import FittingLabel

FILLER = "A paragraph of filler that wraps over a few lines of the bubble, read and forgotten. " * 12


def recipes(data_dir, pairs: int = 30) -> list[int]:
    """A chat where every fifth answer mentions sourdough (at its end, after three paragraphs), every
    tenth question too; and another chat without it. Returns the chat's message ids."""
    store = Store(data_dir)
    other = store.create_conversation("Other")
    store.add_message(other.id, "user", "Hello")
    store.add_message(other.id, "assistant", "Hi!")
    chat = store.create_conversation("Baking")
    ids = []
    for i in range(pairs):
        ids.append(store.add_message(chat.id, "user", f"Question {i}" + (" on SOURDOUGH" if i % 10 == 0 else "")).id)
        tail = f"\n\nFeed the **sourdough** starter ({i})." if i % 5 == 0 else ""
        ids.append(store.add_message(chat.id, "assistant", f"{FILLER}\n\n{FILLER}\n\n{FILLER}{tail}").id)
    store.close()
    return ids


def hits_expected(ids: list[int], pairs: int = 30) -> list[int]:
    """The ids of the messages holding "sourdough", oldest first."""
    return [ids[2 * i + k] for i in range(pairs) for k in (0, 1) if (i % 10 == 0 if k == 0 else i % 5 == 0)]


def marked(message) -> int:
    """How many hits are marked in ``message`` (extra selections; a question's tints and selected text)."""
    views = sum(len(v.extraSelections()) for v in message.findChildren(RichText))
    labels = message.findChildren(FittingLabel)
    return views + sum(len(label.marks()) + label.hasSelectedText() for label in labels)


def on_screen(win, message) -> bool:
    view = win.transcript.viewport()
    top = message.mapTo(view, QPoint(0, 0)).y()
    return top < view.height() and top + message.height() > 0


def hit_on_screen(win, index: int, number: int = 0, query: str = "sourdough") -> bool:
    """Message ``index``'s hit ``number`` is within the view (not just the message's top)."""
    hit = mark(win.transcript.widgets()[index], query, number)
    y = hit[0].mapTo(win.transcript.viewport(), QPoint(0, 0)).y() + hit_top(hit)
    return 0 <= y < win.transcript.viewport().height()


def searched(qtbot, make_window, data_dir, pairs: int = 30):
    ids = recipes(data_dir, pairs)
    win = make_window(FakeBackend())
    chat = win.keeper.current_id
    win.open_conversation(None)
    win.sidebar.search.setText("sourdough")
    assert win.sidebar.ids() == [chat]
    win.open_conversation(chat)  # as a click on it in the search's list
    qtbot.wait(50)
    return win, ids


def index_of(win, message_id: int) -> int:
    return [m.message_id for m in win.transcript.widgets()].index(message_id)


def test_opening_a_chat_from_the_search_shows_its_newest_hit_marked(qtbot, make_window, data_dir):
    win, ids = searched(qtbot, make_window, data_dir)
    expected = hits_expected(ids)
    row = win.sidebar.find_row
    assert row.isVisible() and row.label.text() == f"1 of {len(expected)} in this chat"
    newest = index_of(win, expected[-1])  # answer 25's "sourdough", after its three paragraphs
    assert win.transcript.hit_index() == newest
    bar = win.transcript.verticalScrollBar()
    # Not the chat's end: shown there while the messages above it are still being laid out, it also
    # looks on screen for a moment (seen once on a loaded machine).
    qtbot.waitUntil(lambda: hit_on_screen(win, newest) and bar.value() < bar.maximum(), timeout=3000)
    assert marked(win.transcript.widgets()[newest]) == 1
    for message in win.transcript.widgets()[win.transcript.widgets().index(win.transcript.widgets()[-40]):]:
        assert marked(message) == (1 if message.message_id in expected else 0), message.text[:40]
    assert win.actions["find_older"].isEnabled() and win.actions["find_newer"].isEnabled()


def test_f3_and_enter_step_to_older_hits_and_round(qtbot, make_window, data_dir):
    win, ids = searched(qtbot, make_window, data_dir)
    expected = hits_expected(ids)
    seen = []
    for _ in range(len(expected)):
        seen.append(win.transcript.widgets()[win.transcript.hit_index()].message_id)
        win.actions["find_older"].trigger()
    assert seen == expected[::-1]  # newest first, each once
    assert win.transcript.widgets()[win.transcript.hit_index()].message_id == expected[-1]  # round again
    assert win.sidebar.find_row.label.text() == f"1 of {len(expected)} in this chat"
    win.actions["find_newer"].trigger()  # from the newest, newer is the oldest
    oldest = index_of(win, expected[0])
    assert win.transcript.hit_index() == oldest
    assert win.sidebar.find_row.label.text() == f"{len(expected)} of {len(expected)} in this chat"
    qtbot.waitUntil(lambda: hit_on_screen(win, oldest), timeout=3000)

    win.sidebar.search.setFocus()
    qtbot.keyClick(win.sidebar.search, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    assert win.transcript.hit_index() == index_of(win, expected[1])
    qtbot.keyClick(win.sidebar.search, Qt.Key.Key_Return)
    assert win.transcript.hit_index() == oldest
    qtbot.mouseClick(win.sidebar.find_row.older, Qt.MouseButton.LeftButton)
    assert win.transcript.hit_index() == index_of(win, expected[-1])


def test_an_old_hit_of_a_long_chat_is_built_and_shown(qtbot, make_window, data_dir):
    win, ids = searched(qtbot, make_window, data_dir, pairs=150)
    expected = hits_expected(ids, 150)
    assert isinstance(win.transcript.widgets()[0], StoredMessage)  # not built at opening
    win.actions["find_newer"].trigger()  # the oldest: the chat's first question
    assert win.transcript.hit_index() == 0
    first = win.transcript.widgets()[0]
    assert marked(first) == 1 and first.findChildren(FittingLabel)[0].selectedText() == "SOURDOUGH"
    qtbot.waitUntil(lambda: on_screen(win, first), timeout=3000)
    qtbot.wait(100)  # the batches built above and below it settle; it stays in view
    assert on_screen(win, first)
    assert win.sidebar.find_row.label.text() == f"{len(expected)} of {len(expected)} in this chat"


def test_clearing_the_search_clears_the_marks(qtbot, make_window, data_dir):
    win, ids = searched(qtbot, make_window, data_dir)
    newest = win.transcript.hit_index()
    win.sidebar.search.setFocus()
    qtbot.keyClick(win.sidebar.search, Qt.Key.Key_Escape)
    assert win.sidebar.search.text() == ""
    assert not win.sidebar.find_row.isVisible()
    assert marked(win.transcript.widgets()[newest]) == 0 and win.transcript.hit_index() is None
    assert not win.actions["find_older"].isEnabled()
    win.actions["find_older"].trigger()  # nothing to find: nothing happens
    assert win.transcript.hit_index() is None


def test_the_count_follows_the_chat(qtbot, make_window, data_dir):
    win, ids = searched(qtbot, make_window, data_dir)
    expected = hits_expected(ids)
    newest = index_of(win, expected[-1])
    win.transcript.widgets()[newest].actions_row.button("delete").click()
    assert win.sidebar.find_row.label.text() == f"{len(expected) - 1} matches in this chat"
    assert win.transcript.hit_index() is None
    win.sidebar.search.setText("no such words")
    assert not win.sidebar.find_row.isVisible()
    win.sidebar.search.setText("Hi!")  # another chat holds it; this one does not
    assert not win.sidebar.find_row.isVisible() and win.sidebar.find_row.label.text() == "0 matches in this chat"


def test_a_new_answer_holding_the_text_is_marked_and_counted(qtbot, make_window, data_dir):
    recipes(data_dir, pairs=2)
    win = make_window(FakeBackend(tokens=["More", " sourdough", "."]))
    win.sidebar.search.setText("sourdough")
    assert win.sidebar.find_row.label.text() == "2 matches in this chat"
    win.composer.setPlainText("And then?")
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    assert win.sidebar.find_row.label.text() == "3 matches in this chat"
    assert marked(win.transcript.widgets()[-1]) == 1


def test_marks_are_found_across_the_displays_breaks_and_case(qapp):
    """A long run gets zero-width spaces for display (app.markdown.breakable); a hit across one is still
    marked, in any case, and the hidden streamed text of a rendered answer is not searched."""
    answer = AssistantMessage("Fake")
    run = "x" * 995 + "SourDough" + "y" * 50  # a break opportunity is put after the 1,000th character
    answer.restore(run, "stop")
    shown = [v for v in answer.findChildren(RichText) if v.isVisibleTo(answer)]
    assert ZERO_WIDTH_SPACE in shown[0].toPlainText()
    assert mark(answer, "sourdough", 0)[0] is shown[0]
    assert marked(answer) == 1
    assert mark(answer, "", None) is None and marked(answer) == 0


def test_the_count_row_words(qapp):
    row = FindRow()
    row.show_count(None, 1)
    assert row.label.text() == "1 match in this chat" and not row.isHidden()
    row.show_count(2, 5)
    assert row.label.text() == "2 of 5 in this chat"
    row.show_count(1_088, 3_133_800)
    assert row.label.text() == "1,088 of 3,133,800 in this chat"
    row.show_count(1, 2, not_shown=True)
    assert row.label.text() == ("1 of 2 in this chat: in the part of a long question not shown "
                                "(Copy or Edit shows all of it)")
    row.show_count(None, 0)
    assert row.isHidden()


def test_a_hit_is_counted_as_the_chat_shows_the_words(qtbot, make_window, data_dir):
    """Trial 49: the count read the stored Markdown and the marks the displayed text: "**very" or a link's
    address counted "1 of 1" with nothing marked, and a phrase across bold or a link was never found."""
    store = Store(data_dir)
    chat = store.create_conversation("Marks")
    store.add_message(chat.id, "user", "Tell me 😀😀 about very good bread")
    store.add_message(chat.id, "assistant", "It is **very** good; see [the docs](https://example.org/bread).")
    store.close()
    win = make_window(FakeBackend())
    for query, count in (("very good", 2), ("the docs", 1), ("**very", 0), ("example.org", 0)):
        win.sidebar.search.setText(query)
        assert len(win.transcript.set_query(query)) == count, query
    win.sidebar.search.setText("very good")
    [question, answer] = win.transcript.widgets()
    assert marked(answer) == 1
    label = question.findChildren(FittingLabel)[0]
    assert label.selectedText() == ""  # not the current hit: not marked (a label's selection looks current)
    win.transcript.show_hit(0, 0)
    assert label.selectedText() == "very good"  # (after two emoji: Qt counts UTF-16 units)


def test_an_accent_written_apart_is_found_as_typed(qtbot, make_window, data_dir):
    """Trial 69 F10: "é" typed did not find "e" followed by a combining acute accent (as macOS and some
    web pages write it), neither in the chat list nor in the chat."""
    store = Store(data_dir)
    chat = store.create_conversation("Cafe\u0301 chat")
    store.add_message(chat.id, "user", "Where is the cafe\u0301?")
    store.add_message(chat.id, "assistant", "The **CAFE\u0301** is near the station; the cafe is not.")
    other = store.create_conversation("Other")
    store.add_message(other.id, "user", "Hello")
    store.close()
    win = make_window(FakeBackend())
    win.open_conversation(chat.id)
    for query in ("café", "CAFÉ", "cafe\u0301"):
        win.sidebar.search.setText(query)
        assert win.sidebar.titles() == ["Cafe\u0301 chat"], query
        assert win.transcript.set_query(query) == [(0, 0), (1, 0)], query  # (the title is not in the chat)
    [question, answer] = win.transcript.widgets()
    view = [v for v in answer.findChildren(RichText) if v.isVisibleTo(answer)][0]
    starts = sorted(sel.cursor.selectionStart() for sel in view.extraSelections())
    assert [view.toPlainText()[i:i + 5] for i in starts] == ["CAFE\u0301"]
    win.sidebar.search.setText("cafe")  # "é" is not "e": the hit is the plain "cafe" only
    assert len(win.transcript.set_query("cafe")) == 1 and marked(answer) == 1 and marked(question) == 0


def current_marks(message) -> list[int]:
    """The start of each hit marked as the current one (the full highlight) in ``message``'s text views."""
    return [s.cursor.selectionStart() for v in message.findChildren(RichText) for s in v.extraSelections()
            if s.format.hasProperty(QTextFormat.Property.ForegroundBrush)]


def test_f3_steps_hit_by_hit_within_a_message(qtbot, make_window, data_dir):
    """Trial 49: a message holding the words many times counted once ("1 of 1" for 111 hits in one
    table) and F3 went on to the next message; a question's label marked only its first hit."""
    store = Store(data_dir)
    chat = store.create_conversation("Bread")
    question = f"Rye or wheat? {FILLER} And which rye?"
    store.add_message(chat.id, "user", question)
    answer_text = f"Rye first. {FILLER}\n\nThen rye again. {FILLER}\n\nLast, rye."
    store.add_message(chat.id, "assistant", answer_text)
    store.close()
    win = make_window(FakeBackend())
    win.resize(700, 400)
    win.sidebar.search.setText("rye")
    [asked, answer] = win.transcript.widgets()
    assert win.sidebar.find_row.label.text() == "5 matches in this chat"
    assert marked(answer) == 3 and current_marks(answer) == []
    starts = []
    for step in range(5):
        win.actions["find_older"].trigger()
        assert win.sidebar.find_row.label.text() == f"{step + 1} of 5 in this chat"
        index, number = win.transcript.current_hit()
        assert (index, number) == ((1, 2 - step) if step < 3 else (0, 4 - step))
        qtbot.waitUntil(lambda: hit_on_screen(win, index, number, "rye"), timeout=3000)
        label = asked.findChildren(FittingLabel)[0]
        plain = label.text().replace(ZERO_WIDTH_SPACE, "")
        if index == 1:
            [current] = current_marks(answer)
            starts.append(current)
            assert marked(answer) == 3
            # The question's two hits are tinted, neither selected (a selection looks current).
            assert len(label.marks()) == 2 and not label.hasSelectedText()
        else:
            assert label.selectedText() == ("rye" if number == 1 else "Rye")
            starts.append(plain.index("rye") if number == 1 else plain.index("Rye"))
            assert current_marks(answer) == []  # the answer's hits are all lighter now
            [other] = label.marks()  # the question's other hit: tinted
            assert label.text()[other[0]:other[0] + other[1]] == ("Rye" if number == 1 else "rye")
    assert starts[0] > starts[1] > starts[2] and starts[3] > starts[4] == 0  # newest first: up the page
    win.actions["find_older"].trigger()  # round: the newest again
    assert win.transcript.current_hit() == (1, 2)


def test_a_hit_far_down_a_long_question_is_where_the_view_scrolls(qtbot, make_window, data_dir):
    store = Store(data_dir)
    chat = store.create_conversation("Long question")
    store.add_message(chat.id, "user", FILLER * 4 + "Where is the needle?")
    store.add_message(chat.id, "assistant", "Here.")
    store.close()
    win = make_window(FakeBackend())
    win.resize(700, 400)
    win.sidebar.search.setText("needle")
    win.actions["find_older"].trigger()
    [asked, _] = win.transcript.widgets()
    label = asked.findChildren(FittingLabel)[0]
    qtbot.waitUntil(lambda: hit_on_screen(win, 0, 0, "needle"), timeout=3000)
    hit = mark(asked, "needle", 0)
    assert hit[0] is label and label.selectedText() == "needle"
    assert hit_top(hit) > label.height() * 3 // 4  # its last line, not the label's top


def test_other_words_have_no_current_hit_until_f3(qtbot, make_window, data_dir):
    """The row said "N matches" for the new words while the old current hit kept its full highlight."""
    win, ids = searched(qtbot, make_window, data_dir)
    assert win.sidebar.find_row.label.text().startswith("1 of ")
    win.sidebar.search.setText("sourdough starter")
    assert win.sidebar.find_row.label.text() == "6 matches in this chat"  # (across the answers' bold)
    assert win.transcript.current_hit() is None
    assert all(current_marks(win.transcript.widgets()[i]) == [] for i in win.transcript.built_range())
    win.actions["find_older"].trigger()
    assert win.sidebar.find_row.label.text() == "1 of 6 in this chat"
    assert len(current_marks(win.transcript.widgets()[win.transcript.hit_index()])) == 1


def test_an_answer_of_more_hits_than_marked_before_has_them_all_marked(qapp):
    """Trial 51: 1,500 hits in one answer, marks stopped at the 1,000th: F3, which starts at the end,
    moved the counter while the mark stayed on the 1,000th."""
    answer = AssistantMessage("Fake")
    answer.restore("zq " * 1500, "stop")
    hit = mark(answer, "zq", 1499)
    assert marked(answer) == 1500 and hit[1].selectionStart() == 3 * 1499


def test_an_answer_of_thousands_of_hits_marks_those_around_the_current_one(qapp):
    """Trial 69 F6: an answer of 20,000 hits froze the window 29 s at each search (QTextDocument.find
    took longer per call the longer the answer, and every hit was marked and painted)."""
    from app.find_in_chat import MAX_MARKS

    answer = AssistantMessage("Fake")
    answer.restore("**zq** 😀\n\n" * 5000, "stop")

    def marks():
        return sorted(sel.cursor.selectionStart() for v in answer.findChildren(RichText) for sel in v.extraSelections())
    assert mark(answer, "zq", None) is None
    assert marked(answer) == MAX_MARKS == 2000 and marks()[0] == 6 * 3000  # the last ones ("zq 😀" and a break)
    hit = mark(answer, "zq", 10)
    assert marks() == [6 * i for i in range(MAX_MARKS)] and hit[1].selectionStart() == 60
    assert (hit[1].selectionEnd(), hit[1].selectedText()) == (62, "zq")
    hit = mark(answer, "zq", 4000)  # F3 far on: its neighbours marked
    assert marks()[0] == 6 * 3000 and hit[1].selectionStart() == 6 * 4000
    current = [sel for v in answer.findChildren(RichText) for sel in v.extraSelections()
               if sel.cursor.selectionStart() == 6 * 4000]
    assert current[0].format.background() != [sel for v in answer.findChildren(RichText)
                                               for sel in v.extraSelections()][0].format.background()


def test_a_questions_other_hits_are_tinted_where_their_words_are(qtbot, make_window, data_dir):
    """Trial 50's leftover: a question's label showed its current hit only (one selection); its
    other hits are tinted under their words, as an answer's are."""
    store = Store(data_dir)
    chat = store.create_conversation("Bread")
    store.add_message(chat.id, "user", f"Rye or wheat? {FILLER} And which rye?")
    store.add_message(chat.id, "assistant", "Wheat.")
    store.close()
    win = make_window(FakeBackend())
    win.resize(700, 500)
    win.sidebar.search.setText("rye")
    [asked, _] = win.transcript.widgets()
    label = asked.findChildren(FittingLabel)[0]
    assert len(label.marks()) == 2 and not label.hasSelectedText()  # no current hit until F3
    first, last = label.mark_rects()
    width = label.fontMetrics().horizontalAdvance
    assert abs(first.width() - width("Rye")) <= 1 and abs(last.width() - width("rye")) <= 1
    assert first.left() == label.contentsRect().left() and last.top() > first.top()  # first word; a later line
    assert abs(last.top() - hit_top(mark(asked, "rye", 1))) <= 1  # where the view scrolls for it
    picture = label.grab().toImage()
    tinted = picture.pixelColor(int(first.left()) + 1, int(first.top()) + 1)
    plain = picture.pixelColor(int(first.right()) + 30, int(first.top()) + 1)
    assert tinted != plain  # the tint is painted, under the text
    win.sidebar.search.setText("")
    assert label.marks() == [] and label.mark_rects() == []


def test_words_only_in_another_version_are_said_and_f3_shows_that_version(qtbot, make_window, data_dir):
    """Trial 53: a search whose words were only in another version of a message listed the chat, and
    opened it with no mark, no count, and F3 doing nothing."""
    store = Store(data_dir)
    chat = store.create_conversation("Capitals")
    store.add_message(chat.id, "user", "Capital of France?")
    paris = store.add_message(chat.id, "assistant", "Paris.")
    store.add_message(chat.id, "user", "And of Italy?", parent_id=paris.id)
    store.add_message(chat.id, "assistant", "Rome, once the heart of the Roman Empire.")
    spain = store.add_message(chat.id, "user", "And of Spain?", parent_id=paris.id)  # the edit: shown now
    store.add_message(chat.id, "assistant", "Madrid.")
    assert store.other_version_hits(chat.id, "roman empire") == [spain.id - 1]
    assert store.other_version_hits(chat.id, "madrid") == []
    store.close()
    backend = FakeBackend()
    win = make_window(backend)
    sidebar_width = win.sidebar.width()
    win.sidebar.search.setText("Roman Empire")
    assert [c.title for c in win.store.conversations("Roman Empire")] == ["Capitals"]
    assert [w.text for w in win.transcript.widgets()][-2:] == ["And of Spain?", "Madrid."]
    row = win.sidebar.find_row
    assert row.isVisible() and row.label.text() == "In another version: F3 shows it"
    assert win.actions["find_older"].isEnabled()
    assert win.sidebar.width() == sidebar_width  # the row's words do not widen the sidebar
    win.actions["find_older"].trigger()
    texts = [w.text for w in win.transcript.widgets()]
    assert texts == ["Capital of France?", "Paris.", "And of Italy?", "Rome, once the heart of the Roman Empire."]
    assert row.label.text() == "1 of 1 in this chat" and win.transcript.current_hit() == (3, 0)
    assert win.transcript.widgets()[2].actions_row.versions.label.text() == "1 / 2"
    qtbot.waitUntil(lambda: [m.text for m in backend.history][-1:] == [texts[-1]], timeout=3000)
    reopened = Store(data_dir)  # the version shown is stored, as ‹ › stores it
    assert [m.text for m in reopened.messages(chat.id)][-1] == texts[-1]
    reopened.close()


def test_enter_or_down_in_the_search_reaches_the_chat_it_lists_when_the_open_one_holds_none(qtbot, make_window,
                                                                                             data_dir):
    """Trial 60: with a chat open that the search does not list, Enter and Down in the search did
    nothing; reaching the listed chat took Tab, Down, Enter."""
    ids = recipes(data_dir, 5)
    win = make_window(FakeBackend())
    chat = win.keeper.current_id
    for key in (Qt.Key.Key_Return, Qt.Key.Key_Down):
        win.open_conversation(None)
        win.sidebar.search.setFocus()
        win.sidebar.search.setText("sourdough")
        assert win.sidebar.ids() == [chat] and win.keeper.current_id is None
        qtbot.keyClick(win.sidebar.search, key)
        assert win.keeper.current_id == chat, key
        expected = hits_expected(ids, 5)
        assert win.transcript.widgets()[win.transcript.hit_index()].message_id == expected[-1]  # its newest hit
    assert win.sidebar.list.hasFocus()  # Down: in the list, where Up / Down go on through the chats
    win.sidebar.search.setFocus()
    qtbot.keyClick(win.sidebar.search, Qt.Key.Key_Return)  # in the open chat, Enter steps through its hits
    assert win.keeper.current_id == chat and win.transcript.widgets()[win.transcript.hit_index()].message_id == \
        expected[-2]


def test_a_hit_past_the_shown_part_of_a_long_question_is_counted_and_said(qtbot, make_window, data_dir):
    """Trial 62: a question of 35,000 characters shows its first 20,000; a word past them kept the chat
    listed as holding it, and the open chat counted nothing, F3 did nothing."""
    from app.messages import USER_TEXT_SHOWN

    store = Store(data_dir)
    chat = store.create_conversation("Long question")
    store.add_message(chat.id, "user", "A needle here. " + "Filler words. " * 2500 + "ZEBRAWORD is my last word.")
    store.add_message(chat.id, "assistant", "No needle, no ZEBRAWORD.")
    store.close()
    win = make_window(FakeBackend())
    win.resize(800, 500)
    win.sidebar.search.setText("zebraword")
    row = win.sidebar.find_row
    assert row.label.text() == "2 matches in this chat"
    win.actions["find_older"].trigger()  # the newest: the answer's
    assert row.label.text() == "1 of 2 in this chat" and not win.transcript.hit_not_shown()
    win.actions["find_older"].trigger()
    asked = win.transcript.widgets()[0]
    assert len(asked.text) > USER_TEXT_SHOWN and "ZEBRAWORD" not in asked.findChildren(FittingLabel)[0].text()
    assert win.transcript.hit_not_shown()
    assert row.label.text() == ("2 of 2 in this chat: in the part of a long question not shown "
                                "(Copy or Edit shows all of it)")
    more = asked.findChild(QLabel, "userTextMore")
    qtbot.waitUntil(lambda: 0 <= more.mapTo(win.transcript.viewport(), QPoint(0, 0)).y()
                    < win.transcript.viewport().height(), timeout=3000)
    win.actions["find_older"].trigger()  # round to the newest: shown again
    assert row.label.text() == "1 of 2 in this chat" and not win.transcript.hit_not_shown()
    win.sidebar.search.setText("needle")  # within the shown part: marked as before
    win.actions["find_older"].trigger()
    win.actions["find_older"].trigger()
    assert row.label.text() == "2 of 2 in this chat"
    assert asked.findChildren(FittingLabel)[0].selectedText() == "needle"
