"""llama.cpp as a peer in ``specviz bench``: the same model, prompts and weight precision, decoded by llama.cpp.

``llamacpp_ar`` is llama.cpp's plain greedy decoding; ``llamacpp_lookup`` is its prompt-lookup decoding as
llama-cpp-python ships it (``Llama(draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10))``: up to 10
tokens copied from the context after the last matching 1–2-gram, verified in one batch by the target). Both
run in this process through llama-cpp-python's bindings, so a turn gets exactly the prompt token ids the
engine gets (``engine.encode(messages)``, chat template applied; llama.cpp's tokenizer is never used), with
``torch.get_num_threads()`` threads, greedy, the same ``max_new_tokens``, stopping at the engine's eos ids.
Prefill is excluded from tokens/s as for the engine: the clock for decoding starts when the prefill's token
is out. The GGUF is converted from the engine's own weights (``engines.model.loading.model_source``) at the engine's
dtype (f32 or bf16), so both sides compute from the same numbers; their outputs may still differ (other
kernels round differently) — the bench records that share for information only.

``make peers`` (``python -m specviz.bench.llamacpp_peer setup``) brings it, every step cached under
``engines.model.machine.cache_dir() / "peers"`` and skipped when its output is there (rerun it after an interruption):

1. the llama-cpp-python sdist from PyPI (``src/``); its ``vendor/llama.cpp`` is the llama.cpp it binds;
2. llama.cpp built with cmake from that tree (``build/``): its shared libraries, ``llama-bench`` and
   ``llama-lookup`` (built once, so the bindings and the tools run the very same code);
3. the Python bindings installed without a second build of llama.cpp (``CMAKE_ARGS=-DLLAMA_BUILD=OFF``);
   they load the libraries from ``build/`` (``LLAMA_CPP_LIB_PATH``), and ``sentencepiece`` for the converter;
4. the engine's weights converted with llama.cpp's ``convert_hf_to_gguf.py`` to ``gguf/<model>-f32.gguf``
   and ``-bf16.gguf``.

Without it the bench skips these rows with a note (:func:`unavailable_reason`).
"""

from __future__ import annotations

import atexit
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from functools import lru_cache
from pathlib import Path

from engines.model.loading import DEFAULT_MODEL, model_source
from engines.model.machine import cache_dir
from engines.storage import read_json_record, staged_file, write_json_atomic

PEER_METHODS = ("llamacpp_ar", "llamacpp_lookup")
LLAMA_CPP_PYTHON = "0.3.36"
LLAMA_CPP_COMMIT = "0c1e57098"  # ggml-org/llama.cpp commit vendored by llama-cpp-python 0.3.36 (its CHANGELOG)
CONVERTER_REQUIREMENTS = ["sentencepiece>=0.2,<0.3"]  # convert_hf_to_gguf.py imports it for any llama model
LOOKUP_TOKENS = 10  # LlamaPromptLookupDecoding(num_pred_tokens=10), as hf_pld's prompt_lookup_num_tokens
LOOKUP_NGRAM = 2  # its default max_ngram_size
TOOLS = ("llama-bench", "llama-lookup")
GGUF_TYPES = {"float32": "f32", "bfloat16": "bf16"}
SKIP_NOTE = "skipped — run `make peers`"


class PeerUnavailable(RuntimeError):
    """llama.cpp, its bindings or the converted weights are not here (``make peers`` brings them)."""


# --- where things live -------------------------------------------------------------------------------------
def peers_dir() -> Path:
    return cache_dir() / "peers"


def source_dir() -> Path:
    return peers_dir() / "src" / f"llama_cpp_python-{LLAMA_CPP_PYTHON}"


def llama_cpp_dir() -> Path:
    return source_dir() / "vendor" / "llama.cpp"


def build_dir() -> Path:
    return peers_dir() / "build"


def manifest_path() -> Path:
    return peers_dir() / "manifest.json"


def gguf_path(model: str = DEFAULT_MODEL, dtype: str = "bfloat16") -> Path:
    if dtype not in GGUF_TYPES:
        raise ValueError(f"the llama.cpp peer runs float32 or bfloat16 weights, not {dtype!r}")
    return peers_dir() / "gguf" / f"{Path(model).name}-{GGUF_TYPES[dtype]}.gguf"


def _library_names() -> tuple[str, ...]:
    if sys.platform == "win32":
        return ("llama.dll",)
    return ("libllama.dylib",) if sys.platform == "darwin" else ("libllama.so",)


def built_library_dir() -> Path | None:
    """The folder of the libllama this project built (``build/bin``, or ``build/bin/Release`` with MSVC)."""
    for folder in (build_dir() / "bin", build_dir() / "bin" / "Release"):
        if any((folder / name).exists() for name in _library_names()):
            return folder
    return None


def tool_path(name: str) -> Path | None:
    """A llama.cpp program built by :func:`setup` (``llama-bench``, ``llama-lookup``), if there."""
    folder = built_library_dir()
    suffix = ".exe" if sys.platform == "win32" else ""
    return folder / f"{name}{suffix}" if folder and (folder / f"{name}{suffix}").exists() else None


# --- availability ------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _import_llama_cpp():
    """``llama_cpp``, loading this project's build of libllama when the bindings were installed without one."""
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or not spec.submodule_search_locations:
        raise PeerUnavailable("llama-cpp-python is not installed")
    own_lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    built = built_library_dir()
    if not own_lib.is_dir() and built is not None and "LLAMA_CPP_LIB_PATH" not in os.environ:
        os.environ["LLAMA_CPP_LIB_PATH"] = str(built)
    try:
        import llama_cpp
    except Exception as error:  # no library to load, or one of another llama.cpp version
        raise PeerUnavailable(f"llama-cpp-python does not load ({type(error).__name__}: {error})") from None
    return llama_cpp


def unavailable_reason(model: str = DEFAULT_MODEL, dtype: str | None = None) -> str | None:
    """Why the peer can not run ``model`` at ``dtype`` here (``None``: it can). ``dtype=None``: both dtypes."""
    if model != DEFAULT_MODEL and not Path(model).is_dir():
        return f"the peer runs the default model or a local model folder, not {model!r}"
    if dtype is not None and dtype not in GGUF_TYPES:
        return f"llama.cpp weights are converted for float32 and bfloat16, not {dtype}"
    try:
        _import_llama_cpp()
    except PeerUnavailable as error:
        return str(error)
    for each in [dtype] if dtype else list(GGUF_TYPES):
        if not gguf_path(model, each).exists():
            return f"no {GGUF_TYPES[each]} GGUF of {Path(model).name} at {gguf_path(model, each)}"
    return None


def skip_note(reason: str) -> str:
    return f"{SKIP_NOTE} ({reason})"


def peer_info(model: str, dtype: str) -> dict:
    """What the bench records about the peer: versions, weights and the programs that measure each row."""
    return {"llama_cpp_python": LLAMA_CPP_PYTHON, "llama_cpp_commit": LLAMA_CPP_COMMIT,
            "gguf": gguf_path(model, dtype).name, "flash_attn": True,
            "llamacpp_ar": "llama-cpp-python Llama.generate, greedy",
            "llamacpp_lookup": f"Llama.generate with LlamaPromptLookupDecoding(max_ngram_size={LOOKUP_NGRAM}, "
                               f"num_pred_tokens={LOOKUP_TOKENS})"}


# --- one turn ----------------------------------------------------------------------------------------------
_MODELS: dict[tuple, object] = {}


@atexit.register
def close_models() -> None:
    """Free the loaded models while the bindings still work (``Llama.__del__`` at interpreter exit fails noisily)."""
    while _MODELS:
        _MODELS.popitem()[1].close()


def _context_size(tokens: int) -> int:
    size = 1024
    while size < tokens:
        size *= 2
    return size


def _llama(path: Path, threads: int, lookup: bool, n_ctx: int):
    """A loaded ``Llama`` for these settings, kept for later turns (loading is not timed, but costs)."""
    key = (str(path), threads, lookup, n_ctx)
    if key not in _MODELS:
        llama_cpp = _import_llama_cpp()
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        draft = LlamaPromptLookupDecoding(max_ngram_size=LOOKUP_NGRAM, num_pred_tokens=LOOKUP_TOKENS) if lookup else None
        for old in [k for k in _MODELS if k[:3] == key[:3]]:  # one context per row: free the smaller one
            _MODELS.pop(old).close()
        # flash attention on: llama.cpp's own default on a CPU ("auto"), as llama-bench and llama-cli run it
        _MODELS[key] = llama_cpp.Llama(str(path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                                       n_gpu_layers=0, flash_attn=True, draft_model=draft, verbose=False)
    return _MODELS[key]


def check_temperature(method: str, temperature: float) -> None:
    if temperature > 0:
        raise ValueError(f"temperature={temperature:g}: {method} runs greedy only (temperature 0); "
                         "leave the llamacpp_* rows out of a sampled bench")


def peer_generate(engine, prompt_ids: list[int], method: str, max_new_tokens: int, temperature: float = 0.0,
                  seed: int = 0, threads: int | None = None) -> dict:
    """One greedy turn of ``method`` on ``prompt_ids``; the keys of :func:`specviz.bench.hf_baselines.hf_generate`,
    plus ``drafted`` and ``accepted`` (draft tokens sent to the target, and those it kept)."""
    import torch

    if method not in PEER_METHODS:
        raise ValueError(f"unknown llama.cpp peer {method!r}; known: {', '.join(PEER_METHODS)}")
    check_temperature(method, temperature)
    reason = unavailable_reason(engine.name, engine.dtype)
    if reason:
        raise PeerUnavailable(reason)
    lookup = method == "llamacpp_lookup"
    threads = threads or torch.get_num_threads()
    n_ctx = _context_size(len(prompt_ids) + max_new_tokens + LOOKUP_TOKENS + 1)
    llm = _llama(gguf_path(engine.name, engine.dtype), threads, lookup, n_ctx)
    eos = engine.eos_ids
    rounds: list[list[int]] = []  # per target call: [tokens sent, tokens it yielded]
    evaluate = llm.eval

    def counted(tokens):
        rounds.append([len(tokens), 0])
        return evaluate(tokens)

    llm.eval = counted  # generate() calls self.eval: one call per target forward (the prefill, then rounds)
    llm.reset()  # a full prefill every turn, as the engine and Hugging Face do
    ids: list[int] = []
    start = time.perf_counter()
    first = None
    generator = llm.generate(prompt_ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=False)
    try:
        for token in generator:
            if first is None:
                first = time.perf_counter()
            ids.append(int(token))
            rounds[-1][1] += 1
            if token in eos or len(ids) >= max_new_tokens:
                break
        end = time.perf_counter()
    finally:
        generator.close()
        del llm.eval
    first = first or end
    drafted = sum(sent - 1 for sent, _ in rounds[1:])
    accepted = sum(min(max(out - 1, 0), sent - 1) for sent, out in rounds[1:])
    return {"token_ids": ids, "text": engine.detokenize(ids), "new_tokens": len(ids),
            "decode_seconds": max(end - first, 1e-9), "prefill_seconds": first - start,
            "target_calls": len(rounds), "drafted": drafted if lookup else None, "accepted": accepted if lookup else None}


# --- make peers --------------------------------------------------------------------------------------------
def _run(command: list[str], log, **kwargs) -> None:
    log("$ " + " ".join(str(c) for c in command))
    subprocess.run([str(c) for c in command], check=True, **kwargs)


def fetch_source(log=print) -> Path:
    """The llama-cpp-python sdist (llama.cpp's whole tree in ``vendor/llama.cpp``), downloaded and unpacked once."""
    if (llama_cpp_dir() / "CMakeLists.txt").exists():
        return source_dir()
    src = peers_dir() / "src"
    tarball = src / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz"
    if not tarball.exists():
        staging = src / f".download-{os.getpid()}"
        _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
              f"llama-cpp-python=={LLAMA_CPP_PYTHON}", "-d", staging], log)
        os.replace(next(staging.glob("llama_cpp_python-*.tar.gz")), tarball)
        shutil.rmtree(staging, ignore_errors=True)
    staging = src / f".extract-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    log(f"unpacking {tarball.name}")
    with tarfile.open(tarball) as archive:
        archive.extractall(staging, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    shutil.rmtree(source_dir(), ignore_errors=True)
    os.replace(staging / source_dir().name, source_dir())
    shutil.rmtree(staging, ignore_errors=True)
    return source_dir()


def build(log=print) -> float:
    """llama.cpp's shared libraries and tools, built with cmake (incremental: a rerun finishes what is left and
    does nothing once all is built). Returns the seconds it took."""
    start = time.perf_counter()
    if not (build_dir() / "CMakeCache.txt").exists():
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        _run(["cmake", "-S", llama_cpp_dir(), "-B", build_dir(), *generator, "-DCMAKE_BUILD_TYPE=Release",
              "-DBUILD_SHARED_LIBS=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=ON",
              "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=OFF", "-DGGML_NATIVE=ON"], log)
    _run(["cmake", "--build", build_dir(), "--config", "Release", "-j", str(os.cpu_count() or 1),
          "--target", "llama", *TOOLS], log)
    return time.perf_counter() - start


def install_bindings(log=print) -> None:
    """llama-cpp-python's Python package without building llama.cpp again, and the converter's requirement."""
    spec = importlib.util.find_spec("llama_cpp")
    installed = None
    if spec is not None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            installed = version("llama_cpp_python")
        except PackageNotFoundError:
            pass
    if installed != LLAMA_CPP_PYTHON:
        env = {**os.environ, "CMAKE_ARGS": "-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF"}
        _run([sys.executable, "-m", "pip", "install", "-q", source_dir()], log, env=env)
    if importlib.util.find_spec("sentencepiece") is None:
        _run([sys.executable, "-m", "pip", "install", "-q", *CONVERTER_REQUIREMENTS], log)
    _import_llama_cpp.cache_clear()
    importlib.invalidate_caches()


def _staged_model(model: str) -> Path:
    """The engine's weights as the converter reads them: its tokenizer files, a config.json naming the
    architecture (the cached one, written by transformers from a GGUF, has none) and a model.safetensors
    holding the embedding (the cache keeps a tied embedding under ``lm_head.weight`` only, which llama.cpp
    can not load as ``token_embd``). Removed after conversion."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    source = model_source(model)
    staged = peers_dir() / "hf" / Path(model).name
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir(parents=True)
    config = json.loads((source / "config.json").read_text())
    config.setdefault("architectures", [f"{config.get('model_type', 'llama').capitalize()}ForCausalLM"])
    (staged / "config.json").write_text(json.dumps(config, indent=2))
    tensors = {}
    for part in sorted(source.glob("*.safetensors")):
        with safe_open(part, "pt") as weights:
            tensors.update({name: weights.get_tensor(name) for name in weights.keys()})
    if "model.embed_tokens.weight" not in tensors and "lm_head.weight" in tensors:
        tensors["model.embed_tokens.weight"] = tensors["lm_head.weight"]
    if config.get("tie_word_embeddings"):
        tensors.pop("lm_head.weight", None)  # llama.cpp ties the head to token_embd when there is no output
    save_file({k: v.contiguous() for k, v in tensors.items()}, staged / "model.safetensors")
    for item in source.iterdir():
        if item.is_file() and item.suffix != ".safetensors" and item.name != "config.json":
            shutil.copy2(item, staged / item.name)
    return staged


def convert(model: str = DEFAULT_MODEL, dtypes=tuple(GGUF_TYPES), log=print) -> list[Path]:
    """The engine's weights as GGUF files, one per dtype, with llama.cpp's own converter (skipped if there)."""
    if model == DEFAULT_MODEL:
        from engines.model.loading import load_model

        if not (model_source(model) / "config.json").exists():  # the first load dequantizes and caches them
            load_model(model, "float32", "cpu")
    done = []
    for dtype in dtypes:
        out = gguf_path(model, dtype)
        if not out.exists():
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(llama_cpp_dir() / "gguf-py"),
                                                                               os.environ.get("PYTHONPATH")]))}
            staged = _staged_model(model)
            with staged_file(out) as staging:  # the converter writes beside it: a GGUF is whole or absent
                _run([sys.executable, llama_cpp_dir() / "convert_hf_to_gguf.py", staged,
                      "--outtype", GGUF_TYPES[dtype], "--outfile", staging], log, env=env)
            shutil.rmtree(staged.parent, ignore_errors=True)
        done.append(out)
    return done


def setup(model: str = DEFAULT_MODEL, log=print) -> dict:
    """Everything the peer needs, each step skipped when its output is already there (``make peers``)."""
    missing = [tool for tool in ("cmake",) if shutil.which(tool) is None]
    if missing:
        raise PeerUnavailable(f"building llama.cpp needs {', '.join(missing)} on PATH")
    fetch_source(log)
    fresh = built_library_dir() is None or any(tool_path(t) is None for t in TOOLS)
    seconds = build(log)
    install_bindings(log)
    ggufs = convert(model, log=log)
    manifest = read_json_record(manifest_path(), "the llama.cpp peer's manifest") or {}
    if fresh or "build_seconds" not in manifest:  # the time of a build that built something, not of a no-op
        manifest["build_seconds"] = round(seconds, 1) if fresh else None
    manifest.update({"llama_cpp_python": LLAMA_CPP_PYTHON, "llama_cpp_commit": LLAMA_CPP_COMMIT,
                     "library": str(built_library_dir()), "tools": {t: str(tool_path(t)) for t in TOOLS},
                     "gguf": [str(p) for p in ggufs]})
    write_json_atomic(manifest_path(), manifest, indent=2)
    reason = unavailable_reason(model)
    if reason:
        raise PeerUnavailable(f"set-up finished but the peer does not run: {reason}")
    return manifest


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m specviz.bench.llamacpp_peer", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["setup", "status"])
    args = parser.parse_args(argv)
    if args.command == "status":
        reason = unavailable_reason()
        print(f"llama.cpp peer: {'ready' if reason is None else skip_note(reason)}")
        return 0 if reason is None else 1
    manifest = setup()
    print(f"llama.cpp peer ready: llama-cpp-python {LLAMA_CPP_PYTHON} (llama.cpp {LLAMA_CPP_COMMIT}); "
          f"weights in {peers_dir() / 'gguf'}; llama-bench at {manifest['tools']['llama-bench']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
