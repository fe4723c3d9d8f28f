"""What the frozen app leaves out: modules it never imports and files no import needs.

Used by ``smolchat.spec`` (at build time) and by the packaging test (to check the result).
Everything here was checked against the modules a real self-test run loads: torch imports much of
itself (``torch._dynamo``, ``torch._inductor``, ``sympy`` ...) at ``import torch``, so torch's own
Python packages stay; its tests, headers, static libraries and test-only shared libraries go.
"""

from __future__ import annotations

import fnmatch
import os
import re

# Python packages the app never imports (most come with the [test] extra or with torch's optional
# integrations). Excluding them keeps PyInstaller from following optional imports into them.
EXCLUDED_MODULES = [
    # test-only dependencies and the test oracle
    "transformers", "pytest", "_pytest", "pytestqt", "hypothesis", "pluggy",
    # GUI toolkits and plotting that torch/PIL import optionally
    "tkinter", "_tkinter", "PIL.ImageTk", "matplotlib", "IPython", "ipykernel", "notebook",
    # heavy optional torch integrations
    "torchvision", "torchaudio", "triton", "tensorboard", "torch.utils.tensorboard", "onnx",
    "onnxruntime", "scipy", "pandas", "sklearn", "cv2", "tensorflow", "jax",
    "torch.utils.benchmark", "torch.utils.bottleneck",  # (torch.testing._internal is imported by torch.utils.checkpoint)
    # Qt modules the app does not use (it uses QtCore, QtGui, QtWidgets, QtNetwork's local socket
    # for a second start's files: app/single_instance.py; QtSvg through plugins)
    "PySide6.QtQml", "PySide6.QtQuick", "PySide6.QtQuickWidgets",
    "PySide6.QtOpenGL", "PySide6.QtOpenGLWidgets", "PySide6.QtDesigner", "PySide6.QtUiTools",
    "PySide6.QtHelp", "PySide6.QtSql", "PySide6.QtTest", "PySide6.QtXml", "PySide6.QtConcurrent",
    "PySide6.QtPdf", "PySide6.QtPdfWidgets", "PySide6.QtPrintSupport", "PySide6.QtDBus",
    "PySide6.QtStateMachine", "PySide6.QtQuickControls2", "PySide6.QtQuick3D",
    # Python's own test suites and unused tools
    "test", "lib2to3", "idlelib", "pydoc_data", "ensurepip", "distutils", "setuptools", "pip",
]

# Collected files (paths inside the app folder, "/"-separated) that no import needs.
EXCLUDED_FILES = [
    # torch/bin: C++ test binaries, except torch_shm_manager (import torch checks it is there)
    "torch/include/*", "torch/share/*", "torch/bin/*Test", "torch/bin/test_*", "torch/bin/protoc*",
    "torch/bin/*.ptl", "torch/test/*",
    "torch/lib/*.a", "*/caffe2/*", "caffe2/*", "torch/utils/benchmark/*",
    "torch/lib/libjitbackend_test.so", "torch/lib/libtorchbind_test.so",
    "torch/lib/libbackend_with_compiler.so", "torch/lib/libaoti_custom_ops.so",
    "*.a", "*.lib", "*.pdb", "*.pyi", "triton/*",
    # Qt translations other than Qt's base widgets and dialogs; QML and Quick bits
    "PySide6/Qt/translations/qtdeclarative_*", "PySide6/Qt/translations/qtmultimedia_*",
    "PySide6/Qt/translations/qtwebengine_*", "PySide6/Qt/translations/qtconnectivity_*",
    "PySide6/Qt/translations/qtlocation_*", "PySide6/Qt/translations/qtserialport_*",
    "PySide6/Qt/translations/qtwebsockets_*", "PySide6/Qt/translations/qthelp_*",
    "PySide6/Qt/translations/designer_*", "PySide6/Qt/translations/linguist_*",
    "PySide6/Qt/translations/assistant_*", "PySide6/Qt/qml/*",
    "PySide6/Qt/lib/libQt6Quick*", "PySide6/Qt/lib/libQt6Qml*", "PySide6/Qt/lib/libQt6Pdf*",
    "PySide6/Qt/lib/libQt6Designer*", "PySide6/Qt/plugins/qmltooling/*",
    "PySide6/Qt/plugins/sqldrivers/*", "PySide6/Qt/plugins/designer/*",
    "PySide6/Qt/plugins/imageformats/libqpdf*",
]


# CUDA libraries: left out of the CPU build (Linux, macOS). The Windows recipe builds with a CUDA
# torch and sets SMOLCHAT_BUILD_VARIANT=cuda to keep them (see windows/README.md).
# Matched against shared libraries only (torch's Python module torch/backends/cudnn stays).
CUDA_FILES = [
    "nvidia/*", "*cudnn*", "*cublas*", "*nccl*", "*cufft*", "*cusparse*", "*curand*", "*cusolver*",
    "*nvrtc*", "*nvJitLink*", "*cupti*", "*cudart*", "torch/lib/*torch_cuda*", "*caffe2_nvrtc*",
]


def build_variant() -> str:
    """``cpu`` (default) or ``cuda``, from ``$SMOLCHAT_BUILD_VARIANT``."""
    return os.environ.get("SMOLCHAT_BUILD_VARIANT", "cpu")


def keep_entry(dest: str) -> bool:
    """False for a collected file (path inside the app folder) that no import of the app needs."""
    path = dest.replace("\\", "/")
    if any(fnmatch.fnmatch(path, pattern) for pattern in EXCLUDED_FILES):
        return False
    if build_variant() == "cpu" and re.search(r"\.(so(\.\d+)*|dll|dylib)$", path):
        return not any(fnmatch.fnmatch(path, pattern) for pattern in CUDA_FILES)
    return True
