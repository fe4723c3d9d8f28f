"""Experiment: a photo question's long prefill as fixed-shape row steps (CUDA graph replays of the
static decoder's short-prefill step, R rows each) instead of the eager decoder. One process per
variant (PREFILL_ROWS is read when the static decoder is made). Prints the vision + prefill phase
(median of 12 new 13-tile photos) and whether the first token matches the eager prefill's. Session 24.

    python prefill_rows.py CKPT PHOTO eager|R [torch|triton]
"""
import statistics, sys, time
sys.path.insert(0, ".")
import torch
from PIL import Image
import engine.models.llama.static_decode as sd
from engine.models.llama import lm as lm_mod
variant = sys.argv[3]
impl = sys.argv[4] if len(sys.argv) > 4 else "torch"
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
print(f"{variant:6s} {impl:6s} triton rows used: {getattr(st, 'rows_triton', None) and st.triton is not None}; phase median "
      f"{statistics.median(phase):.1f} ms (min {min(phase):.1f}, max {max(phase):.1f}); peak {torch.cuda.max_memory_allocated()/2**20:.0f} MiB")
print(f"{variant} {impl} answers " + " | ".join(",".join(map(str, a)) for a in answers[:6]), flush=True)
