"""Experiment (session 25, from session 24's prefill_rows.py): a photo question's long prefill as
fixed-shape row steps (CUDA graph replays of the static decoder's short-prefill step, R rows each),
with the rows' attention forced to one SDPA backend (default / efficient / cudnn / flash-less math),
to see which one session 24's +119 MiB at 1024 rows came from. Prints the vision + prefill phase
(median of 12 new 13-tile photos), the process's peak, and the first tokens.

    python prefill_rows_sdpa.py CKPT PHOTO eager|R [torch|triton] [default|efficient|cudnn|math]
"""
import statistics, sys, time
sys.path.insert(0, ".")
import torch
from PIL import Image
import engine.models.llama.static_decode as sd
from engine.models.llama import lm as lm_mod
variant = sys.argv[3]
impl = sys.argv[4] if len(sys.argv) > 4 else "torch"
backend = sys.argv[5] if len(sys.argv) > 5 else "default"
if backend != "default":
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import engine.models.llama.static_decode as sd_mod
    chosen = {"efficient": SDPBackend.EFFICIENT_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[backend]
    real_sdpa = sd_mod.F.scaled_dot_product_attention
    class _F:
        def __getattr__(self, name):
            return getattr(torch.nn.functional, name)
        @staticmethod
        def scaled_dot_product_attention(*a, **k):
            with sdpa_kernel([chosen]):
                return real_sdpa(*a, **k)
    sd_mod.F = _F()
if variant != "eager":
    sd.PREFILL_ROWS = int(variant)
    orig_prefill = lm_mod.LlamaLM.prefill
    @torch.inference_mode()
    def prefill(self, input, cache, pos):
        static = self._static_decoder()
        if static is not None and static.supports(cache, input) and input.shape[1] > 0:
            return static.prefill(input.to(device=self.device, dtype=self.dtype), cache)
        return orig_prefill(self, input, cache, pos)
    lm_mod.LlamaLM.prefill = prefill
from engine.api import GenerationParams
from engine.chat import ChatSession
from engine.service import default_loader
from server.media import DETAILS

ck, image = sys.argv[1], sys.argv[2]
session = default_loader(ck, {})
st = session.model._static
if st is not None and impl == "torch":
    st.rows_triton = False
params = GenerationParams(max_new_tokens=8, ignore_eos=True, image_detail=DETAILS["high"])
span = {}
orig = ChatSession._prefill
def timed(self, *a, **k):
    torch.cuda.synchronize(); t = time.perf_counter()
    out = orig(self, *a, **k)
    torch.cuda.synchronize(); span["phase"] = time.perf_counter() - t
    return out
ChatSession._prefill = timed
base = Image.open(image).convert("RGB")
def photo(i):
    im = base.copy()
    for x in range(16):
        im.putpixel((x, 0), (255 * ((i >> (x % 8)) & 1), 7, 7))
    path = f"/tmp/rphoto{i}.png"; im.save(path); return path
phase, answers = [], []
for i in range(15):
    session.reset(); session.system_prompt = f"run {i}"
    out = [e.token_id for e in session.send("Describe this photo.", images=[photo(i)], params=params) if hasattr(e, "token_id")]
    if i >= 3:
        phase.append(span["phase"] * 1e3)
    answers.append(out)
print(f"{variant:6s} {impl:6s} {backend:9s} triton rows used: {getattr(st, 'rows_triton', None) and st.triton is not None}; phase median "
      f"{statistics.median(phase):.1f} ms (min {min(phase):.1f}, max {max(phase):.1f}); peak {torch.cuda.max_memory_allocated()/2**20:.0f} MiB")
print(f"{variant} {impl} answers " + " | ".join(",".join(map(str, a)) for a in answers[:6]), flush=True)
