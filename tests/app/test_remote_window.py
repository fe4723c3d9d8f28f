"""The window over a remote engine (the loopback fake server): the same conversation flows, the engine
and model stored with each answer, a failing or stalled server reported while the UI thread keeps
processing events, and switching engines mid-conversation re-sending the history."""

from __future__ import annotations

import contextlib
import time

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel

from app import remote_settings
from app.backends.remote import remote_spec
from tests.app.remote_fakes import FakeOpenAI


@pytest.fixture
def fake():
    with FakeOpenAI(props={"modalities": {"vision": True}, "default_generation_settings": {"n_ctx": 4096}}) as server:
        remote_settings.save_servers([{"name": "fake", "url": server.url}])
        yield server


def load_remote(qtbot, win, model: str) -> None:
    win.load_model(remote_spec("fake", model))
    qtbot.waitUntil(lambda: win.model_info.get("model_name") == model and win.controller.ready, timeout=10_000)


def ask(qtbot, win, text: str, images=(), timeout=10_000) -> dict:
    win.composer.setPlainText(text)
    for path in images:
        win.attachments.add(str(path))
    with qtbot.waitSignal(win.answer_finished, timeout=timeout) as finished:
        win.send_message()
    return finished.args[0]


def test_remote_answer_stores_engine_and_model(qtbot, make_window, fake_session, fake, png):
    win = make_window(fake_session)
    load_remote(qtbot, win, "ok")
    assert win.model_info["backend"] == "remote:fake" and win.model_info["capabilities"]["vision"] is True
    assert win.model_info["capabilities"]["max_context"] == 4096  # read from /props, not assumed
    assert win.stats_label.text().startswith("ok · on fake")
    result = ask(qtbot, win, "What is this?", [png])
    assert result["finish_reason"] == "stop" and result["engine"] == "remote:fake"
    assert result["model"] == "remote:fake::ok" and result["prompt_tokens"] == 17
    content = fake.requests[-1]["messages"][-1]["content"]
    assert content[0]["image_url"]["url"].startswith("data:image/png;base64,") and content[1]["text"] == "What is this?"
    stored = win.store.messages(win.keeper.current_id)
    assert stored[-1].text == "The cat is orange." and stored[-1].stats["engine"] == "remote:fake"
    footer = win.transcript.widgets()[-1].footer()  # measured on the client, counts from usage
    assert footer.startswith("TTFT ") and "17 prompt / 0 cached / 5 generated tokens" in footer


def test_switching_engine_mid_conversation_resends_the_history(qtbot, make_window, fake_session, fake):
    win = make_window(fake_session)
    ask(qtbot, win, "Local question")  # answered by the local (fake) engine
    assert win.store.messages(win.keeper.current_id)[-1].stats["engine"] == "local"
    load_remote(qtbot, win, "ok")
    ask(qtbot, win, "Remote question")
    assert [(m["role"], m["content"]) for m in fake.requests[-1]["messages"]] == [
        ("user", "Local question"), ("assistant", "The cat is orange."), ("user", "Remote question")]
    engines = [m.stats.get("engine") for m in win.store.messages(win.keeper.current_id) if m.role == "assistant"]
    assert engines == ["local", "remote:fake"]
    # Each answer's name says where it was written, live and once the chat is opened again (trial 55).
    tips = ["Written by FakeVLM-256M on this computer", "Written by ok on the server fake"]
    answers = [w for w in win.transcript.widgets() if w.role == "assistant"]
    assert [a.findChild(QLabel, "assistantName").toolTip() for a in answers] == tips
    chat = win.keeper.current_id
    win.new_chat()
    win.open_conversation(chat)
    answers = [w for w in win.transcript.widgets() if w.role == "assistant"]
    assert [a.findChild(QLabel, "assistantName").toolTip() for a in answers] == tips


@pytest.mark.parametrize("model, words", [
    ("midstream500", "CUDA out of memory"),
    ("close", "The server closed the connection"),
    ("status:429", "Retry-After: 7 s"),
    ("error200", "Model failed to load"),
])
def test_failures_are_shown_and_the_partial_answer_kept(qtbot, make_window, fake_session, fake, model, words):
    win = make_window(fake_session)
    load_remote(qtbot, win, model)
    result = ask(qtbot, win, "Q")
    assert result["finish_reason"] == "error" and words in result["error"]
    assert win.banner.message().startswith("fake: ") and words in win.banner.message()  # which server said it
    if model in ("midstream500", "close"):  # the partial answer is kept, marked failed
        stored = win.store.messages(win.keeper.current_id)[-1]
        assert stored.status == "error" and stored.text == "The cat"
        assert words in win.transcript.widgets()[-1].footer()
    else:  # nothing came: the question is taken back to the composer, not kept as well
        assert win.store.conversations() == [] and win.composer.toPlainText() == "Q"
    assert not win._busy and win.composer.isEnabled()


def test_stalled_server_does_not_freeze_the_window_and_stop_ends_it(qtbot, make_window, fake_session, fake):
    win = make_window(fake_session)
    load_remote(qtbot, win, "stall")
    ticks = []
    timer = QTimer()
    timer.timeout.connect(lambda: ticks.append(time.monotonic()))
    timer.start(20)
    win.composer.setPlainText("Q")
    win.send_message()
    qtbot.waitUntil(lambda: win.transcript.last_assistant() is not None
                    and win.transcript.last_assistant().text == "The", timeout=5000)
    qtbot.wait(600)  # the server says nothing now; the UI thread must keep running
    assert win._busy and len(ticks) >= 15 and max(b - a for a, b in zip(ticks, ticks[1:])) < 0.25
    t0 = time.monotonic()
    with qtbot.waitSignal(win.answer_finished, timeout=2000) as finished:
        win.stop()
    timer.stop()
    assert time.monotonic() - t0 < 1.0 and finished.args[0]["finish_reason"] == "cancelled"
    assert win.store.messages(win.keeper.current_id)[-1].text == "The"


def test_a_flood_of_tiny_chunks_keeps_the_window_answering_and_is_cut_at_max_tokens(qtbot, make_window, fake_session):
    """Trial 64: 200,000 one-word chunks sent in 3 s held the window for 100 s (one queued signal each:
    Esc and the menus did nothing) and all were kept, whatever Max new tokens said."""
    with FakeOpenAI(models=[{"id": "burst:200000", "object": "model"}]) as server:
        remote_settings.save_servers([{"name": "fake", "url": server.url}])
        win = make_window(fake_session)
        load_remote(qtbot, win, "burst:200000")
        win.settings.overrides["max_new_tokens"] = 32768
        ticks = []
        timer = QTimer()
        timer.timeout.connect(lambda: ticks.append(time.monotonic()))
        timer.start(20)
        result = ask(qtbot, win, "Q", timeout=60_000)
        timer.stop()
        assert result["finish_reason"] == "length" and result["generated_tokens"] == 32768
        assert win.store.messages(win.keeper.current_id)[-1].text == "ab " * 32768
        assert max(b - a for a, b in zip(ticks, ticks[1:])) < 1.0  # the window kept taking events


def stop_mid_answer(qtbot, win, text: str = "Tell me") -> dict:
    """Send ``text``, press Stop once the first words are shown: the answer's result."""
    win.composer.setPlainText(text)
    win.send_message()
    qtbot.waitUntil(lambda: bool(win.transcript.last_assistant() and win.transcript.last_assistant().text),
                    timeout=5000)
    with qtbot.waitSignal(win.answer_finished, timeout=3000) as stopped:
        win.stop()
    return stopped.args[0]


def test_stop_then_regenerate(qtbot, make_window, fake_session, fake):
    win = make_window(fake_session)
    load_remote(qtbot, win, "slow")
    assert stop_mid_answer(qtbot, win)["finish_reason"] == "cancelled"
    answer_index = len(win.transcript.widgets()) - 1
    with qtbot.waitSignal(win.answer_finished, timeout=10_000) as again:
        win._on_message_action("regenerate", answer_index)
    assert again.args[0]["finish_reason"] == "stop"
    assert fake.requests[-1]["messages"] == [{"role": "user", "content": "Tell me"}]
    assert win.store.messages(win.keeper.current_id)[-1].text == "The cat is orange."


def test_picker_groups_local_and_server_models(qtbot, make_window, fake_session, fake):
    from app.settings import add_known_model

    add_known_model("/models/fake", "FakeVLM")
    win = make_window(fake_session)
    qtbot.waitUntil(lambda: isinstance(win.remote_models.lists.get("fake"), list), timeout=5000)
    actions = win.model_picker.model_actions()
    sections = [a.text() for a in actions if a.isSeparator() and a.text()]
    assert sections == ["On this computer", "fake"]
    names = [a.text() for a in actions if not a.isSeparator()]
    assert names[:3] == ["FakeVLM", "ok", "slow"]
    remote_action = next(a for a in actions if a.text() == "ok")
    remote_action.trigger()
    assert win.stats_label.text() == "Connecting to ok on fake… · Esc stops"  # not "remote:fake::ok" (trial 55)
    qtbot.waitUntil(lambda: win.model_info.get("path") == "remote:fake::ok", timeout=10_000)
    # The model in use is checked (trial 55: a local and a served model of one name looked alike).
    checked = [a.text() for a in win.model_picker.model_actions() if a.isChecked()]
    assert checked == ["ok"]
    # Only that row has a check box (the light theme drew an empty one beside every other model).
    assert [a.text() for a in win.model_picker.model_actions() if a.isCheckable()] == ["ok"]
    assert win.model_picker.toolTip() == "ok on fake\nClick to switch model"  # not "remote:fake::ok" (trial 56)
    assert win.model_picker.text() == "ok · fake"  # told apart from a local model named "ok" (trial 60)
    win.model_picker.local_models = lambda: []  # a computer with no model of its own yet (trial 64)
    rows = [a.text() for a in win.model_picker.model_actions()]
    assert rows[:3] == ["On this computer", "no models yet: Manage models… adds one", "fake"]
    del win.model_picker.local_models
    # The local server serves a model on this computer: said as such, not "Load a model first" (trial 60).
    dialog = win.open_local_server()
    with qtbot.waitSignal(win.local_server.failed, timeout=10_000):
        dialog.switch.setChecked(True)
    assert dialog.message.text() == ("The model in use runs on fake: the local server serves a model running on "
                                     "this computer. Load one, then turn the server on.")
    assert not dialog.switch.isChecked()
    dialog.close()
    fake_session.fail = "the folder has no config.json"  # a local model that fails: the server's still answers
    win.load_model("/models/broken")
    qtbot.waitUntil(lambda: win.banner.message().startswith("Could not load the model"), timeout=5000)
    assert win.banner.message() == "Could not load the model: the folder has no config.json\nStill using ok · fake."


def test_an_image_for_a_model_no_server_describes_points_to_the_toggle(qtbot, make_window, fake_session, png):
    with FakeOpenAI() as plain:  # no /props, no model/info, no modalities: vision unknown, so off
        remote_settings.save_servers([{"name": "plain", "url": plain.url}])
        win = make_window(fake_session)
        win.load_model(remote_spec("plain", "ok"))
        qtbot.waitUntil(lambda: win.model_info.get("path") == "remote:plain::ok" and win.controller.ready,
                        timeout=10_000)
        win.add_files([str(png)])
        assert win.attachments.paths() == [] and plain.requests == []
        assert "turn on “can see images” for it in Settings ▸ Engines" in win.banner.message()
        assert win.banner.message().startswith("Not attached: photo.png. ok on plain cannot read images")
    with FakeOpenAI(props={"modalities": {"vision": False}}) as said:  # llama-server's /props says no
        remote_settings.save_servers([{"name": "llama", "url": said.url}])
        win.load_model(remote_spec("llama", "ok"))
        qtbot.waitUntil(lambda: win.model_info.get("path") == "remote:llama::ok" and win.controller.ready,
                        timeout=10_000)
        win.add_files([str(png)])
        assert win.banner.message() == ("Not attached: photo.png. ok on llama cannot read images: the server says so "
                                        "(/props).")


@pytest.mark.parametrize("name", ["content-number", "choices-string", "delta-list", "finish-number"])
def test_a_stream_of_the_wrong_shape_ends_the_answer_and_the_window_goes_on(qtbot, make_window, fake_session, name):
    """Trial 37's freeze: `"content": 123` in a stream killed the remote backend's thread, so the window
    stayed on "generating…" for good and Stop and every later message did nothing. Now it is a "Not an
    OpenAI-compatible server" error like any malformed stream, the text so far kept, and chatting goes on."""
    from tests.app.remote_fakes import BAD_EVENTS

    models = [{"id": m, "object": "model"} for m in ["ok", "slow", *(f"bad:{n}" for n in BAD_EVENTS)]]
    with FakeOpenAI(models=models) as server:
        remote_settings.save_servers([{"name": "fake", "url": server.url}])
        win = make_window(fake_session)
        load_remote(qtbot, win, f"bad:{name}")
        result = ask(qtbot, win, "Q")
        assert result["finish_reason"] == "error"
        assert result["error"].startswith("fake: Not an OpenAI-compatible server (unexpected answer): ")
        assert "Error:" not in result["error"] and result["error"] in win.banner.message()
        assert not win._busy and win.composer.isEnabled()
        stored = win.store.messages(win.keeper.current_id)[-1]
        assert stored.status == "error" and stored.text == "The"
        # Stop still stops an answer, and the next message is answered.
        load_remote(qtbot, win, "slow")
        assert stop_mid_answer(qtbot, win)["finish_reason"] == "cancelled" and not win._busy
        load_remote(qtbot, win, "ok")
        assert ask(qtbot, win, "Again")["finish_reason"] == "stop"
        assert win.store.messages(win.keeper.current_id)[-1].text == "The cat is orange."


def test_a_server_model_id_with_a_lone_surrogate_is_listed_chosen_and_stored(qtbot, make_window, fake_session):
    """A lone UTF-16 half in a /v1/models id (JSON "\\ud800"): Qt dropped it from the menu entry (so the
    model chosen was one the server does not have) and the chat store raised on it. Read as U+FFFD, the
    model is listed, chosen, answers, and its name is stored with the answer."""
    with FakeOpenAI(models=[{"id": "smol\ud800lm", "object": "model"}]) as server:
        remote_settings.save_servers([{"name": "fake", "url": server.url}])
        win = make_window(fake_session)
        qtbot.waitUntil(lambda: isinstance(win.remote_models.lists.get("fake"), list), timeout=5000)
        assert win.remote_models.lists["fake"] == ["smol\ufffdlm"]
        action = next(a for a in win.model_picker.model_actions() if a.text() == "smol\ufffdlm")
        action.trigger()
        qtbot.waitUntil(lambda: win.model_info.get("path") == "remote:fake::smol\ufffdlm" and win.controller.ready,
                        timeout=10_000)
        result = ask(qtbot, win, "Q")
        assert result["finish_reason"] == "stop" and result["model"] == "remote:fake::smol\ufffdlm"
        assert server.requests[-1]["model"] == "smol\ufffdlm"
        stored = win.store.messages(win.keeper.current_id)[-1]
        assert stored.text == "The cat is orange." and stored.stats["model_name"] == "smol\ufffdlm"
        assert win.store.conversation(win.keeper.current_id).model == "remote:fake::smol\ufffdlm"


@pytest.fixture
def small():
    """A server of one model whose context is 100 characters of message text, and no /tokenize."""
    with FakeOpenAI(models=[{"id": "ctx:100", "object": "model"}]) as server:
        remote_settings.save_servers([{"name": "fake", "url": server.url}])
        yield server


def test_a_message_the_server_refuses_as_too_long_is_taken_back_to_the_composer(qtbot, make_window, fake_session,
                                                                                small):
    """A server without /tokenize finds a message too long only when it is sent (OpenAI's 400
    ``context_length_exceeded``, after the backend left out every earlier exchange): the question and
    its failed answer were stored, and the text came back to the composer too, so Send stored it twice.
    Now the refused question is taken back: the chat holds what it held before, the text is in the
    composer, and the banner says why in the window's words."""
    win = make_window(fake_session)
    load_remote(qtbot, win, "ctx:100")
    assert ask(qtbot, win, "Short one.")["finish_reason"] == "stop"
    conversation = win.keeper.current_id
    before = [(m.role, m.text) for m in win.store.messages(conversation)]
    long_text = "word " * 40  # 199 characters once stripped: more than the fake's context alone
    result = ask(qtbot, win, long_text)
    assert result["finish_reason"] == "error" and result["error_type"] == "Remote:context"
    assert [(m.role, m.text) for m in win.store.messages(conversation)] == before  # taken back
    assert [w.text for w in win.transcript.widgets()] == [text for _, text in before]
    assert win.composer.toPlainText() == long_text  # as it was typed
    assert win.banner.message() == (
        "fake: Too long for the model's context: the server refused this message even without the earlier ones "
        "(“This model's maximum context length is exceeded (199 characters)”). Shorten it or send it in parts.")
    win.composer.setPlainText("Shorter.")  # sent once, after the first question
    ask(qtbot, win, "Shorter.")
    assert [m.text for m in win.store.messages(conversation) if m.role == "user"] == ["Short one.", "Shorter."]


def test_a_new_chat_whose_first_message_is_refused_as_too_long_is_not_kept(qtbot, make_window, fake_session,
                                                                             small):
    """The chat the refused message started goes with it: no sidebar entry named after a message that
    was never sent."""
    win = make_window(fake_session)
    load_remote(qtbot, win, "ctx:100")
    ask(qtbot, win, "word " * 40)
    assert win.keeper.current_id is None and win.store.conversations() == []
    assert win.sidebar.list.count() == 0 and win.transcript.widgets() == []
    assert win.composer.toPlainText() == "word " * 40
    result = ask(qtbot, win, "Fits.")  # the next message starts a chat of its own
    assert result["finish_reason"] == "stop"
    [chat] = win.store.conversations()
    assert [m.text for m in win.store.messages(chat.id)] == ["Fits.", "The cat is orange."]


@contextlib.contextmanager
def _answered_with_key(qtbot, win, key: str):
    """``(win, server)``: a server "fake" that wants ``key``, saved with it, its model "ok" in use in
    ``win`` and a first question answered."""
    with FakeOpenAI(api_key=key, models=[{"id": "ok", "object": "model"}]) as server:
        remote_settings.save_servers([{"name": "fake", "url": server.url}])
        remote_settings.KEYS.set("fake", key)
        load_remote(qtbot, win, "ok")
        assert ask(qtbot, win, "First")["finish_reason"] == "stop"
        yield win, server


def test_a_new_key_for_the_server_in_use_applies_to_the_next_question(qtbot, make_window, fake_session):
    """Found by a trial: a key saved in Settings ▸ Engines was used only after another model had been
    picked and this one again; the model in use kept the old key (a revoked one kept failing, a wrong
    one kept working). Saving the server now loads its model again with what was saved."""
    with _answered_with_key(qtbot, make_window(fake_session), "old-key") as (win, server):
        server.api_key = "new-key"  # rotated on the server, then in Settings
        remote_settings.KEYS.set("fake", "new-key")
        win.controller.ready = False
        win._servers_changed("fake")
        qtbot.waitUntil(lambda: win.controller.ready, timeout=10_000)
        assert ask(qtbot, win, "Second")["finish_reason"] == "stop"
        assert server.requests[-1]["messages"][-1]["content"] == "Second"


def test_a_key_taken_away_from_the_server_in_use_is_not_sent_again(qtbot, make_window, fake_session):
    """Trial 65 F3: a URL password removed in Settings, refused by the server at the reload, was still
    sent with the next question: the failed reload went back to the connection made with it ("Still
    using ..."). Now no model is in use, and the banner says why."""
    with _answered_with_key(qtbot, make_window(fake_session), "the-key") as (win, server):
        asked = len(server.requests)
        remote_settings.KEYS.delete("fake")  # as Save server does with the key field emptied
        win._servers_changed("fake")
        qtbot.waitUntil(lambda: not win.controller.loading, timeout=10_000)
        assert not win.controller.ready and win.engines.current is not fake_session
        assert win.banner.message().startswith("Could not load the model: fake: 401 Unauthorized")
        assert win.banner.message().endswith(
            "\nok · fake is not used any more: its server's settings changed (its earlier address, key or password "
            "are not sent again). Fix them in Settings ▸ Engines, then choose the model again.")
        assert win.composer.placeholderText() == "Load a model to ask a question…"
        assert len(server.requests) == asked  # (the model list is asked with no body)
        remote_settings.KEYS.set("fake", "the-key")  # put back: the model loads again on the key
        win._servers_changed("fake")
        load_remote(qtbot, win, "ok")
        assert ask(qtbot, win, "Again")["finish_reason"] == "stop"


def test_a_can_see_images_answer_reloads_but_a_failure_keeps_the_model_in_use(qtbot, make_window, fake_session):
    """Only a change of what reaches the server (address, key, password) gives up the connection in use:
    a "can see images" answer saved while the server is down leaves the model answering as before."""
    with _answered_with_key(qtbot, make_window(fake_session), "the-key") as (win, server):
        pass  # the server stops here
    win._servers_changed("fake", False)
    qtbot.waitUntil(lambda: not win.controller.loading, timeout=10_000)
    assert win.controller.ready and win.model_info["model_name"] == "ok"
    assert win.banner.message().endswith("\nStill using ok · fake.")


def test_a_failed_load_on_an_unchanged_server_keeps_the_model_in_use(qtbot, make_window, fake_session, fake):
    """Going back to the model in use is kept where nothing about its server changed."""
    win = make_window(fake_session)
    load_remote(qtbot, win, "ok")
    win.load_model(remote_spec("elsewhere", "ok"))  # a server not (or no longer) in Settings
    qtbot.waitUntil(lambda: not win.controller.loading, timeout=10_000)
    assert win.controller.ready and win.model_info["model_name"] == "ok"
    assert win.banner.message().endswith("\nStill using ok · fake.")
    assert ask(qtbot, win, "Still you?")["engine"] == "remote:fake"


def test_a_model_picked_while_another_loads_is_not_replaced_when_that_load_ends(qtbot, make_window, fake_session,
                                                                                fake):
    """Found by a trial: a server's model picked while the last local model still loaded at start was
    ready at once, then replaced, unannounced, minutes later when the local load ended."""
    import threading

    win = make_window(fake_session)
    gate = threading.Event()
    fake_session.jobs.put(gate.wait)  # the local load below waits behind this
    win.load_model("/models/slow-local")
    load_remote(qtbot, win, "ok")
    assert win.model_info["backend"] == "remote:fake"
    gate.set()
    qtbot.waitUntil(lambda: fake_session.loads[-1][0] == "/models/slow-local", timeout=5000)
    qtbot.wait(300)  # the local load's result is delivered, and must be passed over
    assert win.model_info["backend"] == "remote:fake" and win.model_info["model_name"] == "ok"
    assert win.controller.ready and not win.controller.loading
    assert ask(qtbot, win, "Still you?")["engine"] == "remote:fake"
