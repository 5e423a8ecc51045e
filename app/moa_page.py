"""The MoA page's logic, kept out of the page so it can be tested without Streamlit.

What the page offers (the shipped drafters, the link profiles), the method and options of a press of Run,
and the headline numbers. The numbers come from :func:`specviz.views.moa_runs.moa_metrics`; the message sizes
from :func:`specviz.views.moa_messages.measured_message_sizes` (Table 7 via :func:`engines.network.link.table7_bytes`).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from engines.core.trace import Event, RunEnd, RunStart
from engines.drafters.trained import available
from engines.network.link import PROFILES

# drafter key → (method, options, label); the order is the page's
DRAFTERS: dict[str, tuple[str, dict, str]] = {
    "moa-tli0": ("moa", {"tli": 0}, "MoA, TLI = 0 (memory rows only)"),
    "moa-tli1": ("moa", {"tli": 1}, "MoA, TLI = 1 (+ the target's last layer)"),
    "moa-tli3": ("moa", {"tli": 3}, "MoA, TLI = 3 (+ the target's last 3 layers)"),
    "moa-tli0-nolsa": ("moa", {"tli": 0, "lsa": False}, "MoA −LSA (memory = last hidden states)"),
    "eagle": ("eagle", {"draft": "eagle"}, "EAGLE-2 head (last hidden state per token)"),
    "eagle-matched": ("eagle", {"draft": "eagle-matched"}, "EAGLE head trained on MoA's budget"),
    "tiny": ("eagle", {"draft": "tiny"}, "tiny: an independent draft model (ids only)"),
}
NETWORKS = ("none", *PROFILES)
NETWORK_LABELS = {"none": "none: one device (no link)", "local": "local: a link with no delay",
                  "base": "base: 9 ms ping, 50 Mbit/s", "5g": "5G: + N(10, 10) ms, 0.1 % loss",
                  "4g": "4G: + N(21, 19) ms, 20 Mbit/s, 0.1 % loss"}


def available_drafters(names: Sequence[str] | None = None) -> list[str]:
    """The page's drafters that are shipped (``names``: the drafters available; default: data/drafts)."""
    shipped = set(available() if names is None else names)
    return [key for key in DRAFTERS if key in shipped]


def run_options(drafter: str, network: str, packet_loss_pct: float | None = None,
                disconnect_after: int | None = None, link_seed: int = 0) -> tuple[str, dict]:
    """The method and its options for one press of Run. ``packet_loss_pct`` in percent (``None``: the
    profile's own); ``disconnect_after`` (new tokens; ``None``: never; needs a network, and makes the run lossy)."""
    if drafter not in DRAFTERS:
        raise ValueError(f"drafter must be one of {', '.join(DRAFTERS)}, got {drafter!r}")
    method, options, _ = DRAFTERS[drafter]
    options = {**options, "network": network}
    if network != "none":
        options["link_seed"] = int(link_seed)
        if packet_loss_pct is not None:
            options["packet_loss"] = float(packet_loss_pct) / 100
        if disconnect_after is not None:
            options["disconnect_after"] = int(disconnect_after)
    return method, options


def run_title(method: str, options: Mapping) -> str:
    inner = ", ".join(f"{k}={v}" for k, v in options.items() if k != "link_seed")
    return f"{method}({inner})"


METRIC_HELP = {
    "τ (tokens / server call)": "Tokens committed per verification by the server (accepted drafts + its own token); "
                                "tokens the disconnected client wrote alone do not count.",
    "server calls": "Calls to the target: the prefill + one verification per cycle (the paper's 'calls').",
    "tok/s (run's clock)": "New tokens per second of decoding (prefill excluded) on the run's clock (the caption names "
                           "it): 'wall+link' adds the simulated link's seconds to the compute measured on this machine.",
    "resends": "Messages that lost a packet and were sent again after TCP's 200 ms timeout.",
    "link KB up · down": "Bytes that crossed the simulated link each way, prompt message included.",
    "link share": "The simulated link's seconds over the decode time.",
    "LSA ms": "The server's Layer Self-Attention over every layer's keys/values of the verified tokens, all cycles.",
}


def _fmt(value, spec: str = ".1f", unit: str = "") -> str:
    return "—" if value is None else f"{value:{spec}}{unit}"


def metric_values(metrics: Mapping) -> dict[str, str]:
    """A run's headline numbers, formatted and keyed by label; :data:`METRIC_HELP` explains each."""
    linked = metrics.get("link_messages", 0) > 0
    return {
        "τ (tokens / server call)": _fmt(metrics.get("tau"), ".2f"),
        "server calls": _fmt(metrics.get("server_calls"), "d"),
        "tok/s (run's clock)": _fmt(metrics.get("tokens_per_s")),
        "resends": str(metrics.get("link_resends", 0)) if linked else "—",
        "link KB up · down": (f"{metrics['link_bytes_up'] / 1e3:.1f} · {metrics['link_bytes_down'] / 1e3:.1f}"
                              if linked else "—"),
        "link share": _fmt(metrics.get("link_share"), ".0%") if linked else "—",
        "LSA ms": _fmt(1e3 * metrics["lsa_seconds"]) if metrics.get("lsa_passes") else "—",
    }


def run_caption(events: Sequence[Event]) -> str:
    """What ran where, in a line, with LOSSY for a run whose client wrote tokens alone."""
    start = next((e for e in events if isinstance(e, RunStart)), None)
    end = next((e for e in reversed(events) if isinstance(e, RunEnd)), None)
    if start is None:
        return ""
    options = ", ".join(f"{k}={v}" for k, v in start.config.items())
    lanes = " · ".join(f"{role} on {lane}" for role, lane in start.lanes.items())
    tokens = f"{end.stats['new_tokens']} new tokens ({end.stop_reason})" if end is not None else "running"
    sampling = "greedy" if start.temperature == 0 else f"temperature {start.temperature:g}"
    label = "lossless" if start.lossless else "LOSSY (the client wrote alone after the server left)"
    return f"{start.method}({options}) · {lanes} · {tokens} · {sampling} · clock {start.clock} · {label}"


def message_table(sizes: Mapping) -> list[dict]:
    """Measured mean bytes per message beside Table 7 and the exact wire size at the run's own mean n and mean A."""
    rows = []
    for direction, n_key, what in (("up", "nodes", "mean n nodes"), ("down", "accepted", "mean A tokens")):
        if sizes.get(direction) is None:
            continue
        rows.append({"message": f"{direction} ({what} = {sizes[n_key]:.2f})", "measured B": round(sizes[direction], 1),
                     "Table 7 B": round(sizes[f"table7_{direction}"], 1),
                     "Table 7 + header + scales B": round(sizes[f"predicted_{direction}"], 1)})
    if sizes.get("prompt_bytes") is not None:
        rows.append({"message": "first down (the prompt's activations, gzipped)", "measured B": sizes["prompt_bytes"],
                     "Table 7 B": None, "Table 7 + header + scales B": None})
    return rows
