"""How finished answers render (a GUI trial's findings): block quotes look like quotes, headings have
room above them, code lines stay whole and scroll sideways, and the banner never covers the chat."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QPointF, QRect, Qt
from PySide6.QtGui import QKeySequence, QPalette, QTextFormat, QTextTable
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QFrame, QLabel, QScrollArea, QTextEdit

from app.backends.fake import FakeBackend
from app.markdown import (
    CODE_SCROLL_LIMIT,
    HEADING_SPACE,
    LIST_ITEM_SPACE,
    QUOTE_INDENT,
    QUOTE_RULE,
    STREAM_BLOCK,
    ZERO_WIDTH_SPACE,
    CodeBlock,
    RichText,
)

LONG_CODE_LINE = "            print('a very long line " + "that goes on and on " * 12 + "past the edge')"
ANSWER = ("Intro.\n\n# Title\n\nUnder the title.\n\n## Section\n\nBefore the quote.\n\n> Quoted words.\n>\n"
          "> > Quoted deeper.\n\nThen a list:\n\n- one\n- two\n- three\n\nAfter the list.\n\n"
          f"```python\ndef main():\n    for i in range(3):\n        if i:\n{LONG_CODE_LINE}\n    return 0\n```\n\nEnd.")


def _settle(qtbot) -> None:
    for _ in range(5):
        QApplication.processEvents()
        qtbot.wait(20)


@pytest.fixture
def app_style(qapp):
    """The real style sheet (its 14 px answer text, 10 px scroll bars), light theme afterwards."""
    from app.paths import resource
    from app.theme import apply_theme

    old = qapp.styleSheet()
    qapp.setStyleSheet(resource("style.qss").read_text(encoding="utf-8"))
    yield
    apply_theme("light")
    qapp.setStyleSheet(old)


def _answer(qtbot, make_window, width=1000, height=760):
    win = make_window(FakeBackend(tokens=["ok"]))
    win.resize(width, height)
    win.transcript.add_user_message("Explain", [])
    answer = win.transcript.add_stored_answer("FakeVLM", ANSWER, "stop", "12 tokens")
    _settle(qtbot)
    return win, answer


def _blocks(view: RichText) -> dict[str, object]:
    """The view's blocks by their text."""
    found, block = {}, view.document().begin()
    while block.isValid():
        found[block.text()] = block
        block = block.next()
    return found


def _top(block) -> float:
    return block.layout().position().y()


def _bottom(block) -> float:
    return _top(block) + block.layout().boundingRect().height()


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_block_quotes_are_indented_by_level_with_a_rule_in_the_theme_colour(qtbot, make_window, app_style, theme):
    from app.theme import apply_theme

    apply_theme(theme)
    _win, answer = _answer(qtbot, make_window)
    view = answer.rendered_widgets()[0]
    blocks = _blocks(view)
    quoted, deeper, plain = blocks["Quoted words."], blocks["Quoted deeper."], blocks["Before the quote."]
    assert quoted.blockFormat().property(QTextFormat.Property.BlockQuoteLevel) == 1
    assert quoted.blockFormat().leftMargin() == QUOTE_INDENT  # Qt's own: 40 px and no rule
    assert deeper.blockFormat().leftMargin() == 2 * QUOTE_INDENT
    assert plain.blockFormat().leftMargin() == 0
    # The rules are painted, in the palette's Mid colour of the theme showing: one beside the first
    # quote, two beside the nested one, none beside the plain paragraph.
    image = view.viewport().grab().toImage()
    mid = view.palette().color(QPalette.ColorRole.Mid)
    assert mid == QApplication.palette().color(QPalette.ColorRole.Mid)

    def rule_at(x: int, block) -> bool:
        return image.pixelColor(x, round((_top(block) + _bottom(block)) / 2)) == mid

    first, second = 1 + QUOTE_RULE // 2, QUOTE_INDENT + 1 + QUOTE_RULE // 2
    assert rule_at(first, quoted) and not rule_at(second, quoted)
    assert rule_at(first, deeper) and rule_at(second, deeper)
    assert not rule_at(first, plain)
    text_left = round(quoted.layout().lineAt(0).naturalTextRect().left() + quoted.layout().position().x())
    assert text_left >= QUOTE_INDENT > first + QUOTE_RULE  # the words clear of the rule


def test_headings_have_space_above_and_list_items_sit_close(qtbot, make_window, app_style):
    _win, answer = _answer(qtbot, make_window)
    blocks = _blocks(answer.rendered_widgets()[0])
    title, section = blocks["Title"], blocks["Section"]
    assert title.blockFormat().headingLevel() == 1 and section.blockFormat().headingLevel() == 2
    # Measured as laid out: Qt's importer gave headings no margin (6 px, the paragraph's own).
    assert _top(title) - _bottom(blocks["Intro."]) >= HEADING_SPACE[1]
    assert _top(section) - _bottom(blocks["Under the title."]) >= HEADING_SPACE[2]
    # A list: its items close together, apart from the text around it as paragraphs are.
    assert _top(blocks["two"]) - _bottom(blocks["one"]) == LIST_ITEM_SPACE
    assert _top(blocks["one"]) - _bottom(blocks["Then a list:"]) == 6
    assert _top(blocks["After the list."]) - _bottom(blocks["three"]) == 6
    # A heading opening an answer stays at the top of its bubble.
    view = RichText()
    view.setMarkdown("# Opening\n\nText.")
    assert view.document().begin().blockFormat().topMargin() == 0


def test_code_lines_stay_whole_and_the_block_scrolls_sideways(qtbot, make_window, app_style):
    win, answer = _answer(qtbot, make_window, width=900, height=500)
    code = answer.findChild(CodeBlock).view
    assert code.lineWrapMode() == QTextEdit.LineWrapMode.NoWrap
    block = code.document().begin()
    while block.isValid():  # every line one line: the long one's indentation stays visible
        assert block.layout().lineCount() == 1, block.text()
        block = block.next()
    assert code.document().size().width() > code.viewport().width()
    bar = code.horizontalScrollBar()
    assert code.horizontalScrollBarPolicy() == Qt.ScrollBarPolicy.ScrollBarAlwaysOn and bar.isVisible()
    assert bar.maximum() > 0
    # All lines show above the bar: nothing to scroll down inside the block.
    assert code.viewport().height() >= code.document().size().height()
    assert code.verticalScrollBar().maximum() == 0
    assert QRect(bar.mapTo(code, QPoint(0, 0)), bar.size()).top() >= code.viewport().geometry().bottom()

    # The wheel over the code scrolls the chat down; sideways, it scrolls the code.
    chat = win.transcript.verticalScrollBar()
    win.transcript.ensureWidgetVisible(code, 0, 60)
    _settle(qtbot)
    centre = QPointF(code.viewport().mapTo(win, code.viewport().rect().center()))
    assert win.childAt(centre.toPoint()) is code.viewport()
    start = chat.value()
    assert 0 < start

    def wheel(dx: int, dy: int, keys=Qt.KeyboardModifier.NoModifier) -> None:  # as the system delivers it
        QTest.wheelEvent(win.windowHandle(), centre, QPoint(dx, dy), QPoint(0, 0), keys)  # (spontaneous)
        QApplication.processEvents()

    wheel(0, 120)
    assert chat.value() < start and bar.value() == 0
    chat.setValue(start)
    wheel(-120, 0)
    assert bar.value() > 0 and chat.value() == start
    # Shift+wheel, a mouse without a tilt wheel's sideways (a trial found it paged the chat instead):
    # three lines' worth of steps a notch, as Qt's own wheel; back with the other way.
    sideways = bar.value()
    wheel(0, -120, Qt.KeyboardModifier.ShiftModifier)
    assert bar.value() == sideways + 3 * bar.singleStep() and chat.value() == start
    wheel(0, 120, Qt.KeyboardModifier.ShiftModifier)
    assert bar.value() == sideways and chat.value() == start

    # Wide enough for every line: no bar, and the block no taller than its lines.
    win.resize(1400, 800)
    _settle(qtbot)
    if code.document().size().width() <= code.viewport().width():
        assert code.horizontalScrollBarPolicy() == Qt.ScrollBarPolicy.ScrollBarAlwaysOff
        assert code.height() - code.contentsMargins().top() - code.contentsMargins().bottom() == round(
            code.document().size().height())
    short = CodeBlock("x = 1")
    short.resize(400, 100)
    short.show()
    _settle(qtbot)
    assert short.view.horizontalScrollBarPolicy() == Qt.ScrollBarPolicy.ScrollBarAlwaysOff
    short.close()


def test_a_code_line_too_long_to_scroll_wraps_with_break_opportunities(qtbot):
    """Past CODE_SCROLL_LIMIT characters a line wraps (laid out whole, 5 million characters measured
    72 px wide: Qt's line width overflowed), with RichText's zero-width spaces keeping it linear."""
    line = "    x = " + "a" * 300_000
    block = CodeBlock(line)
    block.resize(600, 100)
    block.show()
    QApplication.processEvents()
    view = block.view
    assert view.lineWrapMode() == QTextEdit.LineWrapMode.WidgetWidth
    assert ZERO_WIDTH_SPACE in view.toPlainText()
    assert view.horizontalScrollBarPolicy() == Qt.ScrollBarPolicy.ScrollBarAlwaysOff
    assert view.height() >= view.document().size().height() > 100 * view.fontMetrics().lineSpacing()
    block.close()
    assert CodeBlock("y" * CODE_SCROLL_LIMIT).view.lineWrapMode() == QTextEdit.LineWrapMode.NoWrap


@pytest.mark.parametrize("size", [(800, 600), (1280, 800)])
def test_a_long_banner_pushes_the_chat_down_and_scrolls_its_message(qtbot, make_window, app_style, size):
    from app.banner import MAX_LINES

    win = make_window(FakeBackend(tokens=["ok"]))
    win.resize(*size)
    win.transcript.add_user_message("Explain", [])
    win.transcript.add_stored_answer("FakeVLM", "An answer. " * 40, "stop", "12 tokens")
    lines = [f"photo-{i}.heic was not attached: this model reads images it can decode, and this one it cannot."
             for i in range(20)]
    win.banner.show_error("\n".join(lines))
    _settle(qtbot)
    win.transcript.verticalScrollBar().setValue(0)
    _settle(qtbot)

    def rect(widget) -> QRect:
        return QRect(widget.mapTo(win, QPoint(0, 0)), widget.size())

    banner, viewport = rect(win.banner), rect(win.transcript.viewport())
    first = rect(win.transcript.widgets()[0])
    assert not banner.intersects(viewport) and not banner.intersects(first)
    assert banner.bottom() < first.top()
    # The chat keeps its room, and the whole message can be read: before, the banner grew to all of
    # it (the transcript left 68 px at 800 x 600) and was still cut off mid-line at its edge.
    label = win.banner.findChild(QLabel, "errorMessage")
    line = label.fontMetrics().lineSpacing()
    assert viewport.height() >= 150
    assert label.height() >= label.heightForWidth(label.width())
    header = win.findChild(QFrame, "header")
    assert header.height() >= header.sizeHint().height()  # not squeezed either
    # At most MAX_LINES lines tall (and its frame); the rest scrolls inside the banner.
    assert banner.height() <= MAX_LINES * line + 40
    scroll = win.banner.findChild(QScrollArea, "bannerScroll")
    assert scroll.height() == MAX_LINES * line
    assert scroll.verticalScrollBar().maximum() > 0
    # A short message: the banner as tall as its line, no scroll bar.
    win.banner.show_info("Exported.")
    _settle(qtbot)
    assert scroll.verticalScrollBar().maximum() == 0 and scroll.height() <= 2 * line


def test_tags_in_an_answer_are_shown_as_text_not_swallowed(qtbot, make_window):
    """Found by a trial: "vector<int>" outside a code span was read as an HTML tag, and the rest of
    the answer vanished with it (the full text stored, the screen silently cut). Raw HTML is text;
    Markdown around it, autolinks and code spans still render."""
    win = make_window(FakeBackend(tokens=["ok"]))
    text = ("Use vector<int> v; a List<T> too.\n\nThe <script> tag runs JS; <b>bold</b> stays as typed.\n\n"
            "<div>\nA block of HTML\n</div>\n\n**Strong**, `code<T>` and <https://example.com>.\n\nLast paragraph.")
    answer = win.transcript.add_stored_answer("FakeVLM", text, "stop", "")
    _settle(qtbot)
    [view] = answer.rendered_widgets()
    shown = view.document().toPlainText()
    assert shown == ("Use vector<int> v; a List<T> too.\nThe <script> tag runs JS; <b>bold</b> stays as typed.\n"
                     "<div>\nA block of HTML\n</div>\nStrong, code<T> and https://example.com.\nLast paragraph.")
    html = view.document().toHtml()
    assert "font-weight:700" in html and 'href="https://example.com"' in html


@pytest.mark.parametrize("piece", ["Q" * 997, "lorem ipsum dolor sit amet " * 37])
def test_a_streamed_paragraph_goes_on_in_new_blocks_so_each_token_lays_out_little(qapp, piece):
    """Found by a trial: Qt lays out a whole paragraph on each insert into it, so an answer streamed
    as one long paragraph cost its length per token (one 500,000-character word held the window
    ~20 s). The streamed view's blocks stay short, broken at a space where a piece has one; the
    text shown is the answer's (the answer keeps its own text; the finished one is rendered again)."""
    view = RichText()
    for _ in range(300):
        view.append_plain(piece)
    lengths, block = [], view.document().begin()
    while block.isValid():
        lengths.append(len(block.text()))
        if " " in piece and block.next().isValid():
            assert block.text().endswith(" ")
        block = block.next()
    assert len(lengths) > 100 and max(lengths) <= STREAM_BLOCK + len(piece)
    shown = view.document().toPlainText().replace(ZERO_WIDTH_SPACE, "").replace("\n", "")
    assert shown == piece * 300


def test_a_banner_message_with_a_long_path_wraps_and_copies_as_it_was(qtbot, make_window, qapp):
    """Found by a trial: a word, path or URL wider than the banner showed as one line cut at its
    right edge, the rest unreachable. It wraps now; the message, and a copy of it, are as given;
    a file name that looks like markup is shown as text."""
    win = make_window(FakeBackend(tokens=["ok"]))
    win.resize(800, 600)
    path = "/home/someone/" + "0123456789abcdef" * 16 + ".png"  # a content hash: no break opportunity
    win.banner.show_error(f"Not a recognised image file: {path}")
    _settle(qtbot)
    label = win.banner.findChild(QLabel, "errorMessage")
    assert label.textFormat() == Qt.TextFormat.PlainText
    assert win.banner.message() == f"Not a recognised image file: {path}"
    # Wrapped: more than one line tall, and no line wider than the label.
    line = label.fontMetrics().lineSpacing()
    assert label.heightForWidth(label.width()) >= 3 * line
    assert label.sizeHint().width() <= label.width() + 1 or label.minimumSizeHint().width() <= label.width()
    label.setSelection(0, len(label.text()))
    QTest.keySequence(label, QKeySequence(QKeySequence.StandardKey.Copy))
    assert qapp.clipboard().text() == f"Not a recognised image file: {path}"
    win.banner.show_error("Not a recognised image file: <b>x</b>.png")
    _settle(qtbot)
    assert label.text() == "Not a recognised image file: <b>x</b>.png"


def test_a_quote_inside_a_list_item_has_its_rule_beside_its_text(qapp):
    """Found by a trial: the rule of a quote in a list item was drawn at the answer's edge, left of
    the bullets, ~57 px from its text. Each rule sits just left of its quote's text, a list inside
    the quote included."""
    view = RichText()
    view.resize(600, 400)
    view.setMarkdown("> top\n\n- one\n- two\n  > quoted in the item\n  > - a list in that quote\n\nend")
    view.show()
    QApplication.processEvents()
    rules = view.quote_rules()
    assert [r.x() for r in rules] == [1, 1 + view.document().indentWidth(), 1 + view.document().indentWidth()]
    block = view.document().findBlockByNumber(3)
    assert block.text() == "quoted in the item"
    text_x = block.layout().lineAt(0).x()
    assert 0 < text_x - (rules[1].x() + QUOTE_RULE) <= QUOTE_INDENT


def test_small_headings_are_body_size_and_a_table_keeps_its_distance(qapp):
    """Found by a trial: headings of levels 5 and 6 were drawn smaller than the text (about 10 and
    8 px), and a table's border sat on the list item above it."""
    from PySide6.QtGui import QTextTable

    view = RichText()
    view.resize(600, 400)
    view.setMarkdown("Body text.\n\n##### Five\n\n###### Six\n\n1. first\n2. second\n\n| a | b |\n|---|---|\n| 1 | 2 |")
    view.show()
    QApplication.processEvents()
    blocks = _blocks(view)
    body = blocks["Body text."].layout().boundingRect().height()
    for name in ("Five", "Six"):
        block = blocks[name]
        fmt = block.begin().fragment().charFormat()
        assert fmt.property(QTextFormat.Property.FontSizeAdjustment) == 0 and fmt.fontWeight() == 700
        assert block.layout().boundingRect().height() >= body
    [table] = [f for f in view.document().rootFrame().childFrames() if isinstance(f, QTextTable)]
    assert table.format().topMargin() >= 6 and table.format().bottomMargin() >= 6


def test_a_bare_url_ending_a_sentence_leaves_the_full_stop_out_of_its_link(qapp):
    """Found by a trial: "see https://x.y/z." linked to "https://x.y/z." (GitHub leaves sentence
    punctuation out of its autolinks); bold around the URL stays bold, the text is unchanged."""
    view = RichText()
    view.setMarkdown("See https://x.y/z. Then **https://x.y/q!** and [a link](https://x.y/r.) too.")
    block = view.document().begin()
    fragments, it = [], block.begin()
    while not it.atEnd():
        fmt = it.fragment().charFormat()
        fragments.append((it.fragment().text(), fmt.anchorHref() if fmt.isAnchor() else None, fmt.fontWeight()))
        it += 1
    assert fragments == [("See ", None, 400), ("https://x.y/z", "https://x.y/z", 400), (". Then ", None, 400),
                         ("https://x.y/q", "https://x.y/q", 700), ("!", None, 700), (" and ", None, 400),
                         ("a link", "https://x.y/r.", 400), (" too.", None, 400)]
    assert view.document().toPlainText() == "See https://x.y/z. Then https://x.y/q! and a link too."


def test_tables_are_blocks_of_their_own_that_scroll_sideways(qtbot, make_window):
    """Found by a trial: a 30-column table was squeezed into the bubble, its cells wrapped a letter a
    line (4,355 px tall). A table is laid out at its columns' widths in a view of its own that
    scrolls sideways, from its first column; text around it and small tables are unchanged."""
    from app.markdown import TableText, split_tables

    table = "| " + " | ".join(f"col{i}" for i in range(30)) + " |\n|" + "---|" * 30 + "\n" + "\n".join(
        "| " + " | ".join(f"cell {r}.{i}" for i in range(30)) + " |" for r in range(4))
    text = f"Intro with a | pipe.\n\n{table}\n\nAfter.\n\n> | quoted | table |\n> |---|---|\n> | 1 | 2 |"
    assert [(b.kind, b.text) for b in split_tables(text)] == [
        ("text", "Intro with a | pipe."), ("table", table),
        ("text", "After.\n\n> | quoted | table |\n> |---|---|\n> | 1 | 2 |")]

    win = make_window(FakeBackend(tokens=["ok"]))
    win.resize(1000, 760)
    answer = win.transcript.add_stored_answer("FakeVLM", text, "stop", "")
    _settle(qtbot)
    views = answer.rendered_widgets()
    assert [type(v).__name__ for v in views] == ["RichText", "TableText", "RichText"]
    wide = views[1]
    assert isinstance(wide, TableText) and wide.lineWrapMode() == QTextEdit.LineWrapMode.NoWrap
    assert wide.horizontalScrollBar().maximum() > 0 and wide.horizontalScrollBar().value() == 0
    block, line = wide.document().begin(), wide.fontMetrics().lineSpacing()
    while block.isValid():  # every cell on one line
        assert block.layout().lineCount() <= 1, block.text()
        block = block.next()
    assert wide.height() < 12 * line  # five rows and the bar (squeezed: 4,355 px)


def test_a_table_too_big_to_lay_out_quickly_is_shown_as_its_text_under_a_note(qtbot, make_window):
    """Found by a trial: an answer holding a 5,000-row table held the window 5.4 s when it ended, and
    a chat with a 20,000-row one took 28 s to open (Qt lays a table out cell by cell). A table of more
    than TABLE_CELL_LIMIT cells is its Markdown text in a code block, a note above saying why; a
    smaller one in the same answer is still a table."""
    from app.markdown import TABLE_CELL_LIMIT, TableAsText, TableText

    def table(rows: int, columns: int) -> str:
        return "| " + " | ".join(f"h{c}" for c in range(columns)) + " |\n|" + "---|" * columns + "\n" + "\n".join(
            "| " + " | ".join(f"r{r}c{c}" for c in range(columns)) + " |" for r in range(rows))

    assert TABLE_CELL_LIMIT == 1000
    big, small = table(2500, 4), table(249, 4)  # 10,004 cells; 1,000 with the header
    win = make_window(FakeBackend(tokens=["ok"]))
    win.resize(1000, 760)
    answer = win.transcript.add_stored_answer("FakeVLM", f"Big:\n\n{big}\n\nSmall:\n\n{small}", "stop", "")
    _settle(qtbot)
    views = answer.rendered_widgets()
    assert [type(v).__name__ for v in views] == ["RichText", "TableAsText", "RichText", "TableText"]
    shown = views[1]
    assert isinstance(shown, TableAsText) and shown.isVisible()
    assert shown.note.text() == "This table has 2,500 rows and 4 columns, too many to lay out quickly, so it is shown as text."
    assert shown.note.geometry().bottom() < shown.code.geometry().top()  # the note above the text
    metrics = shown.code.view.fontMetrics()
    assert shown.code.view.toPlainText() == big and metrics.horizontalAdvance("iiii") == metrics.horizontalAdvance("WWWW")
    assert shown.code.view.lineWrapMode() == QTextEdit.LineWrapMode.NoWrap
    shown.code.copy()
    assert QApplication.clipboard().text() == big
    rendered = views[3]
    [grid] = rendered.document().rootFrame().childFrames()
    assert isinstance(rendered, TableText) and isinstance(grid, QTextTable)
    assert (grid.rows(), grid.columns()) == (250, 4)
    assert grid.cellAt(249, 3).firstCursorPosition().block().text() == "r248c3"


def test_an_answers_tables_share_one_cell_budget(qapp):
    """Trial 49: twenty tables just under the limit each took 3.8 s together. The first that would take
    the answer past TABLE_CELL_LIMIT, and every later one, is shown as text, its note saying why."""
    from app.markdown import TABLE_CELL_LIMIT, TableAsText, TableText, render_blocks

    rows = TABLE_CELL_LIMIT // 4 - 2  # (rows + the header) x 4 columns: just under the limit alone
    table = "| a | b | c | d |\n|---|---|---|---|\n" + "".join(f"| {i} | x | y | z |\n" for i in range(rows))
    widgets = render_blocks("\n\n".join([table] * 3))
    assert [type(w).__name__ for w in widgets] == ["TableText", "TableAsText", "TableAsText"]
    assert isinstance(widgets[0], TableText)
    note = widgets[1].note.text()
    assert isinstance(widgets[1], TableAsText) and note == (
        f"This table ({rows:,} rows, 4 columns) is shown as text: with this answer's tables before it, there are "
        "too many cells to lay out quickly.")
    for widget in widgets:
        widget.deleteLater()


def test_a_finished_answer_keeps_its_single_line_breaks(qtbot, make_window):
    """Trial 50: a poem streamed line by line, then ran into one paragraph when the finished answer was
    rendered (Markdown joins single line breaks with a space). Lines of one paragraph are lines of one
    block (not paragraphs spaced apart); lists, headings, quotes and code as before."""
    win = make_window(FakeBackend(tokens=["ok"]))
    text = ("Bread is a humble bread,\nA simple yet precious thing,\nKneaded by hand.\n\n"
            "- one\n- two\n\n> quoted\n> again\n\n## Next\nends here\\\nafter a backslash  \nafter two spaces\n\n"
            "```\ncode\nlines\n```")
    answer = win.transcript.add_stored_answer("FakeVLM", text, "stop", "")
    _settle(qtbot)
    view, code = answer.rendered_widgets()
    assert view.document().toPlainText() == ("Bread is a humble bread,\nA simple yet precious thing,\nKneaded by hand.\n"
                                             "one\ntwo\nquoted\nagain\nNext\nends here\nafter a backslash\n"
                                             "after two spaces")
    poem = view.document().firstBlock()
    assert poem.text().count("\u2028") == 2  # one paragraph, its lines broken (not three paragraphs)
    assert "\\" not in view.document().toPlainText()
    assert [b.text() for b in blocks(view)][1:3] == ["one", "two"]  # (list items stay items)
    view.selectAll()
    view.copy()
    assert QApplication.clipboard().text().startswith("Bread is a humble bread,\nA simple yet precious thing,\n")


def blocks(view):
    block = view.document().firstBlock()
    while block.isValid():
        yield block
        block = block.next()


def test_a_line_in_the_other_direction_is_a_paragraph_of_its_own(qtbot, make_window):
    """Trial 51: lines kept together in one paragraph took its first line's direction: Hebrew lines
    left-aligned under an English one, an English line's full stop on its left under a Hebrew one."""
    win = make_window(FakeBackend(tokens=["ok"]))
    text = ("Here is the translation:\nשלום, מה שלומך?\nאני בסדר, תודה!\n\n"
            "שאלה: מה השעה?\nThe answer is 10:30 (am).\n12:00 sharp")
    answer = win.transcript.add_stored_answer("FakeVLM", text, "stop", "")
    _settle(qtbot)
    [view] = answer.rendered_widgets()
    shown = [(b.text(), b.textDirection()) for b in blocks(view)]
    rtl, ltr = Qt.LayoutDirection.RightToLeft, Qt.LayoutDirection.LeftToRight
    assert shown == [("Here is the translation:", ltr), ("שלום, מה שלומך?\u2028אני בסדר, תודה!", rtl),
                     ("שאלה: מה השעה?", rtl), ("The answer is 10:30 (am).\u202812:00 sharp", ltr)]


@pytest.mark.parametrize("markdown, kept", [
    ("> a\n> b\n> c", "> a\u2028b\u2028c"),  # every line of a quote (the third was joined with a space)
    (">> nested quote\nback at level one?", ">> nested quote\u2028back at level one?"),  # a "lazy" line
    ("- item one\ncontinued", "- item one\u2028continued"),
    ("> a\n>> b", "> a\n>> b"), ("> - x\n> - y", "> - x\n> - y"), ("> # H\n> t", "> # H\n> t"),
    ("p\n> q", "p\n> q"), ("> quoted\n# heading", "> quoted\n# heading"), ("a\n\nb", "a\n\nb"),
])
def test_hard_breaks_keep_a_paragraphs_lines_and_no_others(markdown, kept):
    from app.markdown import hard_breaks

    assert hard_breaks(markdown) == kept


def test_a_restored_answer_is_rendered_and_one_of_blank_lines_is_shown_as_it_is(qapp):
    """A stored answer goes straight to its rendered blocks (not laid out as plain text first: 0.35 s of a
    740 KB answer's opening); one with nothing to render keeps its text in the plain view, not "…"."""
    from app.messages import AssistantMessage

    answer = AssistantMessage("Fake")
    answer.restore("Some **bold** text.\n\n```python\nx = 1\n```", "stop", "12 tokens")
    kinds = [type(widget).__name__ for widget in answer.rendered_widgets()]
    assert kinds == ["RichText", "CodeBlock"] and answer.rendered_widgets()[0].toPlainText() == "Some bold text."
    assert answer.status == "done" and answer.footer() == "12 tokens"
    blank = AssistantMessage("Fake")
    blank.restore(" \n\n ", "length")
    assert blank.rendered_widgets() == [] and blank._stream.toPlainText() == " \n\n " and blank.status == "length"
