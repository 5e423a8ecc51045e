"""The regime map's figures and tables: draw only (the numbers come from :mod:`specviz.regime.projection`).

Every title says "projection": only the check table's row for this machine was measured.
"""

from __future__ import annotations

import plotly.graph_objects as go


def _short(label: str) -> str:
    return label.split("(")[0] if "(" in label else label


def regime_heatmap(table: dict[str, dict[str, float]], title: str = "Projected speedup S by machine (projection)"
                   ) -> go.Figure:
    """Methods × machines, colour and text the projected speedup, 1× (``ar``) the white midpoint."""
    labels = list(table)
    machines = list(next(iter(table.values()))) if table else []
    z = [[table[label][hw] for hw in machines] for label in labels]
    fig = go.Figure(go.Heatmap(z=z, x=machines, y=[_short(x) for x in labels], colorscale="RdBu", zmid=1.0,
                               text=[[f"{v:.2f}×" for v in row] for row in z], texttemplate="%{text}",
                               colorbar=dict(title="S (projected)")))
    fig.update_layout(title=title, height=120 + 32 * len(labels), xaxis_title="machine (preset)",
                      yaxis_title="method", yaxis_autorange="reversed")
    return fig


def regime_bars(table: dict[str, dict[str, float]], machine: str) -> go.Figure:
    """One machine's projected speedup per method, a line at 1× (``ar``)."""
    labels = list(table)
    values = [table[label][machine] for label in labels]
    fig = go.Figure(go.Bar(x=[_short(x) for x in labels], y=values, text=[f"{v:.2f}×" for v in values],
                           marker_color=["#2b8cbe" if v >= 1 else "#de2d26" for v in values]))
    fig.add_hline(y=1.0, line_dash="dot", annotation_text="ar")
    fig.update_layout(title=f"Projected speedup S on {machine} (projection)", yaxis_title="S (projected)",
                      height=360)
    return fig


def check_table_markdown(rows: list[dict]) -> str:
    """The check: projected (this machine, by the law and the hardware model) against measured, per method."""
    lines = ["| method | law | projected S | measured S | projected ÷ measured |", "|---|---|---|---|---|"]
    lines += [f"| {r['label']} | {r['law']} | {r['projected']:.2f}× | {r['measured']:.2f}× | {r['ratio']:.2f} |"
              for r in rows]
    return "\n".join(lines)


def hardware_markdown(machines) -> str:
    """The presets' numbers as a table (editable in the notebook and on the page)."""
    lines = ["| machine | B (GB/s) | compute (TFLOP/s) | lanes | link latency (ms) | link (MB/s) | flash (GB/s) | "
             "M (MB) | o (ms) |", "|---|---|---|---|---|---|---|---|---|"]
    for hw in machines:
        flash = f"{hw.flash_bandwidth / 1e9:.1f}" if hw.flash_bandwidth else "—"
        budget = "all" if hw.memory_budget == float("inf") else f"{hw.memory_budget / 1e6:.0f}"
        link = "—" if hw.link_bandwidth == float("inf") else f"{hw.link_bandwidth / 1e6:.3g}"
        client = f" (client: {hw.client.name})" if hw.client is not None else ""
        lines.append(f"| {hw.name}{client} | {hw.bandwidth / 1e9:.3g} | {hw.compute / 1e12:.3g} | {hw.lanes} | "
                     f"{hw.link_latency * 1e3:.3g} | {link} | {flash} | {budget} | {hw.step_overhead * 1e3:.2g} |")
    return "\n".join(lines)
