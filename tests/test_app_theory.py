"""The dashboard's Theory page: the verify-cost curve and the models on it, on the real default model."""

from pathlib import Path

from streamlit.testing.v1 import AppTest

from app import live as lv

PAGE = Path(__file__).resolve().parents[1] / "app" / "views" / "theory.py"


def test_theory_page_draws_the_curve_and_both_models():
    at = AppTest.from_file(str(PAGE), default_timeout=600).run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.get("plotly_chart")) == 4
    assert any("No chain run yet" in i.value for i in at.info)
    assert any("16 tokens" in c.value for c in at.caption)
    at.slider(key="theory:alpha").set_value(0.8).run()
    at.slider(key="theory:topk").set_value(2).run()
    assert not at.exception, [e.value for e in at.exception]
    at.slider(key="theory:exit_layer").set_value(15).run()  # two stages: Eq. 6 at P = 2
    assert not at.exception, [e.value for e in at.exception]
    assert any("⌈30/15⌉ = <b>2</b> stages" in md.value for md in at.markdown)


def test_this_sessions_chain_runs_appear_on_the_model():
    """Runs the Run and Compare pages finished (kept by ``live.remember``) appear as predicted-against-measured
    points; ``ar`` and errors do not, nor runs in another dtype than the page's engine."""
    from engines import Engine
    from engines.model.step_choice import default_dtype

    engine = Engine.load(dtype=default_dtype())
    prompt = "Repeat this line twice: the quick brown fox jumps over the lazy dog."
    settings = {"max_new_tokens": 24, "temperature": 0.0, "seed": 0}
    batch = lv.Batch([("pld", {"gamma": 4}), ("ar", {}), ("pld", {"min_ngram": 5, "max_ngram": 2})], prompt,
                     settings, engine.dtype)
    for method, options in batch.configs:
        batch.run(lambda: engine.generate(prompt, method, **settings, **options))
    session: dict = {}
    lv.remember(session, batch)
    assert session == {}, "no ar baseline yet: nothing to measure a speedup against"
    batch.ar = {k: batch.runs[1][k] for k in ("events", "stats", "text", "token_ids")}
    lv.remember(session, batch)
    lv.remember(session, batch)  # idempotent
    assert [r["label"] for r in session[lv.SESSION_RUNS].values()] == ["pld(gamma=4)", "ar"]

    at = AppTest.from_file(str(PAGE), default_timeout=600)
    at.session_state[lv.SESSION_RUNS] = session[lv.SESSION_RUNS]
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert len(at.get("plotly_chart")) == 5
    rows = at.dataframe[0].value.to_dict("records")
    assert [r["run"] for r in rows] == ["pld(gamma=4)"], "ar drafts no chain"
    assert 1 <= rows[0]["γ"] <= 4 and 0 <= rows[0]["a"] <= 1 and rows[0]["measured"] > 0 and rows[0]["predicted"] > 0
