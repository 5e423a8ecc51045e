"""A drafter's head rows on the target head's GGUF blocks against plain rows, alternating in one process.

Every drafter reads out through the target's head restricted to its draft vocabulary (``SharedHead``: rows gathered
once). Those rows are the target's own, so the same rows of its Q8_0 blocks widen to them bit for bit, and the native
step can read 8.5 bits a weight instead of 16 (bf16) or 32 (fp32), as ``SharedHead`` has it do. This times a
drafted token both ways: each drafter's rows are served with their blocks or as a plain copy,
alternating run by run (the first of 5 rounds warms up), every output checked against ``ar``'s.

    HF_HUB_OFFLINE=1 python scripts/head_blocks_ab.py float32 eagle moa-tli0     # with SPECVIZ_NATIVE_ISA=avx2
    HF_HUB_OFFLINE=1 python scripts/head_blocks_ab.py bfloat16 eagle moa-tli0
"""

from __future__ import annotations

import argparse
import statistics

import torch

import engines.drafters.heads as heads
from engines import Engine
from engines.core.trace import DraftTree, StageSpan
from engines.model import gguf_blocks
from specviz.experiments.drafter_cards import drafter_run_options

PROMPT = "Explain in a few sentences why the sky looks blue during the day."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dtype", choices=["float32", "bfloat16"])
    parser.add_argument("drafters", nargs="+")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=48)
    args = parser.parse_args()
    shipped_rows = heads.SharedHead.rows
    on_blocks = {"now": True}

    def rows(self, dtype: torch.dtype) -> torch.Tensor:
        both = self.__dict__.setdefault("_ab_rows", {})
        if dtype not in both:
            base = shipped_rows(self, dtype)
            with_blocks, plain = base.clone(), base.clone()  # clones keep no blocks
            blocks = gguf_blocks.blocks_of(self._weight[0])
            if blocks is None:  # a head of its own (``tiny``'s untied copy): nothing to compare
                raise SystemExit("a drafter's head here is not the target's (no GGUF blocks): leave it out")
            gguf_blocks.keep_rows(with_blocks, blocks, self.vocab_ids.numpy())
            both[dtype] = {True: with_blocks, False: plain}
        return both[dtype][on_blocks["now"]]

    heads.SharedHead.rows = rows
    engine = Engine.load(dtype=args.dtype)
    ar = engine.run(PROMPT, "ar", max_new_tokens=args.tokens)
    per_token = {name: {True: [], False: []} for name in args.drafters}
    for round_ in range(args.rounds):
        for name in args.drafters:
            for blocks in ((True, False) if round_ % 2 else (False, True)):
                on_blocks["now"] = blocks
                method, options = drafter_run_options(name)
                run = engine.run(PROMPT, method, max_new_tokens=args.tokens, **options)
                assert run.token_ids == ar.token_ids, name
                spans = [e.end - e.start for e in run.events if isinstance(e, StageSpan) and e.stage == "draft"]
                sizes = [len(e.nodes) for e in run.events if isinstance(e, DraftTree)]
                if round_:  # the first round warms up; each run's first round feeds the drafter the prompt
                    per_token[name][blocks] += [s / n for s, n in list(zip(spans, sizes))[1:] if n]
    for name in args.drafters:
        on, off = (statistics.median(per_token[name][b]) * 1e3 for b in (True, False))
        print(f"{args.dtype} {name}: ms a drafted token, plain rows {off:.3f}, blocks {on:.3f}, "
              f"blocks/plain {on / off:.3f}", flush=True)


if __name__ == "__main__":
    main()
