"""One recipe per drafter family: build students from the target, fit them, save weights + model card."""

from __future__ import annotations

import hashlib
import re
import time
from collections import Counter
from pathlib import Path
from typing import Callable

import torch

from engines.drafters.eagle3_head import Eagle3Head, copy_checked, default_feature_layers
from engines.drafters.heads import AdapterHead, EagleHead, ExitLayerHead, ExitNormHead
from engines.drafters.moa_head import MoAHead, moa_name
from engines.drafters.model_draft import tiny_model
from engines.drafters.registry import KINDS_BY_NAME
from engines.drafters.streaming import StreamingDraft
from engines.drafters.trained import (
    WEIGHTS,
    drafts_dir,
    exit_head_name,
    read_card,
    read_weights,
    save_trained,
    trained_state,
)
from engines.model.layers import LayerStack
from engines.model.machine import cpu_supports_bf16
from engines.training.data import draft_vocabulary, split_corpus, vocabulary_coverage
from engines.training.human_prompts import provenance
from engines.training.train import (
    AdapterStudent,
    EagleStudent,
    ExitStudent,
    FitResult,
    MoAStudent,
    StreamingStudent,
    Student,
    TinyStudent,
    TrainConfig,
    file_sha256,
    fit,
)

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "data" / "distill" / "corpus.jsonl"
DRAFT_VOCAB_SIZE = 8192
TTT_DEPTH = 4  # EAGLE-3's training-time test unrolls this deep, as the shipped heads were (trees now grow 3 deep)
LOSSES = {name: kind.loss for name, kind in KINDS_BY_NAME.items()}  # written into every card


def build_students(kind: str, stack: LayerStack, vocab_ids: torch.Tensor, exit_layers=(8,), head_kinds=("norm",),
                   tiny_layers: int = 4, tiny_trained: int = 2, streams: int = 2, stream_weight: float = 0.5,
                   dm_layer: int | None = 3, sv_layer: int | tuple[int, ...] = 15,
                   top_k: int = 20, tli: tuple[int, ...] = (0,), lsa: bool = True, share_lsa: bool = True,
                   ablation: bool = False, control: str | None = None,
                   seed: int = 0, feature_layers: tuple[int, ...] | None = None,
                   ttt_depth: int | None = None, hass_top_k: int = 0,
                   init_from: str | None = None) -> tuple[list[Student], dict]:
    """Students for ``kind`` (exit | eagle | eagle3 | tiny | ss | cats | moa) and the card fields each one adds.

    ``ss`` uses ``tiny_layers`` and puts its ``streams`` in the ``tiny_trained`` top layers. ``cats`` trains the
    draft adapter at ``dm_layer`` (``None``: keep the shipped one) and a shallow verifier at each ``sv_layer``,
    all from one teacher pass per batch."""
    if kind == "exit":
        students, extra = [], {}
        for layer in exit_layers:
            if not 1 <= layer < stack.n_layers:
                raise ValueError(f"exit layer must be in [1, {stack.n_layers - 1}], got {layer}")
            for head_kind in head_kinds:
                if head_kind not in ("norm", "layer"):
                    raise ValueError(f"head kind must be 'norm' or 'layer', got {head_kind!r}")
                head = ExitNormHead(stack, vocab_ids) if head_kind == "norm" else ExitLayerHead(stack, vocab_ids, layer)
                name = exit_head_name(layer, head_kind)
                students.append(ExitStudent(name, head.float(), layer))
                extra[name] = {"kind": f"exit_{head_kind}", "exit_layer": layer}
        return students, extra
    if kind == "eagle":
        return [EagleStudent("eagle", EagleHead(stack, vocab_ids).float(), stack)], {"eagle": {"kind": "eagle"}}
    if kind == "eagle3":
        return eagle3_students(stack, vocab_ids, feature_layers, ttt_depth, hass_top_k, init_from=init_from)
    if kind == "tiny":
        if not 1 <= tiny_trained <= tiny_layers < stack.n_layers:
            raise ValueError(f"tiny needs 1 <= trained ({tiny_trained}) <= layers ({tiny_layers}) < {stack.n_layers}")
        trained = list(range(tiny_layers - tiny_trained, tiny_layers))
        model = tiny_model(stack, tiny_layers).float()
        model.register_buffer("draft_vocab", vocab_ids, persistent=False)
        return [TinyStudent("tiny", model, trained, vocab_ids)], \
            {"tiny": {"kind": "tiny", "layers": tiny_layers, "trained_layers": trained,
                      "frozen_layers_from_target": list(range(tiny_layers - tiny_trained))}}
    if kind == "ss":
        draft = StreamingDraft(stack, vocab_ids, tiny_layers, tiny_trained, streams).float()
        trained = list(range(draft.stream_start, tiny_layers))
        return [StreamingStudent("ss", draft, trained, vocab_ids, stream_weight)], \
            {"ss": {"kind": "ss", "layers": tiny_layers, "stream_layers": tiny_trained, "streams": streams,
                    "stream_loss_weight": f"{stream_weight:g}^j",
                    "trained_layers": trained, "frozen_layers_from_target": list(range(draft.stream_start))}}
    if kind == "cats":
        sv_layers = (sv_layer,) if isinstance(sv_layer, int) else tuple(sv_layer)
        lowest = 0 if dm_layer is None else dm_layer
        for sv in sv_layers:
            if (dm_layer is not None and dm_layer < 1) or not lowest < sv < stack.n_layers:
                raise ValueError(f"cats needs 1 <= dm_layer ({dm_layer}) < sv_layer ({sv}) < {stack.n_layers}")
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        students, extra = [], {}
        roles = ([(dm_layer, "draft")] if dm_layer is not None else []) + [(sv, "shallow_verifier") for sv in sv_layers]
        for layer, role in roles:
            name = exit_head_name(layer, "cats")
            students.append(AdapterStudent(name, AdapterHead(stack, vocab_ids, layer).float(), layer, top_k))
            extra[name] = {"kind": "cats_adapter", "exit_layer": layer, "cats_role": role, "top_k": top_k}
        return students, extra
    if kind == "moa":
        students, extra = [], {}
        mixed = stack.device.type == "cuda" or cpu_supports_bf16()
        donor = None
        for depth in tli:
            head = MoAHead(stack, vocab_ids, depth, lsa).float()
            name = moa_name(depth, lsa)
            student = MoAStudent(name, head, stack, seed, lsa_from=donor if share_lsa else None, mixed_precision=mixed)
            donor = donor or (student if lsa else None)
            students.append(student)
            deviations = [MOA_DEVIATION] if depth else []
            if student.lsa_from is not None:
                deviations.append(f"LSA shared with {student.lsa_from.name}: trained there, read here detached "
                                  "(one LSA fits two CPU cores' budget, three do not)")
            extra[name] = {"kind": "moa", "tli": depth, "lsa": lsa, "deviations": deviations,
                           "mixed_precision": "bf16 autocast" if mixed else "fp32"}
        if ablation and lsa:
            head = MoAHead(stack, vocab_ids, 0, lsa=False).float()
            students.append(MoAStudent(moa_name(0, False), head, stack, seed, mixed_precision=mixed))
            extra[moa_name(0, False)] = {"kind": "moa", "tli": 0, "lsa": False, "deviations": [],
                                         "mixed_precision": "bf16 autocast" if mixed else "fp32"}
        if control:  # EAGLE on the same batches: τ against EAGLE at an equal training budget
            students.append(EagleStudent(control, EagleHead(stack, vocab_ids).float(), stack))
            extra[control] = {"kind": "eagle", "control_for": [s.name for s in students[:-1]]}
        return students, extra
    raise ValueError(f"drafter must be one of exit, eagle, eagle3, tiny, ss, cats, moa; got {kind!r}")


def eagle3_students(stack: LayerStack, vocab_ids: torch.Tensor, feature_layers: tuple[int, ...] | None = None,
                    ttt_depth: int | None = None, hass_top_k: int = 0,
                    name: str = "eagle3", init_from: str | None = None) -> tuple[list[Student], dict]:
    """EAGLE-3: three layers' features fused, trained by training-time test to ``ttt_depth`` (default
    ``TTT_DEPTH``), with HASS's top-K objective added where ``hass_top_k`` > 0. Its card says its
    architecture, so the old ``eagle`` head still loads. ``init_from`` names a shipped EAGLE head to start from
    (:meth:`Eagle3Head.start_from`; then the high feature layer defaults to the last)."""
    from engines.training.ttt import Eagle3Student

    depth = TTT_DEPTH if ttt_depth is None else ttt_depth
    started = init_card(init_from) if init_from is not None else {}
    if started.get("architecture") == "eagle3":  # go on training an EAGLE-3 head: its feature layers
        theirs = tuple(started["feature_layers"])
        if feature_layers is not None and tuple(sorted(feature_layers)) != theirs:
            raise ValueError(f"feature_layers must be {list(theirs)}, the layers {init_from!r} was trained on, "
                             f"to continue it; got {list(feature_layers)}")
        feature_layers = theirs
    elif init_from is not None and feature_layers is None:
        low, middle, _ = default_feature_layers(stack.n_layers)
        feature_layers = (low, middle, stack.n_layers)
    head = Eagle3Head(stack, vocab_ids, feature_layers).float()
    if init_from is not None:
        head.start_from(shipped_state(init_from, started))
    student = Eagle3Student(name, head, stack, depth, hass_top_k)
    loss = EAGLE3_LOSS.format(depth=depth) + (HASS_LOSS.format(k=hass_top_k) if hass_top_k else "")
    card = {"kind": "eagle", "architecture": "eagle3", "feature_layers": list(head.feature_layers),
            "ttt_depth": depth, "hass_top_k": hass_top_k, "training_loss": loss}
    if init_from is not None:
        card["initialised_from"] = init_from
    return [student], {name: card}


SHIPPED = "shipped"  # --init-from shipped: every drafter of the run goes on from the shipped one of its own name


def start_from_shipped(students: list[Student], extra: dict, init_from: str | None) -> None:
    """Warm-start every student but an EAGLE-3 head (its recipe starts it itself) from a shipped drafter's trained
    tensors: the one of its own name (``init_from == "shipped"``), or the one ``init_from`` names when the run has
    a single such student. Why: a CPU hour on prompts people write refines what a GPU run learned on many more
    positions, where starting over would throw that away. The draft vocabulary is the run's own: every family
    reads out through the target's (frozen) LM head, so its rows are not among the trained tensors.
    ValueError naming the option when the source is of another kind or shape, before any training."""
    if init_from is None:
        return
    starting = [s for s in students if extra[s.name].get("architecture") != "eagle3"]
    if starting and init_from != SHIPPED and len(starting) != 1:
        raise ValueError(f"init-from must be {SHIPPED!r} (each drafter from the shipped one of its name) when a run "
                         f"trains several drafters ({[s.name for s in starting]}), got {init_from!r}")
    for student in starting:
        source = student.name if init_from == SHIPPED else init_from
        theirs, ours = init_card(source), extra[student.name]
        if (theirs.get("kind"), theirs.get("architecture")) != (ours["kind"], ours.get("architecture")):
            raise ValueError(f"init-from: {source!r} is a drafter of kind {theirs.get('kind')!r}, {student.name!r} "
                             f"of kind {ours['kind']!r}")
        copy_checked(shipped_state(source, theirs), trained_state(student.module, ours), f"init-from {source!r}")
        ours["initialised_from"] = source


def init_card(name: str) -> dict:
    """The card of the drafter ``--init-from`` names (:func:`~engines.drafters.trained.read_card`), its error
    naming the option."""
    try:
        return read_card(name)
    except ValueError as error:
        raise ValueError(f"init-from: {error}") from None


def shipped_state(name: str, card: dict | None = None) -> dict[str, torch.Tensor]:
    """A shipped drafter's trained tensors in fp32, read as decoding reads them (:func:`read_weights`: the file
    must be the one its card describes); ``card`` when the caller has already read it."""
    path = drafts_dir() / name / WEIGHTS
    if not path.is_file():
        raise ValueError(f"init-from must name a drafter in {drafts_dir()}, got {name!r} (no {path})")
    weights = read_weights(name, card if card is not None else init_card(name))
    return {key: tensor.float() for key, tensor in weights.items()}


EAGLE3_LOSS = ("Σ_{{j=1..{depth}}} KL(target ‖ head at draft step j) on the draft vocabulary, the head unrolled on "
               "its own features (EAGLE-3's training-time test)")
HASS_LOSS = " + at each step −Σ_{{top-{k} of p}} p·log q (HASS)"


MOA_DEVIATION = ("TLI > 0 trains the reused target layers with teacher-forced keys/values for every earlier "
                 "position and the drafter's own only at the current one; at drafting time the earlier drafted "
                 "positions of a block are draft-local too (docs/moa.md, \"Training\")")



# Every shipped drafter, trained together on one teacher pass per batch (`specviz train all`): each family
# with the options its shipped weights use, and the learning rate the earlier GPU recipe gave it.
ALL_DRAFTERS: tuple[tuple[str, dict, float | None], ...] = (
    ("eagle", {}, None),
    ("eagle3", {}, None),
    ("moa", {"tli": (0, 1, 3), "ablation": True}, None),
    ("tiny", {}, 5e-4),
    ("ss", {}, 5e-4),
    ("exit", {"exit_layers": (3, 4, 5, 6, 8, 10, 15), "head_kinds": ("norm", "layer")}, None),
    ("cats", {"dm_layer": 3, "sv_layer": (5, 10, 15, 20)}, None),
)


def is_family_list(kind: str) -> bool:
    """``"all"``, a comma-separated list or one shipped drafter's name (``exit@8-layer``): families or drafters
    trained with their shipped options, not one family with the caller's."""
    return kind == "all" or "," in kind or shipped_drafter_options(kind) is not None


def shipped_drafter_options(name: str) -> tuple[str, dict] | None:
    """One shipped drafter's family and the options that build it alone, from its name (``exit@8-layer``,
    ``cats@3``: its card says whether it drafts or verifies); None for a family's name or an unknown one. Why:
    a short CPU run refines the few drafters the methods read (``exit@8-layer,tiny,cats@3``) on one teacher
    pass, where a family's shipped set (14 exit heads) would share the run's steps among all."""
    exit_head = re.fullmatch(r"exit@(\d+)-(norm|layer)", name)
    if exit_head:
        return "exit", {"exit_layers": (int(exit_head[1]),), "head_kinds": (exit_head[2],)}
    adapter = re.fullmatch(r"cats@(\d+)", name)
    if adapter:
        layer = int(adapter[1])
        role = read_card(name).get("cats_role")
        alone = {"dm_layer": layer, "sv_layer": ()} if role == "draft" else {"dm_layer": None, "sv_layer": layer}
        return "cats", alone
    return None


def drafter_families(kind: str) -> list[tuple[str, dict, float | None]]:
    """``"all"``, ``"eagle,tiny,ss"`` or ``"exit@8-layer,tiny,cats@3"`` → (family, options, learning rate) per entry:
    a family as :data:`ALL_DRAFTERS` sets it, a shipped drafter alone with its family's learning rate; families
    in :data:`ALL_DRAFTERS`' order, each drafter after its family's place."""
    known = [family for family, _, _ in ALL_DRAFTERS]
    wanted = known if kind == "all" else [k.strip() for k in kind.split(",") if k.strip()]
    named = {k: shipped_drafter_options(k) for k in wanted if k not in known}
    unknown = sorted(k for k, options in named.items() if options is None)
    if unknown or not wanted:
        raise ValueError(f"drafter must be all or a comma-separated list of {known} or shipped drafters' names "
                         f"(exit@8-layer, cats@3); got {kind!r}")
    rates = {family: lr for family, _, lr in ALL_DRAFTERS}
    entries = [entry for entry in ALL_DRAFTERS if entry[0] in wanted]
    entries += [(family, options, rates[family]) for family, options in named.values()]
    return sorted(entries, key=lambda entry: known.index(entry[0]))


def corpus_paths(corpus: str | Path | list) -> list[Path]:
    """One corpus path, or several (a comma-separated string or a list): files and folders of chunks."""
    if isinstance(corpus, (list, tuple)):
        return [Path(c) for c in corpus]
    return [Path(c.strip()) for c in str(corpus).split(",") if c.strip()]


def corpus_fingerprint(paths: list[Path]) -> str:
    """sha256 over every file the corpus reads (a chunk folder's finished chunks), for the model card."""
    from engines.training.corpus_chunks import finished_chunks

    digest = hashlib.sha256()
    for path in paths:
        for file in (finished_chunks(path) if path.is_dir() else [path] if path.exists() else []):
            digest.update(file_sha256(file).encode())
    return digest.hexdigest()


def train_drafters(kind: str, stack: LayerStack, target_name: str, corpus: str | Path | list = DEFAULT_CORPUS,
                   config: TrainConfig | None = None, command: str = "",
                   progress: Callable[[int, int, dict], None] | None = None, draft_vocab_size: int = DRAFT_VOCAB_SIZE,
                   init_from: str | None = None, **options) -> list[tuple[str, dict]]:
    """Train, save and describe the drafters of ``kind``: one family with ``options``, or ``"all"`` or a
    comma-separated list of families (``"eagle,tiny,ss"``), each as :data:`ALL_DRAFTERS` sets it, on one teacher
    pass per batch; returns (name, card) for each. ``init_from``: ``"shipped"`` starts each drafter from the
    shipped one of its name; a drafter's name starts the run's one drafter (or its EAGLE-3 head) from it."""
    config = config or TrainConfig()
    paths = corpus_paths(corpus)
    train, heldout = split_corpus(paths)
    eos = tuple(t for r in train for t in r["answer_ids"][-1:])  # answers end in EOS unless cut short
    vocab_ids = draft_vocabulary(train, draft_vocab_size, always=tuple(sorted(set(eos)))[:4])
    vocab_ids = vocab_ids.to(stack.device)
    families = drafter_families(kind) if is_family_list(kind) else [(kind, options, None)]
    students, extra = [], {}
    for family, family_options, lr in families:
        if family == "eagle3" and init_from is not None:  # EAGLE-3's recipe starts its head itself
            family_options = {**family_options, "init_from": "eagle3" if init_from == SHIPPED else init_from}
        built, described = build_students(family, stack, vocab_ids, **family_options)
        for student in built:
            student.lr = lr
        students += built
        extra.update(described)
    start_from_shipped(students, extra, init_from)
    for student in students:
        student.module.to(stack.device)
    measured = heldout_sample(heldout)
    result: FitResult = fit(stack, students, train, measured, vocab_ids, config, progress)
    fingerprint = corpus_fingerprint(paths)
    saved = []
    for student in students:
        agreement = result.heldout_agreement[student.name]
        described = dict(extra[student.name])
        loss = described.pop("training_loss", None) or LOSSES[described["kind"]]
        card = {
            "name": student.name, **described,
            "target": target_name, "target_layers": stack.n_layers, "hidden_size": stack.config.hidden_size,
            "vocab_size": stack.config.vocab_size, "draft_vocab_size": len(vocab_ids),
            "draft_vocab_coverage": round(vocabulary_coverage(heldout, vocab_ids), 4),
            "trained_parameters": sum(p.numel() for p in student.parameters()),
            "data": {"corpus": ",".join(_corpus_name(p) for p in paths), "corpus_sha256": fingerprint,
                     "train_records": len(train), "heldout_records": len(heldout),
                     "heldout_positions_measured": sum(len(r["answer_ids"]) for r in measured),
                     "train_answer_tokens": sum(len(r["answer_ids"]) for r in train),
                     "modes": sorted({r["mode"] for r in train}), "train_positions_seen": result.train_tokens,
                     "train_records_by_provenance": dict(Counter(provenance(r) for r in train))},
            "training": {"loss": loss, "steps": result.steps, "epochs": config.epochs,
                         "batch_tokens": config.batch_tokens, "lr": student.lr or config.lr, "seed": config.seed,
                         "max_seconds": config.max_seconds, "warmup_steps": config.warmup_steps,
                         "device": stack.device.type, "teacher_dtype": str(stack.dtype).removeprefix("torch."),
                         "float32_matmul_precision": torch.get_float32_matmul_precision(),
                         "seconds_all_students": round(result.seconds, 1),
                         "students_in_run": len(students), "loss_curve": result.curves[student.name],
                         "date": time.strftime("%Y-%m-%d")},
            "heldout_top1_agreement": _rounded(agreement[1]),
            "heldout_top4_agreement": _rounded(agreement[4]),
            # the same measure apart for answers to prompts people, the seeds and the target wrote (issue 39)
            "heldout_agreement_by_provenance": {
                group: {"top1": _rounded(row[1]), "top4": _rounded(row[4]), "positions": row["positions"]}
                for group, row in agreement.get("groups", {}).items()},
            "command": command,
        }
        student.module.eval()
        save_trained(student.name, student.module, card)
        saved.append((student.name, card))
    if config.checkpoint:  # every drafter is saved: a finished run leaves no checkpoint to resume
        Path(config.checkpoint).unlink(missing_ok=True)
    return saved


HELDOUT_POSITIONS = 50_000  # the card's agreement: about the seeds' whole held-out split (40,076 positions)


def heldout_sample(heldout: list[dict], positions: int = HELDOUT_POSITIONS) -> list[dict]:
    """Every k-th held-out record, k chosen so about ``positions`` answer tokens remain.

    The 6.7M-token corpus holds out 3,745 answers (0.3M positions): measuring every student on all of them
    took longer than a CPU run's training. A spread, not a prefix, since the split lists the seeds first."""
    total = sum(len(r["answer_ids"]) for r in heldout)
    stride = max(1, -(-total // positions))
    return heldout[::stride]


def _corpus_name(path: Path) -> str:
    """``distill/corpus.jsonl`` or ``distill/v2``: enough to tell the corpora apart in a card."""
    return "/".join(path.resolve().parts[-2:])


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)  # None: the corpus held no held-out record
