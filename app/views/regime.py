"""The dashboard's Regime page: each method's projected speedup on other hardware, from terms measured here.

It reads the terms ``python -m specviz.regime.terms`` recorded (data/bench/bf16/regime-terms.json: one session
of every method on this machine), lets the reader pick a machine and edit its numbers, and draws the projected
speedup per method and the whole map. The check table puts the projection for the recorded machine beside its
measurement. Everything but that table's "measured" column is a projection.
"""

from __future__ import annotations

import math

import streamlit as st

from specviz.regime.hardware import presets
from specviz.regime.projection import check_rows, projection_table
from specviz.regime.terms import DEFAULT_OUT, load_terms
from specviz.views.regime import check_table_markdown, regime_bars, regime_heatmap

st.title("Regime: which method wins where (projection)")
st.caption("Projected from each method's terms measured on the recorded machine and its paper's latency law "
           "(docs/regime.md). Only the check table's measured column was measured.")


@st.cache_data
def _terms_dict(path: str) -> dict:
    return load_terms(path).to_dict()


try:
    from specviz.regime.projection import MachineTerms

    terms = MachineTerms.from_dict(_terms_dict(str(DEFAULT_OUT)))
except ValueError as error:
    st.error(f"No recorded terms: {error}")
    st.stop()

setup = terms.setup
st.markdown(f"Terms recorded on **{setup.get('machine', '?')}** ({setup.get('cores', '?')} cores, "
            f"{setup.get('dtype', '?')}, {setup.get('max_new_tokens', '?')} new tokens per method, "
            f"{setup.get('threads', 1)} thread per process).")

machines = presets(terms.this_machine)
names = [hw.name for hw in machines]
choice = st.selectbox("Machine (preset)", names, index=names.index("phone (flash)"), key="regime:machine")
base = machines[names.index(choice)]

st.subheader("Its numbers (editable)")
cols = st.columns(4)
bandwidth = cols[0].number_input("B: memory bandwidth (GB/s)", min_value=0.01, value=float(base.bandwidth / 1e9),
                                 key=f"regime:{choice}:bandwidth")
compute = cols[1].number_input("Compute (TFLOP/s)", min_value=1e-4, value=float(base.compute / 1e12),
                               format="%.4f", key=f"regime:{choice}:compute")
lanes = cols[2].number_input("Lanes", min_value=1, value=int(base.lanes), step=1, key=f"regime:{choice}:lanes")
overhead = cols[3].number_input("Fixed cost per forward (ms)", min_value=0.0, value=float(base.step_overhead * 1e3),
                                format="%.3f", key=f"regime:{choice}:overhead")
cols = st.columns(4)
latency = cols[0].number_input("Link latency, one way (ms)", min_value=0.0, value=float(base.link_latency * 1e3),
                               format="%.3f", key=f"regime:{choice}:latency")
link = cols[1].number_input("Link bandwidth (MB/s)", min_value=1e-3,
                            value=float(min(base.link_bandwidth, 1e15) / 1e6), key=f"regime:{choice}:link")
flash = cols[2].number_input("Flash bandwidth (GB/s, 0 = none)", min_value=0.0,
                             value=float(base.flash_bandwidth / 1e9), key=f"regime:{choice}:flash")
budget = cols[3].number_input("M: memory budget (MB, 0 = all)", min_value=0.0,
                              value=0.0 if math.isinf(base.memory_budget) else float(base.memory_budget / 1e6),
                              key=f"regime:{choice}:budget")
edited = base.with_numbers(bandwidth=bandwidth * 1e9, compute=compute * 1e12, lanes=int(lanes),
                           step_overhead=overhead / 1e3, link_latency=latency / 1e3, link_bandwidth=link * 1e6,
                           flash_bandwidth=flash * 1e9, memory_budget=budget * 1e6 if budget > 0 else math.inf)

table = projection_table(terms, [edited])
st.plotly_chart(regime_bars(table, edited.name), key="regime:bars")
best = max((label for label in table), key=lambda label: table[label][edited.name])
st.markdown(f"Projected winner on **{edited.name}**: **{best}** at {table[best][edited.name]:.2f}× "
            "(projection).")

st.subheader("The map (projection)")
st.plotly_chart(regime_heatmap(projection_table(terms, machines)), key="regime:map")

st.subheader("The check: projection against measurement on the recorded machine")
rows = check_rows(terms)
st.markdown(check_table_markdown(rows))
within = sum(abs(r["ratio"] - 1) <= 0.10 for r in rows[1:])
st.caption(f"{within} of {len(rows) - 1} methods project within 10% of their measured speedup.")
