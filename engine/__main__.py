"""Command line: ``python -m engine {generate,info,embed,perplexity,serve}`` (DESIGN.md §5).

Exit code 0 on success, 2 on bad input (one line on stderr), 1 on an unexpected failure, 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from engine.api import smolchat_version
from engine.api.errors import EngineError
from engine.api.events import DETAILS, WEIGHT_FORMATS, DoneEvent, GenerationParams
from engine.api.hub import MODEL_HELP
from engine.api.servers import check_server_address, masked_url


def _server_address(text: str) -> str:
    """``--server``'s value, refused by argparse (usage, exit 2) when it is no server address."""
    try:
        return check_server_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error for a bad value (trial 55: twenty lines of usage came before the one
    line that said what was wrong); a missing argument keeps the usage, which lists what is needed."""

    def error(self, message: str):  # noqa: D102 - argparse's
        if message.startswith("the following arguments are required"):
            super().error(message)
        self.exit(2, f"{self.prog}: error: {message}\n({self.prog} --help lists the options)\n")


def _build_parser() -> argparse.ArgumentParser:
    # As it was started: the installed command, or the module (the usage and errors name it).
    prog = "smolchat-cli" if os.path.basename(sys.argv[0]).startswith("smolchat-cli") else "python -m engine"
    ap = _Parser(prog=prog, description="Smolchat engine: SmolVLM and SmolLM2 on your own machine")
    ap.add_argument("--version", action="version", version=f"Smolchat engine {smolchat_version()}")
    sub = ap.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("generate", help="answer a prompt (with images) and stream the answer")
    gen.add_argument("--model", required=True,
                     help=f"{MODEL_HELP} (with --server: the server's model name)")
    gen.add_argument("--server", default=None, metavar="URL", type=_server_address,
                     help="answer on this OpenAI-compatible server instead (vLLM, llama-server, Ollama, "
                          "smolchat serve); e.g. http://gpu-box:8000/v1")
    gen.add_argument("--api-key", default=None,
                     help="the server's API key (or set $SMOLCHAT_API_KEY: keeps it out of the process list)")
    gen.add_argument("--image", action="append", default=[], help="image file (repeat for several)")
    text = gen.add_mutually_exclusive_group(required=True)
    text.add_argument("--prompt", help="the question")
    text.add_argument("--prompt-file", help="read the question from this UTF-8 file (long prompts)")
    gen.add_argument("--system", default=None, help="system prompt")
    gen.add_argument("--max-new-tokens", type=int, default=256,
                     help="answer at most this many tokens (>= 1; default %(default)s)")
    gen.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    gen.add_argument("--top-k", type=int, default=0, help="sample among the K likeliest tokens (default 0: all)")
    gen.add_argument("--top-p", type=float, default=1.0,
                     help="sample among the likeliest tokens that make up P of the probability (default 1: all)")
    gen.add_argument("--min-p", type=float, default=0.0,
                     help="leave out tokens less likely than P times the likeliest (default 0: none)")
    gen.add_argument("--repetition-penalty", type=float, default=1.0,
                     help="make tokens already in the text less likely (default 1: no penalty)")
    gen.add_argument("--seed", type=int, default=None, help="the sampling's seed (default: a different one each run)")
    gen.add_argument("--image-detail", choices=list(DETAILS), default="auto",
                     help="auto (default, as in the app and the server: full on a GPU, balanced on a CPU), "
                          "full (the reference tiling), balanced (never upscaled), fast (one tile)")
    gen.add_argument("--video", action="append", default=[],
                     help="video file (SmolVLM2 models; repeat for several): frames sampled as transformers does")
    gen.add_argument("--max-frames", type=int, default=None,
                     help="at most this many frames per video (default: the checkpoint's, 64)")
    gen.add_argument("--fps", type=float, default=None,
                     help="frames per second to sample from a video (default: the checkpoint's, 1)")
    gen.add_argument("--device", default=None, help="auto (default), cuda, mps or cpu")
    gen.add_argument("--dtype", default=None, help="auto (default), float32, bfloat16 or float16")
    gen.add_argument("--cache", choices=["paged", "contiguous"], default=None,
                     help="paged (default: memory follows the tokens in use) or contiguous")
    gen.add_argument("--weights", type=str.lower, choices=list(WEIGHT_FORMATS), default=None,
                     help="int8: int8 weight-only text decoder; int4: 4-bit groups of 32 (both on the CPU or "
                          "CUDA: less memory, faster decode, answers change slightly; int4 keeps the output "
                          "layer int8); default $SMOLCHAT_WEIGHTS or auto")
    gen.add_argument("--json", action="store_true", help="one JSON object per line")
    gen.add_argument("--ignore-eos", action="store_true", help="decode to --max-new-tokens (benchmarks)")

    info = sub.add_parser("info", help="print model metadata and capabilities")
    info.add_argument("--model", required=True, help=MODEL_HELP)
    info.add_argument("--json", action="store_true", help="one JSON object")

    emb = sub.add_parser("embed", help="a pooled, L2-normalised embedding of a text and/or images")
    emb.add_argument("--model", required=True, help=MODEL_HELP)
    emb.add_argument("--text", default="", help="text to embed")
    emb.add_argument("--image", action="append", default=[], help="image file (repeat for several)")
    emb.add_argument("--pooling", choices=["mean", "last"], default="mean",
                     help="mean over content tokens (default) or the last content token")
    emb.add_argument("--image-detail", choices=list(DETAILS), default="full",
                     help="as for generate, but full by default: the same vector on every device")
    emb.add_argument("--device", default=None, help="auto (default), cuda, mps or cpu")
    emb.add_argument("--dtype", default=None, help="auto (default), float32, bfloat16 or float16")
    emb.add_argument("--json", action="store_true", help='{"dim": H, "pooling": ..., "embedding": [...]}')

    ppl = sub.add_parser("perplexity", help="sliding-window perplexity of a text file")
    ppl.add_argument("--model", required=True, help=MODEL_HELP)
    ppl.add_argument("--file", required=True, help="UTF-8 text file")
    ppl.add_argument("--context", type=int, default=None, help="window length in tokens (default: the model's)")
    ppl.add_argument("--stride", type=int, default=None, help="tokens between window starts (default: --context)")
    ppl.add_argument("--device", default=None, help="auto (default), cuda, mps or cpu")
    ppl.add_argument("--dtype", default=None, help="auto (default), float32, bfloat16 or float16")
    ppl.add_argument("--weights", type=str.lower, choices=list(WEIGHT_FORMATS), default=None,
                     help="measure the quality of int8 / int4 weights against float32 (default: as generate)")
    ppl.add_argument("--json", action="store_true", help="one JSON object")
    srv = sub.add_parser("serve", help="run the local OpenAI-compatible HTTP server (as smolchat serve)")
    srv.add_argument("--version", action="version", version=f"smolchat serve {smolchat_version()}")
    try:
        from server.cli import add_arguments  # torch-free; FastAPI itself loads only when serving
    except ImportError:  # the engine installed without the server package
        srv.add_argument("--model", required=True, help=MODEL_HELP)
    else:
        add_arguments(srv)
    return ap


def _serve(args: argparse.Namespace) -> int:
    try:
        from server.cli import serve
    except ImportError as exc:
        raise ValueError(f"the server is not installed ({exc}): pip install 'smolchat[server]'") from exc
    return serve(args)


def _generate(args: argparse.Namespace) -> int:
    from engine.cache import CacheConfig
    from engine.chat import ChatSession

    if args.max_new_tokens < 1:  # GenerationParams takes 0 (the server's max_tokens 0 scores a prompt): an
        # answer of none would load the model only to fail
        raise ValueError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    params = GenerationParams(
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
        repetition_penalty=args.repetition_penalty, max_new_tokens=args.max_new_tokens, seed=args.seed,
        ignore_eos=args.ignore_eos, image_detail=args.image_detail, video_fps=args.fps,
        video_max_frames=args.max_frames,
    )
    _check_images(args.image)
    if args.video:  # bad videos fail here too, from their headers
        from engine.models.smolvlm.video import probe

        for video in args.video:
            probe(video)
    if args.image and not args.server:  # and so do images for a text-only model (config.json alone says so;
        # a server's model is checked against what the server reports once connected)
        from engine.api.errors import UnsupportedOperation
        from engine.sources import resolve_source

        meta = resolve_source(args.model).metadata()
        if not meta.takes_images:
            raise UnsupportedOperation(f"{meta.name or args.model} ({meta.model_type}) is a text-only model: "
                                       f"it takes no images (remove --image)")
    prompt = args.prompt
    if args.prompt_file is not None:
        # Without the line end every editor puts last (and the spaces around): the app sends the message
        # box's text stripped, and one more newline changed SmolLM2's answer to the README's question (trial 71).
        prompt = _read_text(args.prompt_file, "--prompt-file").strip()
    if not prompt.strip() and not args.image and not args.video:  # before the model loads (seconds)
        raise ValueError(f"{'--prompt-file' if args.prompt_file is not None else '--prompt'} is empty: "
                         "ask a question (or give an --image or --video to ask about)")
    if args.server:
        _note_local_only(args)
        return _generate_remote(args, prompt, params)
    cache = CacheConfig(kind=args.cache) if args.cache else None
    session = ChatSession.load(args.model, device=args.device, dtype=args.dtype, cache_config=cache,
                               weights=args.weights,
                               system_prompt=args.system)
    more = {"videos": args.video} if args.video else {}
    done = []
    engine = {"device": session.device, "dtype": session.dtype, "weights": session.weights}
    code = _print_events(_recording(session.send(prompt, images=args.image, params=params, **more), done), args.json,
                         engine=engine)
    stats, capacity = done[-1].stats if done else None, session.cache.capacity
    if stats is not None and done[-1].finish_reason == "length" and stats.generated_tokens < args.max_new_tokens:
        # Any limit is taken; where the context's end came first, say so (a server refuses such a limit).
        print(f"note: the answer stopped at the end of the {capacity}-token context ({stats.prompt_tokens} prompt "
              f"tokens + {stats.generated_tokens} generated), before --max-new-tokens {args.max_new_tokens}",
              file=sys.stderr)
    return code


#: ``generate`` options for a model on this computer, and why a server does not take them.
LOCAL_ONLY = {"device": "the server runs its model on its own device",
              "dtype": "the server runs its model at its own precision",
              "cache": "the server keeps its own KV cache",
              "weights": "the server runs its own weights",
              "fps": "the server samples videos itself", "max_frames": "the server samples videos itself"}


def _note_local_only(args: argparse.Namespace) -> None:
    """With ``--server``: one line naming the options given that apply to a local model only (trial 71:
    ``--device cuda --weights int4`` were taken without a word, and the answer was the server's)."""
    given = [name for name in LOCAL_ONLY if getattr(args, name) is not None]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        reasons = "; ".join(dict.fromkeys(LOCAL_ONLY[name] for name in given))
        print(f"note: {flags} {'applies' if len(given) == 1 else 'apply'} to a model on this computer, not to "
              f"--server: ignored ({reasons})", file=sys.stderr)


def _check_images(paths: list[str]) -> None:
    """Read each ``--image`` before the model loads (seconds), so that a bad one fails at once, and note
    an animated one (its first frame is used).

    Raises:
        ImageError: a file is missing or no image; a PDF is named as one, with what to do instead
            (the app takes PDFs, as page images, so a user may expect the command line to as well).
    """
    from engine.api.errors import ImageError
    from engine.api.images import frame_count, load_image

    for image in paths:
        try:
            load_image(image)
        except ImageError:
            if _is_pdf(image):
                raise ImageError(f"{image} is a PDF: the command line takes images (PNG, JPEG, WebP…); attach "
                                 "the PDF in the app, which reads its pages as images, or export its pages as "
                                 "PNG") from None
            raise
        frames = frame_count(image)
        if frames > 1:
            print(f"note: {image} is animated ({frames} frames); its first frame is used", file=sys.stderr)


def _is_pdf(path: str) -> bool:
    """``path`` starts as a PDF does: ``%PDF-`` within its first 1024 bytes (where readers look for it)."""
    try:
        with open(path, "rb") as f:
            return b"%PDF-" in f.read(1024)
    except OSError:
        return False


def _recording(events, done: list):
    """``events`` as they are, their DoneEvent appended to ``done`` too."""
    for event in events:
        if isinstance(event, DoneEvent):
            done.append(event)
        yield event


#: The ``error_type`` of an answer refused for what the user gave (exit 2, as the same refusal before the
#: model loads): attachments the model cannot take, a prompt past the context, a key or model the server
#: does not know (trial 71: through ``--server`` these were exit 1).
BAD_INPUT_ERRORS = frozenset({"UnsupportedOperation", "ImageError", "PromptTooLongError", "Remote:context",
                              "Remote:unauthorized", "Remote:unauthorized_url", "Remote:forbidden",
                              "Remote:no_model", "Remote:not_found"})


def _print_events(events, as_json: bool, remote: bool = False, engine: dict | None = None) -> int:
    """Stream tokens to stdout (text, or one JSON object per line); 1 when the answer failed, 2 when it
    was refused for its input (:data:`BAD_INPUT_ERRORS`).

    A server's tokens have no id here (``"id": null``); local events with id -1 carry no token.
    ``engine``: ``{"device", "dtype", "weights"}`` of the local model, said with the final numbers
    (int8 and int4 answers differ from float ones: a run's record says which it was)."""
    engine = engine or {}
    out = sys.stdout
    _line_open[0] = False
    for event in events:
        if isinstance(event, DoneEvent):
            if as_json:
                frames = {"frames": event.stats.video_frames} if event.stats.video_frames else {}
                # What the engine noted (a video read in part, turns left out to fit), as the server's
                # ``notice`` and the app's line under the answer (trial 53: the command line said nothing).
                notice = {"notice": event.stats.notice} if event.stats.notice else {}
                stats = _stats_json(event.stats)
                if remote:  # a server's stream says no prefill time: unknown, not 0 (trial 55)
                    stats["prefill_tokens_per_s"] = None
                out.write(json.dumps({"type": "done", "finish_reason": event.finish_reason,
                                      **stats, **frames, **notice, **engine,
                                      **({"error": event.error} if event.error else {})}) + "\n")
            elif event.finish_reason != "error" or event.stats.prompt_tokens or event.stats.generated_tokens:
                # (a refusal before any work has nothing to measure: its error line alone)
                s = event.stats
                out.write("\n")
                # TTFT includes reading the images and the vision tower; the prefill rate is the
                # decoder's alone, so a photo's TTFT is not prompt tokens / that rate.
                images = f", {s.image_tokens} of them image tokens" if s.image_tokens else ""
                # A server that stopped before its usage said no prompt count (not 0), and a rate over a
                # token or two is not measured (trial 71: "prompt 0 tokens", "decode 20283.2 tok/s").
                prompt = (f"prompt {s.prompt_tokens} tokens ({s.cached_tokens} cached{images})" if s.prompt_tokens
                          else "prompt tokens not reported")
                decode = f"decode {s.decode_tokens_per_s:.1f} tok/s" if s.decode_tokens_per_s else \
                    "decode rate not measured (too few tokens)"
                print(f"[{event.finish_reason}] {prompt}, "
                      f"generated {s.generated_tokens}, TTFT {s.ttft_s:.3f} s"
                      f"{' (images and vision tower included)' if s.image_tokens else ''}, "
                      + ("" if remote else f"decoder prefill {s.prefill_tokens_per_s:.1f} tok/s, ")
                      + decode
                      + (f" ({engine['device']}, {engine['dtype']}"
                         f"{', ' + engine['weights'] + ' weights' if engine['weights'] in ('int8', 'int4') else ''})"
                         if engine else ""),
                      file=sys.stderr)
                if s.notice:
                    print(f"note: {s.notice}", file=sys.stderr)
            out.flush()
            if event.finish_reason == "error":
                print(f"error: {event.error}", file=sys.stderr)
                return 2 if event.error_type in BAD_INPUT_ERRORS else 1
        elif as_json:
            if event.token_id >= 0 or remote:
                out.write(json.dumps({"type": "token", "id": event.token_id if event.token_id >= 0 else None,
                                      "text": event.text}) + "\n")
            out.flush()
        else:
            out.write(event.text)
            out.flush()
            if event.text:
                _line_open[0] = not event.text.endswith("\n")
    return 0


#: Whether plain ``generate`` output ends in the middle of a line (Ctrl-C then ends it: trial 71 found the
#: shell's prompt glued to the cut answer).
_line_open = [False]


def _cancelled_plain() -> None:
    """Plain ``generate``'s last words on Ctrl-C: the answer's line ended, and why it stopped (on stderr,
    where the stats line would have been)."""
    if _line_open[0]:
        sys.stdout.write("\n")
        sys.stdout.flush()
    print("[cancelled] stopped by Ctrl-C", file=sys.stderr)


def _generate_remote(args: argparse.Namespace, prompt: str, params: GenerationParams) -> int:
    """``generate --server``: the same output, answered by an OpenAI-compatible server."""
    import os
    import queue

    from app.backends.remote import RemoteBackend
    from app.backends.remote_http import Server
    from engine.api import Attachment

    key = args.api_key or os.environ.get("SMOLCHAT_API_KEY") or ""
    backend = RemoteBackend(Server(masked_url(args.server), args.server, key))  # the name: in every message
    events: queue.Queue = queue.Queue()
    backend.load(args.model, {}, lambda info, error: events.put((info, error)))
    info, error = events.get()
    if info is None:
        backend.close()
        raise ValueError(error)  # unreachable server, wrong key, unknown model: the user's to fix (exit 2)
    # Videos first, then images: the order the app sends a message's attachments in (text_parts).
    attachments = [Attachment(p, "video") for p in args.video] + [Attachment(p) for p in args.image]
    backend.send(prompt, attachments, params, events.put, args.system)

    def stream():
        while True:
            event = events.get()
            yield event
            if isinstance(event, DoneEvent):
                return
    try:
        return _print_events(stream(), args.json, remote=True)
    finally:
        backend.cancel()  # an error mid-answer closes the stream (Ctrl-C ends the process: the server sees it go)
        backend.close()


def _stats_json(stats) -> dict:
    keys = ("prompt_tokens", "cached_tokens", "generated_tokens", "ttft_s", "prefill_tokens_per_s",
            "decode_tokens_per_s")
    d = stats.to_dict()
    return {k: d[k] for k in keys}


def _info(args: argparse.Namespace) -> int:
    """The checkpoint's metadata and the model manager's check of its files (config, tokenizer,
    processor, every tensor's name and shape against the architecture, weights files as long as
    their headers say; not the weights' values, which would mean reading gigabytes): 1 when that
    finds problems, which are listed (``"problems"`` in JSON; a weights file cut short or damaged is
    one, its ``parameters`` and ``tensors`` then null); 2 when the folder or its config cannot be
    read at all."""
    from engine.api.errors import ModelLoadError
    from engine.validate import check_checkpoint

    report = check_checkpoint(args.model)
    if not report.info:  # the folder or its config cannot be read: its one problem is the error line
        raise ModelLoadError(report.problems[0])
    info, problems = report.info, report.problems
    if args.json:
        print(json.dumps({**info, "problems": problems}))
        return 1 if problems else 0
    size = ("weights unreadable" if info["parameters"] is None else
            f"{info['parameters'] / 1e6:.1f}M parameters, {info['tensors']} tensors")
    print(f"{info['name']}  ({info['model_type']}, {size})")
    print(f"  folder        {info['folder']}")
    t, v = info["text"], info.get("vision")
    print(f"  text          {t['layers']} layers, hidden {t['hidden_size']}, heads {t['heads']}/{t['kv_heads']} "
          f"(q/kv), head_dim {t['head_dim']}, vocab {t['vocab_size']}, rope_theta {t['rope_theta']:g}")
    if v is not None:
        print(f"  vision        {v['layers']} layers, hidden {v['hidden_size']}, {v['image_size']} px tiles, "
              f"patch {v['patch_size']}, {v['image_tokens_per_tile']} tokens per tile")
        print(f"  cpu vision    {v['cpu_precision']}")
    print(f"  eos ids       {info['eos_token_ids']}")
    print(f"  cpu decode    {info['cpu_decode_step']}")
    for k, val in info["capabilities"].items():
        print(f"  {k:<20} {'yes' if val is True else 'no' if val is False else val}")
    if problems:
        print(f"  problems      {len(problems)}: this checkpoint cannot be loaded as it is")
        for problem in problems:
            print(f"    - {problem}")
        return 1
    print("  check         config, tokenizer, processor, every tensor's name and shape, weights files complete: "
          "all right (the weights' values are not read)")
    return 0


def _embed(args: argparse.Namespace) -> int:
    from engine.embeddings import Embedder

    if not args.text and not args.image:
        raise ValueError("give --text and/or --image")
    _check_images(args.image)
    embedder = Embedder.load(args.model, device=args.device, dtype=args.dtype, pooling=args.pooling)
    vec = embedder.embed(args.text, args.image, image_detail=args.image_detail).tolist()
    if args.json:
        print(json.dumps({"dim": len(vec), "pooling": args.pooling, "embedding": vec}))
    else:
        print(" ".join(f"{x:.6f}" for x in vec))
    return 0


def _read_text(path: str, flag: str) -> str:
    """The UTF-8 text of the file a flag names, without the byte order mark Windows editors put
    first; ValueError (exit 2) saying why it cannot be read, in words ("no such file or
    directory", "not UTF-8 text"), without Python's errno prefix."""
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"cannot read {flag} {path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise ValueError(f"cannot read {flag} {path}: {(exc.strerror or str(exc)).lower()}") from None


def _perplexity(args: argparse.Namespace) -> int:
    from engine.perplexity import perplexity, windows
    from engine.registry import load_model
    from engine.sources import resolve_source
    from engine.tokenizer import Tokenizer

    text = _read_text(args.file, "--file")
    source = resolve_source(args.model)
    ids = Tokenizer.from_pretrained(source.folder).encode(text)
    # What can be checked without the model is, before its load (8-10 s for SmolLM2 on a busy CPU):
    # a file too short, a stride or window length out of range (trial 73 F4). A window longer than the
    # model's context needs its config and is said by perplexity() after the load.
    if len(ids) < 2:
        raise ValueError(f"perplexity needs at least 2 tokens, got {len(ids)} from --file {args.file}")
    if args.context is not None:
        windows(len(ids), args.context, args.context if args.stride is None else args.stride)
    elif args.stride is not None:  # (the window is the model's context: its upper bound waits for the load)
        windows(len(ids), max(2, args.stride), args.stride)
    model = load_model(source, args.device, args.dtype, weights=args.weights)
    result = perplexity(model, ids, args.context, args.stride)
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        tokens, windows = result.tokens, result.windows
        print(f"perplexity {result.perplexity:.4f}  (mean NLL {result.nll:.4f} nats over {tokens} "
              f"token{'s' * (tokens != 1)}, {windows} window{'s' * (windows != 1)})")
        if tokens < 100:  # a handful of tokens measures little: say so rather than let a number stand alone
            print(f"note: {tokens} scored token{'s' * (tokens != 1)} is too few for a meaningful perplexity; "
                  "use a longer text", file=sys.stderr)
    return 0


COMMANDS = {"generate": _generate, "info": _info, "embed": _embed, "perplexity": _perplexity, "serve": _serve}


def main(argv: list[str] | None = None) -> int:
    """The program (``argv`` None: ``sys.argv``). Run as the program, a command that runs torch on
    this thread ends the process at once with 130 on Ctrl-C (:func:`engine.service.ctrl_c_exits_process`);
    with an explicit ``argv`` (tests, a program embedding the CLI) signals are left as they are, and
    Ctrl-C is a KeyboardInterrupt answered with 130."""
    program = argv is None
    args = _build_parser().parse_args(argv)
    as_json = bool(getattr(args, "json", False))
    if sys.stdout is None:  # started with stdout closed (``>&-``): nothing could be printed (trial 71: a traceback)
        if sys.stderr is not None:
            print("error: standard output is closed: there is nowhere to print to", file=sys.stderr)
        return 2
    try:
        if args.command == "serve" or not program:  # serve: uvicorn handles Ctrl-C, the engine has its thread
            return COMMANDS[args.command](args)
        from engine.service import ctrl_c_exits_process

        # With --json a script reads stdout only: the answer ends with a record there, also on Ctrl-C.
        last_words = None if args.command != "generate" else (lambda: _json_done("cancelled")) if as_json \
            else _cancelled_plain
        with ctrl_c_exits_process(restore=False, last_words=last_words):
            return COMMANDS[args.command](args)
    except BrokenPipeError:
        # The reader went away (``... | head -n 1``): stop quietly, like a process killed by SIGPIPE.
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + 13
    except (EngineError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        if as_json and args.command == "generate":
            _json_done("error", error=str(exc), error_type=type(exc).__name__)
        return 2
    except KeyboardInterrupt:
        if as_json and args.command == "generate":
            _json_done("cancelled")
        elif args.command == "generate":
            _cancelled_plain()
        return 130


def _json_done(reason: str, **fields) -> None:
    """``generate --json``'s last line where no answer's DoneEvent made one: an error before the
    answer (a bad image, a model that cannot load) or Ctrl-C."""
    sys.stdout.write(json.dumps({"type": "done", "finish_reason": reason, **fields}) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
