"""``specviz bench``'s results written out: the markdown report (:func:`to_markdown`, one table per concern), the
JSON and markdown files (:func:`write_results`), and speedups pooled over several runs (:func:`pooled_speedups`).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from engines.storage import write_json_atomic, write_text_atomic

from .runner import ONE_LANE_AR
from .tallies import position_acceptance


def _fmt(value, pattern="{:.2f}"):
    return "—" if value is None else pattern.format(value)


def to_markdown(results: dict) -> str:
    setup, methods = results["setup"], results["methods"]
    numerics = {True: ", row-invariant", False: ", PyTorch's attention"}.get(setup.get("row_invariant"), "")
    if "cudnn_attention" in setup:  # CUDA runs: whether cuDNN's attention kernels were allowed (cuda_attention.py)
        numerics += f", cuDNN attention {'on' if setup['cudnn_attention'] else 'off'}"
    lines = [f"# specviz bench — {setup['model']} ({setup['dtype']}, {setup['device']}, {setup['threads']} threads"
             f"{numerics})",
             "", ("" if setup.get("complete", True) else "**Partial: the run stopped early.** ") +
             f"{setup['n_prompts']} prompts from `{setup['prompts']}`, {setup['max_new_tokens']} new tokens, "
             f"temperature {setup['temperature']}. Speedup is against `ar` measured in the same run; τ counts the "
             "bonus/correction token; α = accepted ÷ drafted.", "",
             *([f"Machine: {setup['machine']}. Step: {setup['step']}"
                + (" (the AVX2 build, forced with --isa avx2)" if setup.get("native_isa") == "avx2" else "")
                + ("; its bf16 products and attention scores on AMX tiles." if setup.get("amx") else "."), ""]
               if setup.get("step") else []),
             "## Overall", "", "| method | tokens/s | speedup | τ | α | draft cost c | output = ar |",
             "|---|---|---|---|---|---|---|"]
    virtual = {label for label, m in methods.items() if m["overall"].get("clock") == "virtual"}
    for label, by_category in methods.items():
        o = by_category["overall"]
        if label not in virtual:
            lines.append(f"| {label} | {o['tokens_per_s']:.1f} | {_fmt(o['speedup'])}× | {_fmt(o['tau'])} | "
                         f"{_fmt(o['alpha'])} | {_fmt(o.get('draft_cost'))} | {_fmt(o['equals_ar'], '{:.0%}')} |")
    lines += peer_notes(setup, methods)
    if virtual:
        lines += ["", "## clock=virtual", "", "Computed for real, one thread, stage after stage; the times are "
                  "replayed on one clock per lane as if each lane had its own core (`engines/lanes/serial.py`). "
                  f"Speedup is against `{ONE_LANE_AR}`, one lane's real speed — never against the wall-clock rows.",
                  "", "| method (clock=virtual) | tokens/s | speedup | α | output = ar |", "|---|---|---|---|---|"]
        for label in virtual:
            o = methods[label]["overall"]
            lines.append(f"| {label} | {o['tokens_per_s']:.1f} | {_fmt(o['speedup'])}× | {_fmt(o['alpha'])} | "
                         f"{_fmt(o['equals_ar'], '{:.0%}')} |")
    ceiling = setup.get("ceiling")
    if ceiling and "ar" in methods:
        lines += ["", f"Ceiling on this machine: {ceiling['tokens_per_s']:.0f} tokens/s (every weight read once per "
                  f"token: {ceiling['weight_bytes'] / 1e6:.0f} MB at the {ceiling['bandwidth_gb_s']:.0f} GB/s of a "
                  f"large read measured here); `ar` runs at "
                  f"{methods['ar']['overall']['tokens_per_s'] / ceiling['tokens_per_s']:.0%} of it."]
    categories = [c for c in next(iter(methods.values())) if c != "overall"]
    lines += ["", "## Per category: speedup (τ, α)", "",
              "| method | " + " | ".join(categories) + " |", "|---" * (len(categories) + 1) + "|"]
    for label, by_category in methods.items():
        cells = [f"{_fmt(by_category[c]['speedup'])}× ({_fmt(by_category[c]['tau'])}, {_fmt(by_category[c]['alpha'])})"
                 for c in categories]
        lines.append(f"| {label}{' · clock=virtual' if label in virtual else ''} | " + " | ".join(cells) + " |")
    return "\n".join(lines + position_table(methods) + pipeline_table(methods) + verdict_table(methods) +
                     link_table(methods) + memory_table(setup, methods)) + "\n"


def peer_notes(setup: dict, methods: dict) -> list[str]:
    """Lines under the overall table: rows skipped here and why, and what measured llama.cpp's rows."""
    lines = [f"- `{label}`: {note}" for label, note in (setup.get("skipped") or {}).items()]
    peer = setup.get("peer")
    if peer and any(m["overall"].get("peer") for m in methods.values()):
        lines.append(f"- llama.cpp rows: llama-cpp-python {peer['llama_cpp_python']} (llama.cpp "
                     f"{peer['llama_cpp_commit']}) in this process on `{peer['gguf']}`, converted from the engine's "
                     f"weights; the same prompt token ids, threads and eos; `llamacpp_ar`: {peer['llamacpp_ar']}; "
                     f"`llamacpp_lookup`: {peer['llamacpp_lookup']}. Their *output = ar* is for information: "
                     "other kernels round differently, so a greedy answer may part from `ar`'s at a near-tie.")
    return [""] + lines if lines else []


def link_table(methods: dict) -> list[str]:
    """Client–server rows (clock wall+link): measured compute plus the simulated network's seconds."""
    rows = {label: m["overall"]["link"] for label, m in methods.items() if "link" in m["overall"]}
    if not rows:
        return []
    lines = ["", "## Client–server over a simulated link", "",
             "tokens/s on the `wall+link` clock: compute measured on this machine, link seconds simulated and added "
             "(`engines/programs/client_server.py`). Server calls = prefill + one verification per cycle.", "",
             "| method | tokens/s | τ | server calls / answer | KB / answer | link share of time | resends |",
             "|---|---|---|---|---|---|---|"]
    for label, link in rows.items():
        o = methods[label]["overall"]
        lines.append(f"| {label} | {o['tokens_per_s']:.1f} | {_fmt(o['tau'])} | {link['server_calls_per_answer']:.1f} | "
                     f"{link['bytes_per_answer'] / 1e3:.1f} | {link['link_share']:.0%} | {link['resends']} |")
    return lines


def pipeline_table(methods: dict) -> list[str]:
    """Where pipelined runs spent their time, and Eq. 6 at their measured per-position acceptance and tick
    cost."""
    rows = {label: m["overall"]["pipeline"] for label, m in methods.items() if "pipeline" in m["overall"]}
    if not rows:
        return []
    lines = ["", "## Pipelines: where the time went (overall)", "",
             "Ticks per token: stage-1 steps per committed token (1 if every draft is accepted, P if none is). "
             "Stage ms: median compute per stage; idle: each lane's idle share of the decode time; message: median "
             "wait from one stage's end to the next one's start on the same tick. Per-position acceptance a: "
             "accepted ÷ drafts the last stage judged. Eq. 6 is 1 / (tick·(a + (1 − a)P)) with tick = slowest "
             "stage + message.", "",
             "| method | clock | P | per-position acceptance (estimates a) | ticks/token | tick ms | stage ms | idle | message ms | "
             "bytes/token | tokens/s | Eq. 6 tokens/s | of Eq. 6 |", "|---" * 13 + "|"]
    for label, p in rows.items():
        o = methods[label]["overall"]
        stage = " / ".join(f"{v * 1e3:.1f}" for v in p["stage_seconds"].values())
        idle = " / ".join(f"{v:.0%}" for v in p["idle"].values())
        lines.append(f"| {label} | {o.get('clock', 'wall')} | {p['stages']} | {position_acceptance(p):.2f} | "
                     f"{p['ticks_per_token']:.2f} | {p['tick_seconds'] * 1e3:.1f} | {stage} | {idle} | "
                     f"{p['message_seconds'] * 1e3:.2f} | {p['message_bytes_per_token']:.0f} | {o['tokens_per_s']:.1f} | "
                     f"{_fmt(p['eq6_tokens_per_s'], '{:.1f}')} | {_fmt(p['of_eq6'], '{:.0%}')} |")
    return lines


def verdict_table(methods: dict) -> list[str]:
    """Where Mirror-SD and SSD runs spent their time, and their latency law at the measured costs."""
    rows = {label: m["overall"]["verdict"] for label, m in methods.items() if "verdict" in m["overall"]}
    if not rows:
        return []
    lines = ["", "## Speculating on the verdict: where the time went (overall)", "",
             "Per round: hit = cache lookups that found the verdict's window; exposed = draft time the target "
             "waited for (backups after misses, draft work that outlasted verification, message hops); hidden = "
             "draft work overlapped by the target's compute. Target ms: prefix (layers 1..l_e + early exit) / "
             "suffix (the rest + verification) for Mirror, verify for SSD. Draft ms: glue / rollout (all branches "
             "as one tree) / backup. Law: Mirror's Eq. 10 + FF·T_gen, SSD's §5.6 round time, at the same costs.",
             "", "| method | hit | exposed ms | hidden ms | target ms | glue / rollout / backup ms | message ms | "
             "tokens/s | law tokens/s | of law |", "|---" * 10 + "|"]
    for label, v in rows.items():
        o = methods[label]["overall"]
        target = (f"{_fmt(v['prefix_ms'], '{:.1f}')} / {_fmt(v['suffix_ms'], '{:.1f}')}" if v["prefix_ms"] is not None
                  else _fmt(v["verify_ms"], "{:.1f}"))
        draft = " / ".join(_fmt(v[k], "{:.1f}") for k in ("glue_ms", "rollout_ms", "backup_ms"))
        lines.append(f"| {label} | {_fmt(v['hit_rate'], '{:.0%}')} | {_fmt(v['exposed_draft_ms'], '{:.1f}')} | "
                     f"{_fmt(v['hidden_draft_ms'], '{:.1f}')} | {target} | {draft} | {_fmt(v['message_ms'], '{:.2f}')} | "
                     f"{o['tokens_per_s']:.1f} | {_fmt(v['law_tokens_per_s'], '{:.1f}')} | {_fmt(v['of_law'], '{:.0%}')} |")
    categories = [c for c in methods[next(iter(rows))] if c != "overall"]
    lines += ["", "Per category: hit rate · exposed draft ms per round", "",
              "| method | " + " | ".join(categories) + " |", "|---" * (len(categories) + 1) + "|"]
    for label in rows:
        cells = []
        for category in categories:
            v = methods[label][category].get("verdict") or {}
            cells.append(f"{_fmt(v.get('hit_rate'), '{:.0%}')} · {_fmt(v.get('exposed_draft_ms'), '{:.1f}')}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def memory_table(setup: dict, methods: dict) -> list[str]:
    """Markdown rows of flash traffic per method, for a bench run under a memory budget."""
    memory = setup.get("memory_budget")
    if not memory:
        return []
    flash = "unthrottled" if memory.get("flash_mb_s") is None else f"{memory['flash_mb_s']:g} MB/s"
    lines = ["", "## Memory budget", "", f"{memory['memory_budget_mb']:g} MB of weights resident, flash {flash}, "
             f"stream={memory['stream']} (see `engines/memory_budget/weight_stream.py`).", "",
             "| method | MB streamed per token | peak MB resident |", "|---|---|---|"]
    for label, by_category in methods.items():
        o = by_category["overall"]
        if "bytes_per_token" in o:
            lines.append(f"| {label} | {o['bytes_per_token'] / 1e6:.2f} | {o['peak_resident_bytes'] / 1e6:.1f} |")
    return lines


def position_table(methods: dict) -> list[str]:
    """Markdown rows of the acceptance by draft position (overall: accepted ÷ rounds that reached each
    depth), for the methods that drafted."""
    by_label = {label: m["overall"].get("alpha_by_position") or [] for label, m in methods.items()}
    by_label = {label: alphas for label, alphas in by_label.items() if alphas}
    if not by_label:
        return []
    depth = max(len(alphas) for alphas in by_label.values())
    lines = ["", "## Acceptance by draft position (overall)", "",
             "Accepted ÷ rounds that reached the position: the first column is how often the drafter's first "
             "guess is right, the rest show whether its later guesses hold up. Each rejection ends a round, so "
             "deeper positions are reached by fewer rounds and read noisier.", "",
             "| method | " + " | ".join(str(d) for d in range(1, depth + 1)) + " |", "|---" * (depth + 1) + "|"]
    for label, alphas in by_label.items():
        cells = [_fmt(a) for a in alphas] + ["—"] * (depth - len(alphas))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def write_results(results: dict, out_dir) -> tuple[Path, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "results.json", out / "results.md"
    # each whole or not at all (a checkpoint after every prompt may be the one a kill interrupts); the report
    # is made from the results, so a run killed between the two leaves a report one prompt behind, never half
    write_json_atomic(json_path, results, indent=2)
    write_text_atomic(md_path, to_markdown(results))
    return json_path, md_path


def pooled_speedups(parts: list[tuple[dict, set[str] | None, set[str]]]) -> dict[str, dict]:
    """Overall speed pooled over parts of several runs (see ``scripts/pool_bench.py``): Σ new tokens ÷ Σ
    decode seconds per method, against ``ar`` pooled over the same parts, and the mean of the categories'
    draft costs c. ``parts``: (results, categories to take or None for all, categories to leave out)."""
    tokens: dict[str, float] = defaultdict(float)
    seconds: dict[str, float] = defaultdict(float)
    costs: dict[str, list[float]] = defaultdict(list)
    taken: set[str] = set()
    for results, keep, drop in parts:
        for method, categories in results["methods"].items():
            for category, row in categories.items():
                if category == "overall" or category in drop or (keep is not None and category not in keep):
                    continue
                tokens[method] += row["new_tokens"]
                seconds[method] += row["decode_seconds"]
                if row.get("draft_cost") is not None:
                    costs[method].append(row["draft_cost"])
                taken.add(category)
    if "ar" not in tokens:
        raise ValueError("every part must include ar, the baseline the speedups are against")
    ar = tokens["ar"] / seconds["ar"]
    return {m: {"tokens_per_s": tokens[m] / seconds[m], "speedup": tokens[m] / seconds[m] / ar,
                "mean_draft_cost": sum(costs[m]) / len(costs[m]) if costs[m] else None,
                "categories": sorted(taken)} for m in tokens}
