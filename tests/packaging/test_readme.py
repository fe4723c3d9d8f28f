"""The README's commands work as written on a fresh clone."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_hub_downloads_use_the_cli_that_huggingface_hub_installs():
    # huggingface_hub 1.0 dropped huggingface-cli; the venv's 2.x has only `hf`.
    text = README.read_text(encoding="utf-8")
    commands = re.findall(r"`((?:hf|huggingface-cli) download [^`]*)`", text)
    assert commands == ["hf download HuggingFaceTB/SmolVLM-256M-Instruct --local-dir SmolVLM-256M-Instruct"]
    hf = Path(sys.executable).parent / "hf"
    assert subprocess.run([str(hf), "download", "--help"], capture_output=True, timeout=60).returncode == 0


def test_the_shared_folder_is_explained_before_a_command_needs_it():
    text = README.read_text(encoding="utf-8")
    first = text.index("${SMOLCHAT_SHARED:-../shared}")
    assert "`export SMOLCHAT_SHARED=/path/to/shared` first" in text[:first]
