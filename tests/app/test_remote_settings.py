"""Settings ▸ Engines: adding a server keeps its key out of the settings file (keyring, else the session),
Test connection tells failures apart on a helper thread, and the model list shows where each capability
was read, with a "can see images" toggle where no server says."""

from __future__ import annotations

import threading

import pytest
from PySide6.QtCore import Qt

from app import remote_settings
from app.backends.remote_http import Server, probe_capabilities
from tests.app.remote_fakes import FakeOpenAI, closed_port


@pytest.fixture
def dialog(qtbot, window):
    dlg = window.open_settings_dialog()
    qtbot.addWidget(dlg)
    return dlg


def fill(panel, name, url, key=""):
    panel.servers.setCurrentRow(panel.servers.count() - 1)  # "+ New server…"
    panel.name.setText(name)
    panel.url.setText(url)
    panel.key.setText(key)


def test_key_is_never_written_to_the_settings_file(qtbot, dialog, data_dir, window):
    panel = dialog.engines
    assert not remote_settings.KEYS.persistent  # the test machine has no keyring backend
    assert "kept for this session only" in panel.key_note.text()
    fill(panel, "GPU box", "http://127.0.0.1:9/v1", "sk-very-secret")
    with qtbot.waitSignal(panel.servers_changed) as changed:
        panel.save_server()
    assert changed.args == ["GPU box", True] and "Its API key is kept for this session only." in panel.verdict.text()
    window.qsettings.sync()
    ini = (data_dir / "settings.ini").read_text()
    assert "GPU box" in ini and "sk-very-secret" not in ini
    assert remote_settings.server("GPU box") == Server("GPU box", "http://127.0.0.1:9/v1", "sk-very-secret", {})
    assert [panel.servers.item(i).text() for i in range(panel.servers.count())] == [
        "GPU box — http://127.0.0.1:9/v1", "+ New server…"]
    panel.servers.setCurrentRow(0)
    assert panel.key.text() == "sk-very-secret"
    panel.remove_server()
    assert remote_settings.load_servers() == [] and remote_settings.KEYS.get("GPU box") == ""


def test_keyring_is_used_when_there_is_one(monkeypatch):
    from tests.keyring_memory import memory_keyring

    with memory_keyring() as store:
        keys = remote_settings.KeyStore()
        assert keys.persistent and keys.set("box", "k1") is True
        assert store == {("smolchat", "box"): "k1"} and keys.get("box") == "k1"
        keys.delete("box")
        assert store == {}


def test_a_password_in_the_url_is_kept_as_the_key_is_never_in_the_settings_file(qtbot, dialog, data_dir, window):
    """Trial 64: ``http://bob:pa55word@host/v1`` (a proxy's basic authentication) was written to
    settings.ini as typed, and the Base URL field showed the password whenever the server was picked."""
    panel = dialog.engines
    fill(panel, "proxy", "http://bob:pa55word@127.0.0.1:9/v1")
    panel.save_server()
    assert panel.verdict.text() == "Saved proxy. Its URL password is kept for this session only."
    window.qsettings.sync()
    ini = (data_dir / "settings.ini").read_text()
    assert "pa55word" not in ini and "http://bob@127.0.0.1:9/v1" in ini
    assert remote_settings.server("proxy").url == "http://bob:pa55word@127.0.0.1:9/v1"  # what requests use
    panel.servers.setCurrentRow(0)
    assert panel.url.text() == "http://bob:***@127.0.0.1:9/v1"
    assert panel.current_server().url == "http://bob:pa55word@127.0.0.1:9/v1"  # Test connection sends it
    panel.name.setText("proxy 2")  # saved as shown: renamed, the password kept
    panel.save_server()
    assert remote_settings.server("proxy 2").url == "http://bob:pa55word@127.0.0.1:9/v1"
    assert remote_settings.KEYS.get(remote_settings.url_password_name("proxy")) == ""
    panel.servers.setCurrentRow(0)
    panel.url.setText("http://bob@127.0.0.1:9/v1")  # the password taken out of the URL: forgotten
    panel.save_server()
    assert remote_settings.server("proxy 2").url == "http://bob@127.0.0.1:9/v1"
    panel.servers.setCurrentRow(0)
    panel.url.setText("http://bob:n3w@127.0.0.1:9/v1")
    panel.save_server()
    panel.servers.setCurrentRow(0)
    panel.remove_server()
    assert remote_settings.KEYS.get(remote_settings.url_password_name("proxy 2")) == ""


def test_test_connection_says_its_verdict_for_a_server_with_a_stored_url_password(qtbot, dialog):
    """Trial 65: with the field showing bob:***@, the result (tested with the real password) was taken
    for one about fields changed since, and the verdict line went blank."""
    panel = dialog.engines
    with FakeOpenAI() as fake:
        fill(panel, "proxy", fake.url.replace("http://", "http://bob:pa55word@"))
        panel.save_server()
        panel.servers.setCurrentRow(0)
        assert "bob:***@" in panel.url.text()
        with qtbot.waitSignal(panel.tested, timeout=20_000):
            panel.test_connection()
    assert panel.verdict.text().startswith("✓ Connected: 12 models")


def test_a_url_password_an_earlier_smolchat_wrote_is_masked_and_kept_by_an_unchanged_save(qtbot, dialog):
    """Trial 65: without a keyring such a password stays in the file (the next start would have lost
    it), but the field showed it in clear, and Save without a change dropped it for the next start."""
    panel = dialog.engines
    remote_settings.save_servers([{"name": "legacy", "url": "http://bob:pa55word@127.0.0.1:9/v1"}])
    panel._fill("legacy")
    panel.servers.setCurrentRow(0)
    assert panel.url.text() == "http://bob:***@127.0.0.1:9/v1"
    assert panel.current_server().url == "http://bob:pa55word@127.0.0.1:9/v1"
    panel.key.setText("sk-1")
    panel.save_server()
    assert panel.verdict.text() == (
        "Saved legacy. Its API key and URL password are kept for this session only. Requests carry the URL password "
        "(basic authentication), not the API key: one Authorization header holds one of them.")
    assert remote_settings.server("legacy").url == "http://bob:pa55word@127.0.0.1:9/v1"


def test_url_passwords_an_earlier_smolchat_saved_move_to_the_keyring(monkeypatch):
    from tests.keyring_memory import memory_keyring

    with memory_keyring() as store:
        monkeypatch.setattr(remote_settings, "KEYS", remote_settings.KeyStore())
        remote_settings.save_servers([{"name": "proxy", "url": "https://bob:s3cret@gpu.example:8443/v1"},
                                      {"name": "plain", "url": "http://127.0.0.1:8080"}])
        assert remote_settings.move_passwords_out_of_the_file() == 1
        assert store == {("smolchat", "proxy (URL password)"): "s3cret"}
        assert [s["url"] for s in remote_settings.load_servers()] == ["https://bob@gpu.example:8443/v1",
                                                                     "http://127.0.0.1:8080"]
        assert remote_settings.server("proxy").url == "https://bob:s3cret@gpu.example:8443/v1"
        assert remote_settings.move_passwords_out_of_the_file() == 0


@pytest.mark.parametrize("case", ["ok", "401", "refused", "404"])
def test_test_connection_verdicts(qtbot, dialog, case):
    panel = dialog.engines
    with FakeOpenAI(api_key="k", props={"modalities": {"vision": False}}) as fake:
        url = {"ok": fake.url, "401": fake.url, "refused": f"http://127.0.0.1:{closed_port()}",
               "404": fake.url.removesuffix("/v1") + "/api/v2"}[case]
        fill(panel, "fake", url, "" if case == "401" else "k")
        with qtbot.waitSignal(panel.tested, timeout=20_000) as tested:
            panel.test_connection()
    kind, verdict = tested.args
    expected = {"ok": ("ok", "✓ Connected: 12 models"), "401": ("unauthorized", "✗ 401 Unauthorized"),
                "refused": ("refused", "✗ Connection refused"), "404": ("not_found", "✗ 404 Not found")}[case]
    assert kind == expected[0] and panel.verdict.text().startswith(expected[1])
    if case == "refused":  # said once (it went on ": [Errno 111] Connection refused")
        assert panel.verdict.text().count("refused") == 1, panel.verdict.text()
    assert not panel.testing and panel.test_button.text() == "Test connection"
    assert panel.models.isVisibleTo(dialog) == (case == "ok")  # no empty box without a word (a GUI trial)
    if case == "ok":
        rows = [panel.models.item(i).text() for i in range(panel.models.count())]
        assert len(rows) == 8 and not panel.vision_boxes
        assert rows[0] == "ok\n    images: no (from /props) · context length not reported"


def test_vision_toggle_when_no_server_says(qtbot, dialog):
    panel = dialog.engines
    with FakeOpenAI() as fake:  # no /props, no model/info, no modalities: the user decides
        fill(panel, "plain", fake.url)
        panel.save_server()
        with qtbot.waitSignal(panel.tested, timeout=20_000):
            panel.test_connection()
        first = panel.models.item(0).text()
        assert first == "ok\n    no server says whether it sees images · context length not reported"
        box = panel.vision_boxes["ok"]
        assert box.text() == "ok can see images" and not box.isChecked()
        with qtbot.waitSignal(panel.servers_changed) as changed:
            box.click()
        assert changed.args == ["plain", False]  # (the server's address and key as they were)
        assert remote_settings.load_servers()[0]["vision"] == {"ok": True}
        caps, sources = probe_capabilities(remote_settings.server("plain"), "ok")
        assert caps.vision is True and sources == {"vision": "your setting", "context": ""}


def test_models_list_modalities_and_context_are_read():
    models = [{"id": "m", "architecture": {"input_modalities": ["text", "image"]}, "max_model_len": 32768}]
    with FakeOpenAI(models=models) as fake:
        caps, sources = probe_capabilities(Server("v", fake.url), "m")
    assert caps.vision is True and caps.max_context == 32768
    assert sources == {"vision": "/v1/models", "context": "/v1/models"}


def test_a_smolchat_servers_video_and_tokens_per_frame_are_read():
    """Trial 52: against `smolchat serve` with a SmolVLM2, the composer counted a video's frames but no
    tokens (the server says its tokens a tile in /v1/models' meta)."""
    models = [{"id": "tiny2", "architecture": {"input_modalities": ["text", "image", "video"]},
               "meta": {"n_ctx": 8192, "capabilities": {"video": True, "image_tokens_per_tile": 64}}}]
    with FakeOpenAI(models=models) as fake:
        caps, _ = probe_capabilities(Server("s", fake.url), "tiny2")
    assert caps.video is True and caps.image_tokens_per_tile == 64


def test_ollama_show_gives_vision_and_context():
    show = {"capabilities": ["completion", "vision"], "model_info": {"gemma3.context_length": 131072}}
    with FakeOpenAI(show=show) as fake:
        caps, sources = probe_capabilities(Server("o", fake.url), "ok")
    assert caps.vision is True and caps.max_context == 131072
    assert sources == {"vision": "/api/show", "context": "/api/show"}


@pytest.mark.parametrize("fields", [
    {"props": {"modalities": {"vision": True}, "default_generation_settings": [4096]}},
    {"models": [{"id": "ok", "architecture": "vision", "meta": [1], "max_model_len": "4096"}]},
    {"show": {"capabilities": ["vision"], "model_info": ["x.context_length"]}},
    {"show": {"capabilities": ["vision"], "model_info": {"x.context_length": "lots"}}},
])
def test_a_capability_source_of_an_odd_shape_counts_as_not_given(fields):
    """Each source is optional: a field of the wrong type once raised (AttributeError, ValueError) out of
    the load, which then never reported, and the window waited for good."""
    with FakeOpenAI(**fields) as fake:
        caps, sources = probe_capabilities(Server("f", fake.url), "ok")
    assert caps.max_context == 0 and sources["context"] == ""
    assert caps.vision is ("models" not in fields)  # props and show still say it sees images


def test_a_long_server_entry_is_elided_with_the_whole_in_its_tooltip(qtbot, dialog):
    """Found by a GUI trial: a long name and URL were cut mid-URL, with a sideways scroll bar over the list."""
    panel = dialog.engines
    fill(panel, "GPU box in the basement with a long name", "http://127.0.0.1:9/v1")
    panel.save_server()
    item = panel.servers.currentItem()
    assert item.toolTip() == "GPU box in the basement with a long name — http://127.0.0.1:9/v1"
    assert panel.servers.textElideMode() == Qt.TextElideMode.ElideMiddle
    assert panel.servers.horizontalScrollBarPolicy() == Qt.ScrollBarPolicy.ScrollBarAlwaysOff
    panel.servers.setCurrentRow(panel.servers.count() - 1)
    panel.servers.setCurrentItem(item)
    assert panel.name.cursorPosition() == 0  # its start shown, not its end


@pytest.mark.parametrize("url", ["not a url at all", "ftp://host:21", "gpubox"])
def test_what_is_no_server_address_is_said_so_before_testing_or_saving(qtbot, dialog, url):
    """Found by a trial: "not a url at all" was tested as a host name ("✗ Unknown host: the name does
    not resolve (DNS)") and could be saved, to fail later."""
    panel = dialog.engines
    fill(panel, "box", url)
    panel.test_connection()
    said = f"✗ '{url}' is not a server address; give one like http://127.0.0.1:8080."
    assert panel.verdict.text() == said and not panel.testing
    panel.save_server()
    assert panel.verdict.text() == said and remote_settings.load_servers() == []


def test_a_url_that_is_no_address_takes_the_last_servers_models_away(qtbot, dialog):
    """Trial 77 Q6: a test of a good server, then of a URL that is no address ("…:99999"): the verdict
    said so under the first server's model list and its "can see images" boxes."""
    panel = dialog.engines
    with FakeOpenAI() as fake:  # no server says whether its models see images: a box each
        for url in ("http://127.0.0.1:99999/v1", ""):
            fill(panel, "fake", fake.url)
            with qtbot.waitSignal(panel.tested, timeout=20_000):
                panel.test_connection()
            assert panel.models.isVisibleTo(dialog) and panel.vision_boxes
            fill(panel, "fake", url)
            panel.test_connection()
            assert panel.verdict.text().startswith("✗ " if url else "Enter the server's base URL")
            assert not panel.models.isVisibleTo(dialog) and panel.models.count() == 0 and not panel.vision_boxes
        # Typing in the URL or key takes the last verdict and list away (trial 78 R8: "✓ Connected" stood).
        for line in (panel.url, panel.key):
            fill(panel, "fake", fake.url)
            with qtbot.waitSignal(panel.tested, timeout=20_000):
                panel.test_connection()
            assert panel.verdict.text().startswith("✓ Connected") and panel.models.isVisibleTo(dialog)
            qtbot.keyClicks(line, "x")
            assert panel.verdict.text() == "" and not panel.models.isVisibleTo(dialog) and not panel.vision_boxes


def test_a_test_that_breaks_ends_in_a_verdict_and_one_for_old_fields_is_not_shown(qtbot, dialog, monkeypatch):
    """Found by a trial: a test whose thread raised left "Testing …" for good and the button off for the
    dialog's life; a test still running when the fields changed wrote its verdict over the new ones."""
    from app import engines_settings

    panel = dialog.engines

    def broken(server, timeout=10.0):
        raise UnicodeError("encoding with 'idna' codec failed (label empty or too long)")

    monkeypatch.setattr(engines_settings, "check_connection", broken)
    fill(panel, "box", "http://gpu-box:8000/v1")
    with qtbot.waitSignal(panel.tested, timeout=10_000):
        panel.test_connection()
    assert panel.verdict.text().startswith("✗ The test failed: ") and not panel.testing

    release = threading.Event()

    def slow(server, timeout=10.0):
        release.wait(10)
        return "unauthorized", "401 Unauthorized: the API key is missing or wrong", []

    monkeypatch.setattr(engines_settings, "check_connection", slow)
    panel.test_connection()
    panel.url.setText("http://other-box:8000/v1")  # changed while the first test runs
    release.set()
    qtbot.waitUntil(lambda: not panel.testing, timeout=10_000)
    assert "401" not in panel.verdict.text()


def test_a_test_for_another_server_starts_while_one_is_stuck_and_keeps_its_verdict(qtbot, dialog, monkeypatch):
    """Trial 71: a server that never finished answering left "Testing…" for good, and Test connection did
    nothing for any other server in the dialog; the stuck test's late result must not end the new one's."""
    from app import engines_settings

    panel = dialog.engines
    release, started = threading.Event(), []

    def check(server, timeout=10.0):
        started.append(server.name)
        if server.name == "stuck":
            release.wait(10)
            return "unauthorized", "401 Unauthorized: the API key is missing or wrong", []
        release.wait(0.3)  # still running when pressed again
        return "ok", "Connected, but the server lists no models", []

    monkeypatch.setattr(engines_settings, "check_connection", check)
    said = []
    panel.tested.connect(lambda kind, verdict: said.append(kind))
    fill(panel, "stuck", "http://drip-box:8000/v1")
    panel.test_connection()
    fill(panel, "other", "http://127.0.0.1:9/v1", "k")
    panel.test_connection()
    panel.test_connection()  # the same server again while its test runs: nothing more starts
    qtbot.waitUntil(lambda: said == ["ok"], timeout=10_000)
    assert started == ["stuck", "other"] and not panel.testing
    assert panel.verdict.text() == "✓ Connected, but the server lists no models"
    release.set()  # the stuck test ends late: its result is dropped
    qtbot.wait(300)
    assert said == ["ok"] and panel.verdict.text() == "✓ Connected, but the server lists no models"
    assert panel.test_button.text() == "Test connection" and not panel.testing

    fill(panel, "stuck", "http://drip-box:8000/v1")  # a stuck test, then a press for no address at all
    release.clear()
    panel.test_connection()
    panel.url.setText("")
    panel.test_connection()
    assert panel.verdict.text() == "Enter the server's base URL first." and not panel.testing
    release.set()
    qtbot.wait(300)
    assert panel.verdict.text() == "Enter the server's base URL first." and said == ["ok"]


def test_test_connection_keeps_the_focus_and_remove_asks_first(qtbot, dialog, monkeypatch):
    """Trial 52: Test connection turned itself off while it ran, Qt gave the focus to Remove, and the
    next key press removed the server (and its key) without a word."""
    from PySide6.QtWidgets import QMessageBox

    from app import engines_settings

    panel = dialog.engines
    fill(panel, "box", "http://127.0.0.1:9/v1", "k")
    panel.save_server()
    release = threading.Event()

    def slow(server):
        release.wait(10)
        return "refused", "Connection refused", []

    monkeypatch.setattr(engines_settings, "check_connection", slow)
    panel.test_button.setFocus()
    panel.test_connection()
    assert panel.testing and panel.test_button.isEnabled() and panel.test_button.text() == "Testing…"
    assert dialog.focusWidget() is panel.test_button
    panel.test_connection()  # pressed again meanwhile: nothing more starts
    release.set()
    qtbot.waitUntil(lambda: not panel.testing, timeout=10_000)
    assert dialog.focusWidget() is panel.test_button

    panel.remove_button.click()
    box = panel.findChild(QMessageBox, "removeServerBox")
    assert box is not None and box.text() == "Remove the server box and its API key?"
    box.button(QMessageBox.StandardButton.Cancel).click()
    assert [s["name"] for s in remote_settings.load_servers()] == ["box"]
    panel.remove_button.click()
    box = [b for b in panel.findChildren(QMessageBox, "removeServerBox") if b.isVisible()][0]
    next(b for b in box.buttons() if b.text() == "Remove").click()
    assert remote_settings.load_servers() == []


def test_new_server_stays_in_view_with_many_servers(qtbot, dialog):
    """Trial 55 F8: the list was 90 px tall; with 7 servers "+ New server…" scrolled out of view while the
    panel had room to spare. It grows with its rows, up to LIST_ROWS, then scrolls to the one chosen."""
    from app.engines_settings import LIST_ROWS

    panel = dialog.engines
    dialog.show()
    for i in range(8):  # (trial 56: at 8, the list's cap then, the last row was cut in half)
        fill(panel, f"box {i}", f"http://127.0.0.1:{9000 + i}/v1")
        panel.save_server()
    assert panel.servers.count() == 9
    last = panel.servers.item(panel.servers.count() - 1)
    assert last.text() == "+ New server…"
    assert panel.servers.viewport().rect().contains(panel.servers.visualItemRect(last))
    for i in range(8, 14):
        fill(panel, f"box {i}", f"http://127.0.0.1:{9000 + i}/v1")
        panel.save_server()
    assert panel.servers.height() < (LIST_ROWS + 1) * panel.servers.sizeHintForRow(0)  # it scrolls past 8
    panel.servers.setCurrentRow(panel.servers.count() - 1)
    qtbot.waitUntil(lambda: panel.servers.viewport().rect().contains(
        panel.servers.visualItemRect(panel.servers.currentItem())))
