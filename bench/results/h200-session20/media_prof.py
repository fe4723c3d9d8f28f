"""Where a new photo's server-side handling goes on this machine (CPU only)."""
import asyncio, base64, functools, hashlib, io, statistics, sys, tempfile, time, timeit
from pathlib import Path
sys.path.insert(0, ".")
from PIL import Image
from server.config import ServerConfig
import server.media as M
from engine.api.images import load_image
src = sys.argv[1]
img = Image.open(src).convert("RGB")
def photo(i):
    im = img.copy(); im.putpixel((0, 0), (i % 256, 1, 7)); b = io.BytesIO(); im.save(b, format="PNG"); return b.getvalue()
datas = [photo(i) for i in range(14)]
urls = ["data:image/png;base64," + base64.b64encode(d).decode() for d in datas]
b64 = urls[0].split(",", 1)[1]
def t(f, n=20): return round(min(timeit.repeat(f, number=n, repeat=3)) / n * 1e3, 3)
print("b64 decode", t(lambda: base64.b64decode(b64, validate=True)))
print("sha256", t(lambda: hashlib.sha256(datas[0]).hexdigest()), "blake2b", t(lambda: hashlib.blake2b(datas[0]).hexdigest()))
print("load_image bytes", t(lambda: load_image(datas[0]), 5))
tmp = Path(tempfile.mkdtemp()); (tmp / "a.png").write_bytes(datas[0])
print("load_image path", t(lambda: load_image(tmp / "a.png"), 5))
print("write 0.45 MB", t(lambda: (tmp / "b.part").write_bytes(datas[0]), 20))
store = M.MediaStore(ServerConfig(), Path(tempfile.mkdtemp()))
T = {}
def wrap(name):
    orig = getattr(store, name)
    @functools.wraps(orig)
    def w(*a, **k):
        s = time.perf_counter(); r = orig(*a, **k); T.setdefault(name, (s, time.perf_counter())); return r
    setattr(store, name, w)
for n in ("_open_data", "_check_image", "_write_part", "_commit"): wrap(n)
async def main():
    rows = []
    for u in urls:
        T.clear(); s = time.perf_counter(); await store.image(u, "p"); e = time.perf_counter()
        rows.append({k: (round((v[0] - s) * 1e3, 2), round((v[1] - v[0]) * 1e3, 2)) for k, v in T.items()} | {"total": round((e - s) * 1e3, 2)})
    for r in rows[2:7]: print(r)
    print("median total", statistics.median(r["total"] for r in rows[2:]))
asyncio.run(main())
# the engine's preprocessing of handed-over pixels against decoding the file itself
from engine.models.smolvlm.processing import ImageProcessor
proc = ImageProcessor.from_pretrained(".device-in/shared/models/SmolVLM-256M-Instruct")
pix = load_image(datas[1])
print("preprocess pixels (full)", t(lambda: proc.preprocess(pix, detail="full"), 5))
print("preprocess from path (full)", t(lambda: proc.preprocess(load_image(tmp / "a.png"), detail="full"), 5))
# Is a new photo's decode slower because its bytes are new, or because of the worker thread beside the write?
import concurrent.futures as cf
def med(f, items):
    ts = []
    for it in items:
        s = time.perf_counter(); f(it); ts.append((time.perf_counter() - s) * 1e3)
    return round(statistics.median(ts), 3)
fresh = [photo(100 + i) for i in range(12)]
print("load_image fresh bytes, main thread, median", med(load_image, fresh))
print("load_image same bytes, main thread, median", med(load_image, [datas[0]] * 12))
with cf.ThreadPoolExecutor(2) as ex:
    fresh = [photo(200 + i) for i in range(12)]
    print("load_image fresh bytes, worker thread, median", med(lambda d: ex.submit(load_image, d).result(), fresh))
    fresh = [photo(300 + i) for i in range(12)]
    print("_check_image fresh bytes, worker thread, median", med(lambda d: ex.submit(store._check_image, d, "p").result(), fresh))
    fresh = [photo(400 + i) for i in range(12)]
    def both(d):
        a = ex.submit(store._check_image, d, "p"); b = ex.submit((tmp / "c.part").write_bytes, d); b.result(); a.result()
    print("_check_image beside a write, median", med(both, fresh))
