"""What every method shares: a validated config dataclass and a ``decode`` generator of events."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Iterator

from engines.core.context import DecodeContext
from engines.core.options import require_int
from engines.core.trace import Event


@dataclass
class MethodConfig:
    def validate(self, n_layers: int) -> None:
        """Raise ``ValueError`` naming the parameter and its allowed range."""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def option_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]


AUTO = "auto"


def int_or_auto(value):
    """Options that take an integer or ``"auto"`` arrive as text from the CLI and the dashboard."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value.strip() if isinstance(value, str) else value


def auto_as_none(value):
    """The programs' spelling of an ``auto`` option: ``None`` (chosen as the run goes)."""
    return None if value == AUTO else value


def require_int_or_auto(name: str, value, low: int, high: int | None = None) -> None:
    if value == AUTO:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be 'auto' or an integer in [{low}, {high}], got {value!r}")
    require_int(name, value, low, high)


def decode_chain(engine, ctx: DecodeContext, drafter, gamma: int | str) -> Iterator[Event]:
    """The shared chain loop, with ``gamma="auto"`` sized each round from the engine's verify-cost curve."""
    from engines.programs.chain import speculative_decode

    if gamma == AUTO:
        yield from speculative_decode(ctx, drafter, None, engine.verify_cost().cost)
    else:
        yield from speculative_decode(ctx, drafter, gamma)


class Method:
    """A decoding method: ``name``, its ``Config`` class, whether it is lossless, and ``decode``."""

    name: str = ""
    Config: type[MethodConfig] = MethodConfig
    lossless: bool = True
    description: str = ""
    clock: str = "wall"  # "virtual" where the run's times are replayed, not measured on the wall clock

    @property
    def runs_in_processes(self) -> bool:
        """Whether other processes compute for this run while the driver waits (real lanes): then the run
        must not pause for its consumer (:mod:`engines.lanes.background`)."""
        return getattr(self.config, "mode", None) == "lanes"

    def lanes(self, ctx: DecodeContext) -> dict:
        """Which lane does what, for the run's start event (one lane unless the method runs several)."""
        return {"target": ctx.lane, "draft": ctx.lane}

    def __init__(self, config: MethodConfig, engine):
        self.config = config
        self.engine = engine

    def prepare(self) -> None:
        """Load what the method needs (drafts, heads) before the stream starts, so errors come early.

        A size left to ``auto`` needs this machine's verify-cost curve: measured here (once per machine
        and dtype, a few seconds) rather than in the middle of the first run's timing.
        """
        if AUTO in (getattr(self.config, "gamma", None), getattr(self.config, "total_tokens", None),
                    getattr(self.config, "depth", None)):
            self.engine.verify_cost()

    def check_sampling(self, greedy: bool) -> None:
        """Refuse sampling settings the method cannot honour (``ValueError``), before the stream starts."""

    def decode(self, ctx: DecodeContext) -> Iterator[Event]:
        raise NotImplementedError
