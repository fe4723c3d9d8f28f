"""HubSource against a local fake of ``huggingface_hub.snapshot_download`` (these machines are offline).

The fake copies a checkpoint folder file by file into a cache folder, reporting bytes through the
``tqdm_class`` it is given, exactly as huggingface_hub does, so progress and cancel are exercised.
"""

from __future__ import annotations

import threading

import huggingface_hub
import pytest
from huggingface_hub import errors as hf_errors

try:  # huggingface_hub's HTTP client (httpx2 from hub 2.x, httpx before)
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx

from engine.api.errors import DownloadCancelled, DownloadError, ModelLoadError
from engine.registry import load_model
from engine.sources import HUB_ALLOW_PATTERNS, HubSource, resolve_source


@pytest.fixture
def fake_hub(tiny_checkpoint, tmp_path, monkeypatch):
    calls = {}

    def snapshot_download(repo_id, *, revision=None, cache_dir=None, allow_patterns=None, tqdm_class=None,
                          local_files_only=False, **_):
        calls.update(repo_id=repo_id, allow_patterns=allow_patterns, local_files_only=local_files_only)
        if repo_id != "HuggingFaceTB/SmolVLM-tiny":
            request = httpx.Request("GET", f"https://huggingface.co/api/models/{repo_id}")
            raise hf_errors.RepositoryNotFoundError(f"404 {repo_id}", response=httpx.Response(404, request=request))
        dst = tmp_path / "hub" / "snapshots" / "abc123"
        dst.mkdir(parents=True, exist_ok=True)
        for f in sorted(tiny_checkpoint.iterdir()):
            bar = tqdm_class(total=f.stat().st_size, unit="B", desc=f.name)
            data = f.read_bytes()
            with open(dst / f.name, "wb") as out:
                for i in range(0, len(data), 1 << 20):
                    chunk = data[i:i + (1 << 20)]
                    out.write(chunk)
                    bar.update(len(chunk))
            bar.close()
        return str(dst)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    return calls


def test_download_reports_progress_and_loads(fake_hub, tiny_checkpoint):
    seen = []
    source = HubSource("HuggingFaceTB/SmolVLM-tiny", progress=lambda done, total: seen.append((done, total)))
    total = sum(f.stat().st_size for f in tiny_checkpoint.iterdir())
    assert seen[-1] == (total, total)
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))
    assert fake_hub["allow_patterns"] == HUB_ALLOW_PATTERNS
    model = load_model(source, device="cpu")
    assert model.metadata.text.num_hidden_layers == 2


def test_repo_id_resolves_to_hub_and_unknown_repo_is_clear(fake_hub):
    assert isinstance(resolve_source("HuggingFaceTB/SmolVLM-tiny"), HubSource)
    with pytest.raises(DownloadError, match="nobody/nothing: repository not found"):
        resolve_source("nobody/nothing")


def test_cancel_stops_the_download(fake_hub):
    cancel = threading.Event()

    def progress(done, total):
        if done > 1_000_000:
            cancel.set()

    with pytest.raises(DownloadCancelled, match="cancelled"):
        HubSource("HuggingFaceTB/SmolVLM-tiny", progress=progress, cancel=cancel)


def test_offline_error_is_clear(monkeypatch):
    def offline(*_a, **_k):
        raise hf_errors.LocalEntryNotFoundError("no connection")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(DownloadError, match="cannot be reached \\(offline\\?\\)"):
        HubSource("HuggingFaceTB/SmolVLM-256M-Instruct")


def test_mistyped_local_paths_are_not_hub_ids(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ModelLoadError, match="model folder not found: checkpoints/nope"):
        resolve_source("checkpoints/nope")
    with pytest.raises(ModelLoadError, match="afile is a file"):
        resolve_source("afile")
