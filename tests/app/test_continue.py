"""Continue: an answer cut short (the token limit, Stop, a quit) goes on where its text ends, in the
same message: shown under the chat's last answer only, streamed into it, stored as one answer; with
the real engine the continued answer is token for token the one generated without the cut."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.backends.fake import FakeBackend
from app.messages import CONTINUABLE
from engine.api.events import DoneEvent, GenerationParams
from engine.chat import ChatSession
from tests.engine.conftest import tiny_checkpoint  # noqa: F401  (fixture)


def ask(qtbot, win, text: str, max_new_tokens: int) -> dict:
    win.generation_params = {"max_new_tokens": max_new_tokens}
    win.composer.setPlainText(text)
    with qtbot.waitSignal(win.answer_finished, timeout=120_000) as finished:
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    return finished.args[0]


def continue_button(message):
    return message.actions_row.button("continue")


def offered(message) -> bool:
    """Continue shows under ``message`` (as soon as its row is laid out: Qt shows a widget added to a
    shown window on the next event loop turn)."""
    return continue_button(message).isVisibleTo(message)


def test_an_answer_cut_at_the_token_limit_continues_in_the_same_message(qtbot, make_window):
    backend = FakeBackend(tokens=["The", " cat", " is", " orange", "."])
    win = make_window(backend)
    assert ask(qtbot, win, "What is it?", 2)["finish_reason"] == "length"
    question, answer = win.transcript.widgets()
    assert answer.text == "The cat" and offered(answer)
    assert continue_button(answer).text() == "Continue"
    win.generation_params = {"max_new_tokens": 10}
    with qtbot.waitSignal(win.answer_finished, timeout=10_000) as finished:
        continue_button(answer).click()
    assert finished.args[0]["finish_reason"] == "stop"
    assert win.transcript.widgets() == [question, answer]  # the same message, not a new one
    assert answer.text == "The cat is orange." and not offered(answer)
    assert answer.footer().startswith("TTFT") and answer.footer().endswith("/ 5 generated tokens")  # 2 + 3 in all
    assert (backend.calls[-1]["kind"], backend.calls[-1]["text"]) == ("continue", "What is it?")
    [_q, stored] = win.store.messages(win.keeper.current_id)
    assert stored.text == "The cat is orange." and stored.status == "done"
    assert len(win.store.all_messages(win.keeper.current_id)) == 2  # no second version


def test_continue_and_regenerate_close_the_last_try_s_error(qtbot, make_window):
    """Trial 60: "Local srv: Connection refused" stayed over the answer that Continue then got."""
    backend = FakeBackend(tokens=["The", " cat", " is", " orange", "."])
    win = make_window(backend)
    ask(qtbot, win, "What is it?", 2)
    answer = win.transcript.widgets()[1]
    win.banner.show_error("Local srv: Connection refused")
    win.generation_params = {"max_new_tokens": 10}
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        continue_button(answer).click()
    assert win.banner.isHidden()
    win.banner.show_error("Local srv: Connection refused")
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        answer.actions_row.button("regenerate").click()
    assert win.banner.message() != "Local srv: Connection refused"


def test_continue_is_offered_only_under_the_last_answer_when_it_was_cut(qtbot, make_window):
    win = make_window(FakeBackend(tokens=["The", " cat", " is", " orange", "."]))
    ask(qtbot, win, "First?", 3)
    first = win.transcript.widgets()[1]
    assert offered(first)
    ask(qtbot, win, "Second?", 10)
    second = win.transcript.widgets()[3]
    assert not offered(first) and not offered(second)  # finished
    win._on_message_action("delete", 2)  # the second question goes: the first answer is last again
    assert offered(first)
    win._on_message_action("continue", 0)  # not an answer: nothing happens
    assert not win._busy
    assert set(CONTINUABLE) == {"length", "cancelled", "interrupted", "error"}


def test_a_continue_that_adds_nothing_leaves_the_answer_as_it_was(qtbot, make_window):
    """Found by a trial: a Continue that failed (there: refused as longer than the context) turned the
    answer into "failed (error)", its numbers gone and no Continue left."""
    backend = FakeBackend(tokens=["The", " cat", " is", " orange", "."])
    win = make_window(backend)
    ask(qtbot, win, "What is it?", 2)
    answer = win.transcript.widgets()[1]
    footer, stored = answer.footer(), win.store.messages(win.keeper.current_id)[1]
    backend.image_error, backend.error_type = "Box: Connection refused", "Remote:network"
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        continue_button(answer).click()
    assert win.banner.message() == "Box: Connection refused"  # said in the banner, not on the answer
    assert (answer.text, answer.status, answer.footer()) == ("The cat", "length", footer) and offered(answer)
    assert [w.text for w in win.transcript.widgets()] == ["What is it?", "The cat"]  # nothing taken back
    again = win.store.messages(win.keeper.current_id)[1]
    assert (again.text, again.status, again.stats, again.token_ids) == (stored.text, stored.status, stored.stats,
                                                                        stored.token_ids)
    assert len(answer.rendered_widgets()) == 1  # rendered once, not twice
    backend.image_error = None
    win.generation_params = {"max_new_tokens": 10}
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        continue_button(answer).click()
    assert answer.text == "The cat is orange." and not offered(answer)


def test_an_answer_continued_by_another_model_names_both(qtbot, make_window):
    """Found by a trial: live the answer kept the first model's name, after a restart only the second's."""
    first = FakeBackend(tokens=["The", " cat", " is", " orange", "."], model_name="FirstVLM")
    win = make_window(first)
    ask(qtbot, win, "What is it?", 2)
    first.model_name = "SecondVLM"  # another model loaded (the fake names what it loads)
    win.load_model("/models/other")
    qtbot.waitUntil(lambda: win.model_info.get("model_name") == "SecondVLM" and win.controller.ready, timeout=5000)
    answer = win.transcript.widgets()[1]
    win.generation_params = {"max_new_tokens": 10}
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        continue_button(answer).click()
    assert answer._name.text() == "FirstVLM + SecondVLM"
    assert win.store.messages(win.keeper.current_id)[1].stats["model_name"] == "FirstVLM + SecondVLM"
    conv = win.keeper.current_id
    win.open_conversation(None)
    win.open_conversation(conv)
    assert win.transcript.widgets()[1]._name.text() == "FirstVLM + SecondVLM"


def test_an_answer_stopped_by_the_user_continues_and_a_reopened_chat_still_offers_it(qtbot, make_window):
    backend = FakeBackend(tokens=[f" w{i}" for i in range(60)], delay=0.02)
    win = make_window(backend)
    win.composer.setPlainText("Count")
    win.generation_params = {"max_new_tokens": 100}
    qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: len(win.transcript.widgets()) == 2 and len(win.transcript.widgets()[1].text) > 10,
                    timeout=5000)
    with qtbot.waitSignal(win.answer_finished, timeout=5000):
        win.stop()
    answer = win.transcript.widgets()[1]
    cut = answer.text
    assert answer.status == "cancelled" and offered(answer)
    conv = win.keeper.current_id
    win.open_conversation(None)
    win.open_conversation(conv)
    reopened = win.transcript.widgets()[1]
    assert reopened.text == cut and offered(reopened)
    backend.delay = 0
    with qtbot.waitSignal(win.answer_finished, timeout=10_000):
        continue_button(reopened).click()
    assert reopened.text == "".join(f" w{i}" for i in range(60)).strip()


def test_continue_with_the_real_engine_gives_the_uncut_answer_token_for_token(qtbot, tiny_checkpoint):  # noqa: F811
    """Greedy, a random tiny model: 6 tokens then Continue for 6 more are the 12 tokens of one answer
    (the cut answer's stored ids are replayed, the continuation's ids appended to them)."""
    from app.main_window import MainWindow

    win = MainWindow(str(tiny_checkpoint))
    qtbot.addWidget(win)
    win.show()
    qtbot.waitUntil(lambda: bool(win.model_info), timeout=60_000)
    win.generation_params = {"max_new_tokens": 6, "ignore_eos": True}
    win.composer.setPlainText("Tell me about cats")
    with qtbot.waitSignal(win.answer_finished, timeout=120_000):
        qtbot.keyClick(win.composer, Qt.Key.Key_Return)
    answer = win.transcript.widgets()[1]
    assert answer.status == "length" and offered(answer)
    with qtbot.waitSignal(win.answer_finished, timeout=120_000) as finished:
        continue_button(answer).click()
    assert finished.args[0]["generated_tokens"] == 12  # the answer in all: 6 + 6

    direct = ChatSession.load(str(tiny_checkpoint), device="cpu")
    events = list(direct.send("Tell me about cats", params=GenerationParams(max_new_tokens=12, ignore_eos=True)))
    expected_ids = list(events[-1].token_ids)
    expected = "".join(e.text for e in events if not isinstance(e, DoneEvent)).strip()
    [_q, stored] = win.store.messages(win.keeper.current_id)
    assert stored.token_ids == expected_ids and len(expected_ids) == 12
    assert stored.text == answer.text == expected
    win.close()


def test_an_answer_that_filled_the_context_says_so_and_offers_no_continue(qtbot, make_window):
    """Found by a trial: an answer cut by the end of a 256-token context said "stopped at the token
    limit" and offered Continue, which could only fail."""
    from app.formatting import context_full

    backend = FakeBackend(tokens=[f" w{i}" for i in range(40)])
    win = make_window(backend)
    win.controller.model_info["capabilities"]["max_context"] = 50  # the fake's prompt is 42 tokens
    ask(qtbot, win, "Go on", 8)
    answer = win.transcript.widgets()[1]
    assert answer.footer().startswith("stopped: the model's context is full (50 tokens)") and not offered(answer)
    conv = win.keeper.current_id
    win.open_conversation(None)
    win.open_conversation(conv)
    reopened = win.transcript.widgets()[1]
    assert reopened.footer().startswith("stopped: the model's context is full") and not offered(reopened)
    assert not context_full({"finish_reason": "length", "prompt_tokens": 42, "generated_tokens": 7, "context": 50})
    assert not context_full({"finish_reason": "stop", "prompt_tokens": 42, "generated_tokens": 8, "context": 50})


def test_opening_a_long_chat_checks_continue_for_the_last_answer_only(qtbot, make_window, monkeypatch):
    """Found by a trial: every message added while a chat opened re-checked Continue under every answer
    (3,000 passes over a 2,000-message chat: quadratic, most of a 25 s freeze)."""
    from app.messages import AssistantMessage

    win = make_window(FakeBackend())
    conv = win.store.create_conversation("long").id
    for i in range(300):
        win.store.add_message(conv, "user" if i % 2 == 0 else "assistant", f"message {i}",
                              status="length" if i % 2 else "done")
    calls = []
    real = AssistantMessage.set_continuable
    monkeypatch.setattr(AssistantMessage, "set_continuable", lambda self, on: calls.append(on) or real(self, on))
    win.open_conversation(conv)
    win.transcript.message_widget(0)  # the chat's start built, as when scrolled to the top
    win.transcript.show_end()  # and its end again
    assert len(calls) <= 2 * 300  # a few a message, not one per answer per message (~22,500)
    answers = [w for w in win.transcript.widgets() if isinstance(w, AssistantMessage)]  # (those built)
    assert offered(answers[-1]) and not any(offered(a) for a in answers[:-1])
    win.transcript.show_start()
    answers = [w for w in win.transcript.widgets() if isinstance(w, AssistantMessage)]
    assert answers and not any(offered(a) for a in answers)
