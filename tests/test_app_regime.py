"""The dashboard's Regime page: the recorded terms, a preset's editable numbers, the map and the check."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

PAGE = Path(__file__).resolve().parents[1] / "app" / "views" / "regime.py"


def test_regime_page_projects_and_checks():
    at = AppTest.from_file(str(PAGE), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.get("plotly_chart")) == 2
    assert "projection" in at.title[0].value
    assert any("projected ÷ measured" in md.value for md in at.markdown)
    at.selectbox(key="regime:machine").set_value("GPU (H100)").run()
    at.number_input(key="regime:GPU (H100):overhead").set_value(0.1).run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("Projected winner on **GPU (H100)**" in md.value for md in at.markdown)
