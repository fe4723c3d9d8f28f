"""transformers' SmolVLM processor as the test oracle, shared by the tests and ``bench/family_gpu.py``.

Imports transformers when called, so a module that imports this one still loads without it.
"""

from __future__ import annotations

import json
from pathlib import Path


def hf_processor(folder: Path):
    """transformers' processor for the config folder ``folder``, with the pixel-exact PIL image
    backend (``backend="pil"``; the default torchvision backend swaps LANCZOS for BICUBIC).

    SmolVLM2 folders (``model_type`` ``smolvlm``): ``AutoProcessor`` would also build the video
    processor, which needs torchvision (not installable beside the CPU torch here), so the
    ``SmolVLMProcessor`` is assembled from its tokenizer and image processor; its video prompt
    expansion needs only those.

    Raises:
        ImportError: transformers is not installed.
    """
    import transformers
    from transformers.models.smolvlm.processing_smolvlm import SmolVLMProcessor

    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text())
    if config["model_type"] != "smolvlm":
        return transformers.AutoProcessor.from_pretrained(folder, backend="pil")
    proc = object.__new__(SmolVLMProcessor)
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    proc.tokenizer = tok
    proc.image_processor = transformers.AutoImageProcessor.from_pretrained(folder, backend="pil")
    proc.fake_image_token, proc.image_token = "<fake_token_around_image>", "<image>"
    proc.global_image_token, proc.video_token = "<global-img>", "<video>"
    proc.end_of_utterance_token = "<end_of_utterance>"
    proc.image_token_id = tok.convert_tokens_to_ids("<image>")
    proc.image_seq_len = json.loads((folder / "processor_config.json").read_text())["image_seq_len"]
    return proc
