"""The modules a first dialog needs are imported off the UI thread after start (app.main.warm_imports)."""

from __future__ import annotations

import subprocess
import sys


def test_warm_imports_brings_the_model_managers_hub_module_in_on_another_thread():
    """In a fresh process (this one has imported everything already): the window's module does not
    import huggingface_hub's file_download (0.2-1.2 s on the UI thread at the first model manager,
    trial 72 F3); warm_imports does, on its own thread."""
    code = (
        "import sys, threading\n"
        "from app.main import WARM_IMPORTS, warm_imports\n"
        "name = 'huggingface_hub.file_download'\n"
        "assert name in WARM_IMPORTS and name not in sys.modules, sorted(m for m in sys.modules if 'hugging' in m)\n"
        "thread = warm_imports()\n"
        "assert thread is not threading.current_thread() and thread.daemon\n"
        "thread.join(60)\n"
        "assert name in sys.modules\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
