"""The dashboard's Theory page: the verify-cost curve and the models on it, on the real default model."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

PAGE = Path(__file__).resolve().parents[1] / "app" / "pages" / "3_📐_Theory.py"


def test_theory_page_draws_the_curve_and_both_models():
    at = AppTest.from_file(str(PAGE), default_timeout=600).run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.get("plotly_chart")) == 3
    assert any("16 tokens" in c.value for c in at.caption)
    at.slider(key="theory:alpha").set_value(0.8).run()
    at.slider(key="theory:topk").set_value(2).run()
    assert not at.exception, [e.value for e in at.exception]
