"""specviz dashboard, the entry script: ``streamlit run app/main.py``.

It lists the pages (``st.navigation``) and runs the chosen one. The page files have plain names; the sidebar's
titles and icons, the page order and the URL paths (``/Compare``, ``/Mirror_SD``, …, the Run page at ``/``)
are given here, so links keep working.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

PAGES = Path(__file__).resolve().parent / "views"

# (file in views/, sidebar title, icon, URL path); the first is the Run page, served at "/".
PAGE_LIST = (
    ("run.py", "Run", None, ""),
    ("compare.py", "Compare", "⚖️", "Compare"),
    ("results.py", "Results", "📊", "Results"),
    ("draft_trees.py", "Draft trees", "🌳", "Draft_trees"),
    ("cats.py", "CATS", "🪜", "CATS"),
    ("theory.py", "Theory", "📐", "Theory"),
    ("ppsd.py", "PPSD", "🚰", "PPSD"),
    ("mirror_sd.py", "Mirror SD", "🪞", "Mirror_SD"),
    ("ssd.py", "SSD", "🔮", "SSD"),
    ("moa.py", "MoA", "🧩", "MoA"),
    ("regime.py", "Regime", "🗺️", "Regime"),
)

pages = [st.Page(PAGES / name, title=title, icon=icon, url_path=url_path or None, default=not url_path)
         for name, title, icon, url_path in PAGE_LIST]
st.navigation(pages).run()
