"""Native (C) CPU kernels built per machine on first use: the fused batch-1 decode step.

:mod:`engine.native.build` finds or compiles the library off the answer path; :mod:`engine.native.step`
drives it for a :class:`~engine.models.llama.lm.LlamaLM`. ``SMOLCHAT_NATIVE=0`` turns it off.
"""

from engine.native.build import describe, enabled, library, start

__all__ = ["describe", "enabled", "library", "start"]
