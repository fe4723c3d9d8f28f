"""Session 31: where a warm process's load to ready goes (issue 17's < 2 s). Times
``load_components``, then the warm-up's parts (the vision graphs, LlamaLM.warmup, the photo
question) synchronized, with a cProfile of the whole load's top functions by own time.

    python load_profile.py CHECKPOINT
"""
import cProfile
import io
import pstats
import sys
import time

t_start = time.perf_counter()
import torch  # noqa: E402

sys.path.insert(0, ".")
from engine.chat import ChatSession  # noqa: E402
from engine.registry import load_components  # noqa: E402


def main():
    ck = sys.argv[1]
    t_imp = time.perf_counter()
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    t_ctx = time.perf_counter()
    prof = cProfile.Profile()
    prof.enable()
    parts = load_components(ck, "cuda", None, None)
    torch.cuda.synchronize()
    t_load = time.perf_counter()
    session = ChatSession(*parts, None, name="ck")
    m = session.model
    steps = m._vision_steps()
    if steps is not None:
        steps.capture_all()
    torch.cuda.synchronize()
    t_vis = time.perf_counter()
    from engine.models.llama.lm import LlamaLM
    LlamaLM.warmup(m, session.cache)
    torch.cuda.synchronize()
    t_lm = time.perf_counter()
    session._warm_photo_question()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    t_photo = time.perf_counter()
    prof.disable()
    print(f"imports {t_imp - t_start:.3f} s, CUDA context {t_ctx - t_imp:.3f}, load_components {t_load - t_ctx:.3f}, "
          f"vision graphs {t_vis - t_load:.3f}, LlamaLM.warmup {t_lm - t_vis:.3f}, photo question {t_photo - t_lm:.3f}; "
          f"load to ready {t_photo - t_ctx:.3f} s")
    try:
        from triton.runtime.cache import triton_key
        print("triton_key cache:", triton_key.cache_info())
    except Exception as exc:  # noqa: BLE001
        print("triton_key:", exc)
    s = io.StringIO()
    st = pstats.Stats(prof, stream=s).sort_stats("tottime")
    st.print_stats(25)
    st.print_callers("update|builtins.compile|_io.open")
    st.sort_stats("cumulative").print_stats(40)
    print("\n".join(s.getvalue().splitlines()))


if __name__ == "__main__":
    main()
