"""Typed events every run emits, so notebooks, the CLI and the dashboard all read the same stream.

Events are plain dataclasses with a ``kind`` tag; they serialize to JSON lines and replay from them.
Times are seconds since the run started, on one clock (``time.perf_counter``).
Detailed events (draft trees, verifications, stage spans) can be switched off for pure speed runs;
commits and the run's start and end are always emitted because the text and the stats come from them.

Schema versions: 1 — chains only; 2 — draft trees (nodes carry score, sibling rank and whether they were
sent to verification; verifications carry each tried node's p, q and draw; commits their tree's depth).
3 — lanes and pipelines (stage computes, activations sent, checks, flushes, KV truncations; the run's
clock, ``wall`` or ``virtual``). 4 — speculation on the verdict (Mirror-SD, SSD): early-exit messages, branch
rollouts, speculation-cache builds and lookups, reuse decisions, backups, SAGUARO reweighting, lane messages.
5 — Mixture of Attentions: LSA passes, draft-step time splits (SA / CA / TLI / head), messages over a simulated
network link (bytes, simulated seconds, resends); the ``wall+link`` clock. 6 — suffix drafting: where each
model-free draft token was matched (prompt, answer so far or an earlier answer) and how long the match was.
Fields added after version 1 have defaults, so older traces still load and replay.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable, ClassVar, Iterable, Iterator

from engines.storage import write_lines_atomic

SCHEMA_VERSION = 6


@dataclass
class Event:
    kind: ClassVar[str] = "event"
    t: float

    def to_dict(self) -> dict:
        return {"kind": self.kind, **asdict(self)}


@dataclass
class RunStart(Event):
    kind: ClassVar[str] = "run_start"
    method: str
    config: dict
    model: str
    device: str
    dtype: str
    lanes: dict
    lossless: bool
    prompt_tokens: int
    max_new_tokens: int
    temperature: float
    schema: int = SCHEMA_VERSION
    memory: dict | None = None  # the memory budget the run honoured (engines.memory_budget.weight_stream); None = none
    clock: str = "wall"  # "virtual": times replayed from measured per-operation costs (engines.lanes.serial)
    threads: int | None = None  # torch threads of the driving process (1 = one lane's speed, a virtual run's baseline)


@dataclass
class Prefill(Event):
    kind: ClassVar[str] = "prefill"
    n_tokens: int
    seconds: float


@dataclass
class DraftTree(Event):
    """Nodes are dicts ``{id, parent, token, logprob, depth}``; parent −1 hangs off the last committed token.
    Trees add ``score`` (cumulative log-prob), ``rank`` (among siblings), ``sent`` (verified or pruned)
    and ``source`` (draft | correction)."""

    kind: ClassVar[str] = "draft_tree"
    round: int
    drafter: str
    nodes: list


@dataclass
class Verification(Event):
    kind: ClassVar[str] = "verification"
    round: int
    accepted: list  # node ids on the accepted path, root first
    rejected: list  # node ids thrown away: every verified node off the accepted path, tried or never reached
    next_token: int
    next_fate: str  # "bonus" or "correction"
    # trees: per tried node {"id", "outcome": accepted | rejected, "p": p(x), "q": q(x), "draw": u} (p, q, u when sampling)
    nodes: list = field(default_factory=list)
    # where the target refused a draft token: its top tokens' p beside the draft's q (engines.core.rejection_view)
    rejection: dict | None = None


@dataclass
class StageSpan(Event):
    """One piece of work on one lane: what ran where and when (for Gantt charts)."""

    kind: ClassVar[str] = "stage_span"
    lane: str
    stage: str
    round: int
    start: float
    end: float


@dataclass
class ShallowVerification(Event):
    """CATS's shallow verifier: its own token at each draft position and where it disagrees (the set R)."""

    kind: ClassVar[str] = "sv_pass"
    round: int
    drafts: list  # d_i
    verifier: list  # ĉ_i, the shallow verifier's argmax at the same positions
    mismatches: list  # positions i with ĉ_i ≠ d_i: each becomes a correction sibling of d_i


@dataclass
class KvRollback(Event):
    """After a tree verification: cache rows kept (the accepted path) and dropped."""

    kind: ClassVar[str] = "kv_rollback"
    round: int
    kept: int
    dropped: int


@dataclass
class Commit(Event):
    """Tokens that became final this round; fates are target | accepted | correction | bonus."""

    kind: ClassVar[str] = "commit"
    round: int
    tokens: list
    fates: list
    pieces: list  # the text each token adds
    drafted: int
    accepted: int
    draft_depth: int | None = None  # deepest draft position offered; None = a chain (depth = drafted)


@dataclass
class RunEnd(Event):
    kind: ClassVar[str] = "run_end"
    token_ids: list
    text: str
    stats: dict
    stop_reason: str  # "eos" or "max_new_tokens"


@dataclass
class StreamChunk(Event):
    """Memory-budget runs (:mod:`engines.memory_budget.weight_stream`): one load of a chunk of streamed decoder layers.

    ``bytes`` were read from the layer files (flash); ``load_*`` is the reader thread's read, ``compute_*``
    the first and last forward through the chunk before it was dropped (``None`` if no forward used it).
    ``resident_bytes``: weights in memory (always-resident parts, resident layers, loaded chunks) right
    after this load — the run's peak is the largest of these.
    """

    kind: ClassVar[str] = "stream_chunk"
    layers: list
    bytes: int
    load_start: float
    load_end: float
    compute_start: float | None = None
    compute_end: float | None = None
    resident_bytes: int = 0


@dataclass
class StageCompute(Event):
    """A pipeline stage ran its layers on ``rows`` positions from ``position`` on (PPSD). ``token`` is the
    token those positions end in and ``draft`` whether it was still unverified; ``epoch`` counts flushes."""

    kind: ClassVar[str] = "stage_compute"
    lane: str
    stage: int
    tick: int
    position: int
    rows: int
    token: int
    draft: bool
    start: float
    end: float
    epoch: int = 0


@dataclass
class ActivationSend(Event):
    """Hidden states (and, when sampling, a draft distribution) sent from one lane to the next."""

    kind: ClassVar[str] = "activation_send"
    lane: str
    to_lane: str
    tick: int
    position: int
    bytes: int


@dataclass
class Check(Event):
    """The last stage judged the draft token at ``position``: ``target`` is the token committed there."""

    kind: ClassVar[str] = "check"
    tick: int
    position: int
    draft: int
    target: int
    accepted: bool


@dataclass
class Flush(Event):
    """A stage dropped work that a rejection made stale: ``discarded`` positions from ``position`` on."""

    kind: ClassVar[str] = "flush"
    lane: str
    tick: int
    position: int
    discarded: int


@dataclass
class KvTruncate(Event):
    """A lane cut its KV cache back to ``position`` entries, dropping ``dropped`` stale ones."""

    kind: ClassVar[str] = "kv_truncate"
    lane: str
    position: int
    dropped: int


@dataclass
class LaneMessage(Event):
    """A message between lanes (``t`` = sent, on the sender's clock): what it carried and its bytes on the wire."""

    kind: ClassVar[str] = "lane_message"
    lane: str
    to_lane: str
    what: str  # start | ee | verdict | window | end
    round: int
    bytes: int


@dataclass
class EeMessage(Event):
    """Mirror-SD's early-exit message: the top-κ of the proxy p^(l_e) at each of the γ+1 verified positions."""

    kind: ClassVar[str] = "ee_message"
    round: int
    exit_layer: int
    ids: list  # [γ+1][κ] token ids, best first
    logprobs: list  # [γ+1][κ] log p̃
    bytes: int


@dataclass
class BranchRollout(Event):
    """Every branch of a round decoded together as one tree on the draft lane: roots (k, token) and the
    window each produced; ``steps`` draft forwards of ``rows`` tree rows each."""

    kind: ClassVar[str] = "branch_rollout"
    lane: str
    round: int
    roots: list  # [[k, token], ...]
    windows: list  # the draft tokens rolled out after each root
    steps: int
    rows: list  # tree rows fed per step
    start: float
    end: float


@dataclass
class CacheBuild(Event):
    """The speculation cache for the next round: entries ``[k, token, rank, q_draft(token)]`` and the fan-out."""

    kind: ClassVar[str] = "cache_build"
    round: int
    entries: list
    fanout: list  # F_k per accepted length k = 0..K
    seconds: float


@dataclass
class CacheLookup(Event):
    """The realized verdict (k accepted, token t*) looked up in the cache; ``rank`` of t* among the
    candidates it was chosen from (the draft's z_k for SSD, the early exit's top-κ for Mirror), −1 = not ranked."""

    kind: ClassVar[str] = "cache_lookup"
    round: int
    accepted: int
    token: int
    hit: bool
    rank: int


@dataclass
class ReuseDecision(Event):
    """Mirror-SD's next-window selection: ``root_hit`` (k = 0), ``depth_hit`` (k ≥ 1) or ``fallback``."""

    kind: ClassVar[str] = "reuse_decision"
    round: int
    outcome: str
    accepted: int
    token: int
    rank: int  # of the correction in the early-exit top-κ at position k; −1 = outside it


@dataclass
class Backup(Event):
    """A window made on the critical path after a cache miss: ``jit`` (the draft decodes), ``fast`` (n-gram
    lookup, point masses), ``suffix`` (the suffix index, point masses), ``fallback`` (Mirror's fresh rollout) or ``initial`` (the first window)."""

    kind: ClassVar[str] = "backup"
    lane: str
    round: int
    backup: str
    tokens: int
    start: float
    end: float


@dataclass
class FallbackRollout(Backup):
    """Mirror-SD's fallback: no branch matched the verdict, so a fresh rollout ran on the critical path."""

    kind: ClassVar[str] = "fallback_rollout"


@dataclass
class Saguaro(Event):
    """SAGUARO sampling for one window: down-weight C on each position's top-F, and the draft probability
    mass moved off those tokens (which the residual then pushes back onto them)."""

    kind: ClassVar[str] = "saguaro"
    round: int
    c: float
    mass_moved: list  # per window position


@dataclass
class Lsa(Event):
    """MoA's Layer Self-Attention over every layer's keys/values of the newly verified tokens (the server's
    side of a cycle): it turns them into the drafter's cross-attention memory."""

    kind: ClassVar[str] = "lsa"
    round: int
    n_tokens: int
    seconds: float


@dataclass
class DraftStep(Event):
    """Where one round's drafting time went in a MoA drafter: SA, CA, the target's last TLI layers, the head."""

    kind: ClassVar[str] = "draft_step"
    round: int
    sa: float
    ca: float
    tli: float
    head: float
    steps: int  # drafter calls this round (root + one per tree level)


@dataclass
class LinkSend(Event):
    """One message over the simulated client–server link: its real serialized size and the simulated
    one-way seconds it took (delay, transfer, resends after losses). Always emitted: the run's
    ``wall+link`` clock adds these seconds to the measured compute."""

    kind: ClassVar[str] = "link_send"
    round: int
    direction: str  # "up": client → server (the draft tree); "down": server → client (verdict + activations)
    bytes: int
    seconds: float
    attempts: int
    packets: int
    start: float = 0.0  # on the wall+link clock
    content: str = ""  # what the message carries, for the message-size view


@dataclass
class SuffixMatch(Event):
    """Where the suffix drafter found each node it proposed this round (:mod:`engines.drafters.suffix`).
    ``nodes``: ``{id, origin, position, document, length, count, total}`` per node, ``id`` in the round's
    DraftTree numbering; ``origin`` prompt | answer (so far) | corpus (an earlier answer, ``document`` its
    index), ``position`` where the copied token sat there, ``length`` the n-gram matched before it, ``count``
    of ``total`` times that n-gram went on with this token."""

    kind: ClassVar[str] = "suffix_match"
    round: int
    nodes: list


EVENT_TYPES = {cls.kind: cls for cls in (RunStart, Prefill, DraftTree, Verification, StageSpan, Commit, RunEnd,
                                         ShallowVerification, KvRollback, StageCompute, ActivationSend, Check,
                                         Flush, KvTruncate, LaneMessage, EeMessage, BranchRollout, CacheBuild,
                                         CacheLookup, ReuseDecision, Backup, FallbackRollout, Saguaro, Lsa, DraftStep,
                                         SuffixMatch)}
EVENT_TYPES[StreamChunk.kind] = StreamChunk  # memory-budget runs; always emitted (stats need it)
EVENT_TYPES[LinkSend.kind] = LinkSend  # client–server runs; always emitted (stats need it)
DETAILED_KINDS = {DraftTree.kind, Verification.kind, StageSpan.kind, ShallowVerification.kind, KvRollback.kind,
                  StageCompute.kind, ActivationSend.kind, Check.kind, Flush.kind, KvTruncate.kind, LaneMessage.kind,
                  EeMessage.kind, BranchRollout.kind, CacheBuild.kind, ReuseDecision.kind, Saguaro.kind, Lsa.kind,
                  DraftStep.kind, SuffixMatch.kind}


def event_from_dict(record: dict) -> Event:
    """Rebuild an event; fields newer than the record (they all have defaults) keep their defaults."""
    cls = EVENT_TYPES[record["kind"]]
    return cls(**{f.name: record[f.name] for f in fields(cls) if f.name in record})


def write_jsonl(events: Iterable[Event], path: str | Path) -> None:
    """One event a line, the file whole or not at all (:mod:`engines.storage`): a run killed while its trace is
    written leaves the previous trace, never one cut at an event."""
    write_lines_atomic(path, (json.dumps(event.to_dict()) for event in events))


def read_jsonl(path: str | Path) -> list[Event]:
    """The events of a trace; a line that is not a whole event is a ``ValueError`` naming the file and the line
    (a trace is a result the user chose to keep, so it is refused, not set aside)."""
    events = []
    with open(path, encoding="utf-8") as source:
        for number, line in enumerate(source, 1):
            if not line.strip():
                continue
            try:
                events.append(event_from_dict(json.loads(line)))
            except (ValueError, KeyError, TypeError) as error:
                raise ValueError(f"trace {path}, line {number}: not a whole event ({error!r}); the file was cut "
                                 "short or edited — record the run again") from None
    return events


@dataclass
class Trace:
    """Collects a run's events, timestamps them and hands each to live subscribers as it happens."""

    detailed: bool = True
    events: list = field(default_factory=list)
    subscribers: list = field(default_factory=list)
    _t0: float = field(default_factory=time.perf_counter)
    _held: float = 0.0  # seconds the consumer held yielded events, excluded from the clock
    _held_since: float | None = None
    _clock: Callable[[], float] | None = None  # virtual mode's clock, while a run replays on one
    device_sync: Callable[[], None] | None = None  # waits for queued device work (CUDA), where there is any

    def now(self) -> float:
        """Seconds of the engine's own work since the trace began (:meth:`wall`), or the virtual clock of
        a run that replays its schedule on one. A detailed trace first waits for the device, so a span's
        ends are when its kernels finished, not when they were queued."""
        if self.detailed:
            self.sync()
        return self._clock() if self._clock is not None else self.wall()

    def sync(self) -> None:
        """Wait for the device's queued work (nothing to wait for on a CPU)."""
        if self.device_sync is not None:
            self.device_sync()

    def wall(self) -> float:
        """Wall-clock seconds since the trace began, standing still while the consumer holds an event (a
        dashboard rendering, a notebook printing), so that never counts as decoding."""
        if self._held_since is not None:
            return self._held_since - self._t0 - self._held
        return time.perf_counter() - self._t0 - self._held

    def from_clock(self, perf_counter: float) -> float:
        """A ``time.perf_counter()`` reading (this process, or a lane's on this host) on this trace's clock."""
        return perf_counter - self._t0 - self._held

    def use_clock(self, now: Callable[[], float] | None) -> None:
        """Read time from ``now`` instead of the wall clock (a virtual-mode run, until its end); ``None``
        returns to the wall clock."""
        self._clock = now

    def hold(self) -> None:
        """The engine has handed an event to its consumer: stop the clock."""
        self._held_since = time.perf_counter()

    def release(self) -> None:
        """The consumer asked for the next event: the clock runs again."""
        if self._held_since is not None:
            self._held += time.perf_counter() - self._held_since
            self._held_since = None

    def subscribe(self, callback: Callable[[Event], None]) -> None:
        self.subscribers.append(callback)

    def emit(self, event: Event) -> Event:
        self.events.append(event)
        for callback in self.subscribers:
            callback(event)
        return event

    def replay(self) -> Iterator[Event]:
        yield from self.events
