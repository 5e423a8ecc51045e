"""Is the memory a long run leaves behind held by Python, or by the C allocator? Measured, not asserted.

Two `ar` runs of ``--tokens`` (decoded through end-of-text) after a short warm-up, the process's resident
memory after each (garbage collected), then after glibc's ``malloc_trim(0)``, which hands freed memory back to
the OS: if the second run adds nothing and the trim takes the growth back, the growth was freed memory the
allocator kept for reuse, not a leak. Linux with glibc only (the trim).

    python scripts/long_run_memory.py [--tokens 4000]
"""

from __future__ import annotations

import argparse
import ctypes

from engines import Engine
from specviz.soak.engine_runs import LONG_PROMPT, settled_sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4000)
    args = parser.parse_args()
    engine = Engine.load()
    engine.run("Hi!", "ar", max_new_tokens=16)
    print(f"after warm-up: {settled_sample().rss_mb:,.0f} MB")
    for index in (1, 2):
        engine.run(LONG_PROMPT, "ar", max_new_tokens=args.tokens, stop_at_eos=False)
        print(f"after {args.tokens:,}-token run {index}: {settled_sample().rss_mb:,.0f} MB", flush=True)
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    print(f"after malloc_trim(0): {settled_sample().rss_mb:,.0f} MB")


if __name__ == "__main__":
    main()
