"""PPSD: pipeline-parallel early-exit speculative decoding (paper 003; docs/ppsd.md).

The target's N layers are cut into S = ⌈N/E⌉ stages, one per lane. Stage 1 (layers 1..E and the exit
head) drafts a token every tick while earlier drafts flow through the later stages, and the last stage
verifies each one as it arrives: an accepted token costs one tick (≈ E/N of a forward), a rejected one a
whole pipeline of S ticks, so the speedup is ρ* = N / (aE + (1 − a)·S·E) (Eq. 6), with a the per-token
acceptance probability (the paper's α). Each judged draft is committed as its own round of one drafted
token, so the run's α (accepted ÷ drafted) is also its per-position acceptance.

``mode``: ``lanes`` runs each stage in its own worker process on its own core (or CUDA device);
``serial`` runs the same schedule in this process, stage after stage (the reference the lanes must
match, and the "before" picture); ``virtual`` runs it serially on one thread and replays its time on one
virtual clock per lane (:mod:`engines.lanes.serial`) — for more stages than the machine has lanes.
The schedule itself is in :mod:`engines.programs.pipeline`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from engines.core.context import DecodeContext
from engines.core.trace import Event
from engines.drafters.trained import available, exit_head_name
from engines.lanes import Lane, LaneClocks, default_lanes, pinned, run_serial
from engines.methods.base import Method, MethodConfig, require_int
from engines.programs.pipeline import StagePiece, first_stage, later_stage, stage_bounds, stage_count

HEADS = ("layer", "norm", "none")
MODES = ("lanes", "serial", "virtual")


@dataclass
class PpsdConfig(MethodConfig):
    exit_layer: int = 15
    head: str = "layer"
    mode: str = "lanes"
    stages: int | None = None  # optional check: the stage count ⌈N/E⌉ the caller expects

    def validate(self, n_layers: int) -> None:
        require_int("exit_layer", self.exit_layer, 1, n_layers - 1)
        if self.head not in HEADS:
            raise ValueError(f"head must be one of {HEADS} (none = the model's own norm and LM head, untrained), "
                             f"got {self.head!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.stages is not None:
            require_int("stages", self.stages, 2, n_layers)
            made = stage_count(n_layers, self.exit_layer)
            if made != self.stages:
                fits = sorted({e for e in range(1, n_layers) if stage_count(n_layers, e) == self.stages})
                hint = f"exit_layer in {fits[0]}..{fits[-1]}" if fits else "no exit layer"
                raise ValueError(f"stages={self.stages} cannot be made from exit_layer={self.exit_layer} on "
                                 f"{n_layers} layers (⌈{n_layers}/{self.exit_layer}⌉ = {made}); "
                                 f"{hint} gives {self.stages} stages")


class Ppsd(Method):
    name = "ppsd"
    Config = PpsdConfig
    description = "pipeline-parallel early exit: stage 1 drafts while later stages verify (PPSD)"

    @property
    def n_stages(self) -> int:
        return stage_count(self.engine.target.n_layers, self.config.exit_layer)

    @property
    def clock(self) -> str:
        return "virtual" if self.config.mode == "virtual" else "wall"

    def lanes(self, ctx: DecodeContext) -> dict:
        names = self._lane_names(ctx)
        return {f"stage {i + 1} (layers {a + 1}..{b})": names[i]
                for i, (a, b) in enumerate(stage_bounds(self.engine.target.n_layers, self.config.exit_layer))}

    def _lane_names(self, ctx: DecodeContext | None) -> list[str]:
        if self.config.mode == "lanes" and not self.engine.lane_spec.spawn:  # workers joined by hand, anywhere
            return ["cpu0"] + [f"remote{rank}" for rank in range(1, self.n_stages)]
        if self.config.mode == "lanes":
            return list(default_lanes(self.n_stages, self.engine.device))
        return [f"{ctx.lane}/stage{i + 1}" for i in range(self.n_stages)]

    def prepare(self) -> None:
        if self.config.head != "none":
            name = exit_head_name(self.config.exit_layer, self.config.head)
            if name not in available():
                shipped = sorted({n for n in available() if n.startswith("exit@") and n.endswith(self.config.head)})
                raise ValueError(f"no {self.config.head} head at exit_layer={self.config.exit_layer}; shipped: "
                                 f"{', '.join(shipped)} (train one with `specviz train exit`)")
            self.engine.trained_drafter(name)
        if self.config.mode == "lanes":
            if self.engine.memory_budget is not None:
                raise ValueError("mode='lanes' runs stages in worker processes that hold their own weights; "
                                 "it cannot honour a memory budget (use mode='serial')")
            if self.engine.lane_spec.spawn:
                default_lanes(self.n_stages, self.engine.device)  # ValueError naming virtual mode if too few
            self.engine.lane_group(self._lane_names(None))  # workers start (once) before the run's clock does

    def decode(self, ctx: DecodeContext) -> Iterator[Event]:
        engine, config = self.engine, self.config
        head = None if config.head == "none" else engine.trained_drafter(exit_head_name(config.exit_layer, config.head))
        bounds = stage_bounds(ctx.target.n_layers, config.exit_layer)
        names = self._lane_names(ctx)
        first = StagePiece(ctx.target, *bounds[0], ctx.capacity, head)
        draft_sampler = ctx.sampler.for_lane(1)
        if config.mode == "lanes":
            group = engine.lane_group(names)
            settings = {"source": str(engine.lanes_source()), "dtype": engine.dtype, "n_stages": len(bounds),
                        "capacity": ctx.capacity, "temperature": ctx.sampler.temperature, "top_p": ctx.sampler.top_p,
                        "seed": ctx.sampler.seed, "lanes": names}
            configure = {rank: {"program": "engines.programs.pipeline:stage_worker",
                                "args": {**settings, "start": a, "stop": b, "rank": rank}}
                         for rank, (a, b) in enumerate(bounds) if rank > 0}
            lane = Lane(0, names[0], ctx.trace.now)
            with pinned(names[0]):
                yield from group.run(first_stage(lane, ctx, first, len(bounds), draft_sampler, names,
                                                 engine.context_window), ctx.trace, configure)
            return
        clocks = LaneClocks(len(bounds), ctx.trace.wall, engine.message_cost()) if config.mode == "virtual" else None

        def now_of(rank: int):
            return (lambda: clocks.now(rank)) if clocks else ctx.trace.now

        programs = {0: first_stage(Lane(0, names[0], now_of(0)), ctx, first, len(bounds), draft_sampler, names,
                                   engine.context_window)}
        for rank, (a, b) in enumerate(bounds[1:], start=1):
            piece = StagePiece(ctx.target, a, b, ctx.capacity)
            programs[rank] = later_stage(Lane(rank, names[rank], now_of(rank)), piece, rank, len(bounds),
                                         ctx.sampler.for_lane(0), names)
        if clocks is None:
            yield from run_serial(programs)
            return
        ctx.trace.use_clock(clocks.now)  # until the run ends: its end time is the last lane's virtual time
        with pinned("cpu0"):  # a virtual lane is one core: one thread
            yield from run_serial(programs, clocks)
