"""ipywidgets explorables that run the real engine on a button: :func:`live_run_explorer` (method, γ, draft depth,
budget, temperature → a real run, streamed into a coloured token stream with its statistics and the speedup
over ``ar``) and :func:`cats_run_explorer` (CATS's layers, γ, acceptance, the memory budget and the flash
bandwidth → a real ``cats`` run beside ``ar`` under the same budget, with one cycle's Gantt and the confusion
matrix). The formula explorers (sliders only) are :mod:`specviz.widgets.theory_explorers`.
"""

from __future__ import annotations

import dataclasses
import html
import typing
from typing import Sequence

import ipywidgets as W
from IPython.display import display

from engines import METHODS, Engine
from engines.core.trace import Commit, Event, RunEnd, RunStart

from ..experiments import cats_sweeps
from ..views import cats_cycles as cv
from ..views.chain import token_stream_figure
from ..views.tokens import legend_html, token_stream_html

# Slider bounds per method option; ``None`` as the upper bound means "the target's layers − 1".
OPTION_BOUNDS: dict[str, tuple[int, int | None]] = {
    "gamma": (1, 16), "draft_layers": (1, None), "exit_layer": (1, None), "max_ngram": (1, 8), "min_ngram": (1, 8),
}
# α is the acceptance rate, accepted ÷ drafted (README glossary), as on the dashboard and in the CLI.
STAT_FIELDS = (("new_tokens", "tokens", "{:d}"), ("tokens_per_s", "tokens/s", "{:.1f}"),
               ("mean_accepted_length", "τ", "{:.2f}"), ("acceptance_rate", "α", "{:.2f}"),
               ("target_calls", "target calls", "{:d}"))


def _stat(stats: dict, key: str, fmt: str) -> str:
    """One run statistic formatted; α is '—' where nothing was drafted (ar)."""
    return "—" if key == "acceptance_rate" and not stats.get("drafted") else fmt.format(stats[key])


# --- runs -----------------------------------------------------------------------------------------
def run_card_html(title: str, events: Sequence[Event], speedup: float | None = None) -> str:
    """A run's coloured token stream under a one-line summary of its statistics."""
    end = next((e for e in reversed(events) if isinstance(e, RunEnd)), None)
    start = next((e for e in events if isinstance(e, RunStart)), None)
    if start is not None and not start.lossless:  # design rule: a lossy method says so wherever it is shown
        title += " — LOSSY (output may differ from the target's)"
    summary = "running…"
    if end is not None:
        s = end.stats
        summary = " · ".join(f"{label} <b>{_stat(s, key, fmt)}</b>" for key, label, fmt in STAT_FIELDS)
        if speedup is not None:
            summary += f" · speedup <b>{speedup:.2f}×</b>"
    return (f'<div style="flex:1;min-width:260px;border:1px solid #ddd;border-radius:6px;padding:8px">'
            f"<div><b>{html.escape(title)}</b></div><div style='font-size:90%;color:#444'>{summary}</div>"
            f"{token_stream_html(events)}</div>")


def side_by_side_html(runs: dict[str, Sequence[Event]], baseline: str | None = None) -> str:
    """Several runs as cards in a row, with the legend; speedups are relative to the ``baseline`` run."""
    base = _tokens_per_s(runs[baseline]) if baseline else None
    cards = [run_card_html(name, events, _tokens_per_s(events) / base if base else None)
             for name, events in runs.items()]
    return (f"<div>{legend_html()}</div><div style='display:flex;gap:10px;margin-top:6px'>"
            + "".join(cards) + "</div>")


def _tokens_per_s(events: Sequence[Event]) -> float:
    end = next(e for e in reversed(events) if isinstance(e, RunEnd))
    return end.stats["tokens_per_s"]


def option_widgets(n_layers: int) -> dict[str, W.Widget]:
    """One control per option of any registered method, from the config dataclasses themselves,
    so a method added to the registry gets its controls without touching this module."""
    controls: dict[str, W.Widget] = {}
    for method in METHODS.values():
        hints = typing.get_type_hints(method.Config)
        for field in dataclasses.fields(method.Config):
            if field.name in controls:
                continue
            kind, default = hints[field.name], field.default
            if default is dataclasses.MISSING:
                default = field.default_factory() if field.default_factory is not dataclasses.MISSING else None
            if typing.get_args(kind) == (int, str):  # a number or "auto": typed or picked, parsed by the config
                high = OPTION_BOUNDS.get(field.name, (1, 16))[1] or n_layers - 1
                controls[field.name] = W.Combobox(value=str(default), options=["auto"] + [str(i) for i in range(1, high + 1)],
                                                  ensure_option=False)
            elif kind is int and field.name in OPTION_BOUNDS:
                low, high = OPTION_BOUNDS[field.name]
                high = n_layers - 1 if high is None else high
                controls[field.name] = W.IntSlider(value=min(max(default, low), high), min=low, max=high)
            elif kind is int:
                controls[field.name] = W.IntText(value=default or 0)
            elif kind is float:
                controls[field.name] = W.FloatText(value=default or 0.0)
            elif kind is bool:
                controls[field.name] = W.Checkbox(value=bool(default))
            else:
                controls[field.name] = W.Text(value=str(default))
            controls[field.name].description = field.name.replace("_", " ")
    return controls


def method_options(method: str, controls: dict[str, W.Widget]) -> dict:
    """The values of the controls that ``method`` accepts (the others belong to other methods)."""
    return {name: controls[name].value for name in METHODS[method].Config.option_names()}


def live_run_explorer(engine: Engine, prompt: str, method: str = "sps", max_new_tokens: int = 24,
                      temperature: float = 0.0, compare_ar: bool = True, run_now: bool = True,
                      **options) -> W.VBox:
    """Controls → a real engine run, streamed token by token into a coloured stream with its stats, and, once it
    ends, every committed token drawn round by round (:func:`specviz.views.chain.token_stream_figure`).

    With ``compare_ar`` the same prompt and settings also run through ``ar`` (once per setting, then
    cached) so the card shows the speedup and, when greedy, whether the text is identical to it.
    ``run_now`` renders one run immediately, so the cell shows a result even where nobody can click.
    The ar baseline is cached per setting, so its speed was measured at its first run, not beside each run.
    """
    method_box = W.Dropdown(options=list(METHODS), value=method, description="method")
    controls = option_widgets(engine.target.n_layers)
    for name, value in options.items():
        if name not in controls:
            raise ValueError(f"unknown option {name!r}; options of the registered methods: {sorted(controls)}")
        controls[name].value = str(value) if isinstance(controls[name], W.Text) else value
    budget = W.IntSlider(value=max_new_tokens, min=4, max=128, step=4, description="max new tokens")
    temp = W.FloatSlider(value=temperature, min=0.0, max=1.5, step=0.1, description="temperature")
    prompt_box = W.Textarea(value=prompt, description="prompt", layout=W.Layout(width="95%"))
    with_ar = W.Checkbox(value=compare_ar, description="compare with ar")
    button = W.Button(description="Run", button_style="primary", icon="play")
    stream, status, rounds_plot = W.HTML(), W.HTML(), W.Output()
    ar_cache: dict[tuple, list[Event]] = {}

    def show_relevant(_change=None):
        accepted = set(METHODS[method_box.value].Config.option_names())
        for name, control in controls.items():
            control.layout.display = None if name in accepted else "none"

    def baseline(settings: dict) -> list[Event]:
        key = tuple(sorted(settings.items()))
        if key not in ar_cache:
            status.value = "running ar for the baseline…"
            ar_cache[key] = list(engine.generate(method="ar", **settings))
        return ar_cache[key]

    def run(_button=None):
        button.disabled = True
        settings = dict(prompt=prompt_box.value, max_new_tokens=budget.value, temperature=temp.value)
        try:
            engine.check(method=method_box.value, **settings, **method_options(method_box.value, controls))
            reference = baseline(settings) if with_ar.value and method_box.value != "ar" else None
            events: list[Event] = []
            title = run_label(method_box.value, method_options(method_box.value, controls))
            status.value = f"running {html.escape(title)}…"
            for event in engine.generate(method=method_box.value, **settings,
                                         **method_options(method_box.value, controls)):
                events.append(event)
                if isinstance(event, (Commit, RunEnd)):
                    stream.value = run_card_html(title, events)
            speedup = _tokens_per_s(events) / _tokens_per_s(reference) if reference else None
            stream.value = run_card_html(title, events, speedup)
            status.value = comparison_note(events, reference, temp.value, engine.dtype)
            with rounds_plot:  # drawn once the run has ended: a figure per commit would slow the stream
                rounds_plot.clear_output(wait=True)
                display(token_stream_figure(events))
        except Exception as error:  # e.g. a bad combination of settings: say so, keep the explorer alive
            status.value = f"<span style='color:#c62828'>{type(error).__name__}: {html.escape(str(error))}</span>"
            if _button is None:  # the notebook's own first run: a failure must fail the cell (and CI)
                raise
        finally:
            button.disabled = False

    method_box.observe(show_relevant, names="value")
    button.on_click(run)
    show_relevant()
    if run_now:
        run()
    settings_row = W.HBox([W.VBox([method_box, *controls.values()]), W.VBox([budget, temp, with_ar, button])])
    return W.VBox([prompt_box, settings_row, W.HTML(legend_html()), stream, status, rounds_plot])


def run_label(method: str, options: dict) -> str:
    """``sps(gamma=3, draft_layers=26)``: how the CLI and the benchmark write a method with options."""
    inner = ", ".join(f"{k}={v}" for k, v in options.items())
    return f"{method}({inner})" if inner else method


def comparison_note(events: Sequence[Event], reference: Sequence[Event] | None, temperature: float,
                    dtype: str = "float32") -> str:
    """What the ar comparison says: identical text when greedy; a different sample is expected otherwise."""
    if reference is None:
        return ""
    ours, theirs = events[-1].token_ids, reference[-1].token_ids
    ar_speed = _tokens_per_s(reference)
    if temperature > 0:
        return (f"ar ran at {ar_speed:.1f} tokens/s. Sampling: the texts may differ, since the two runs use their "
                "random numbers differently, but both are samples from the target's own distribution.")
    if ours == theirs:
        return f"ar ran at {ar_speed:.1f} tokens/s; this greedy output is identical to ar's, token for token."
    note = f"ar ran at {ar_speed:.1f} tokens/s; this greedy output <b>differs</b> from ar's."
    if dtype != "float32":
        note += (f" In {dtype}, scoring a chunk of tokens and stepping one token at a time round differently, so a"
                 " near-tie between two tokens can flip; in float32 the engine's tests hold them identical.")
    return note


def cats_run_explorer(engine: Engine, prompt: str, resident_layers: int = 15, flash_mb_s: float = 2000.0,
                      max_new_tokens: int = 16, gamma: int = 5, run_now: bool = True) -> W.VBox:
    """Controls → a real ``cats`` run and an ``ar`` run under the same memory budget, side by side, with one
    cycle's io/compute Gantt and the shallow verifier's confusion matrix. The DM and SV layers offered are
    the shipped adapters (listed when the explorer is built). ``run_now`` renders one run at once."""
    drafts, verifiers = cats_sweeps.shipped_cats_layers("draft"), cats_sweeps.shipped_cats_layers("shallow_verifier")
    if not drafts or not verifiers:
        raise ValueError(f"CATS needs a shipped draft and shallow-verifier adapter; found draft {drafts}, "
                         f"shallow verifier {verifiers}")
    n = engine.target.n_layers
    controls = dict(
        dm_layer=W.Dropdown(options=drafts, value=3 if 3 in drafts else drafts[0], description="ℓ_DM"),
        sv_layer=W.Dropdown(options=verifiers, value=15 if 15 in verifiers else verifiers[-1], description="ℓ_SV"),
        gamma=W.IntSlider(value=gamma, min=1, max=10, description="γ"),
        acceptance=W.Dropdown(options=[("greedy (lossless)", "greedy"), ("sample (lossless)", "sample"),
                                       ("typical (LOSSY)", "typical")], value="greedy", description="acceptance"),
        temperature=W.FloatSlider(value=0.7, min=0.1, max=1.5, step=0.1, description="T (not greedy)"),
    )
    budget = dict(
        resident=W.IntSlider(value=resident_layers, min=0, max=n - 1, description="resident layers"),
        flash=W.FloatLogSlider(value=flash_mb_s, base=10, min=1.5, max=4, step=0.05, description="flash MB/s",
                               readout_format=".0f"),
        tokens=W.IntSlider(value=max_new_tokens, min=4, max=64, step=4, description="max new tokens"),
    )
    for widget in [*controls.values(), *budget.values()]:
        widget.style.description_width = "110px"
    prompt_box = W.Textarea(value=prompt, description="prompt", layout=W.Layout(width="95%"))
    button = W.Button(description="Run", button_style="primary", icon="play")
    cards, status, plots = W.HTML(), W.HTML(), W.Output()

    def run(_button=None):
        button.disabled = True
        try:
            memory = cats_sweeps.memory_settings(engine, budget["resident"].value, budget["flash"].value)
            options = {k: controls[k].value for k in ("dm_layer", "sv_layer", "gamma", "acceptance")}
            temperature = 0.0 if options["acceptance"] == "greedy" else controls["temperature"].value
            settings = dict(max_new_tokens=budget["tokens"].value, temperature=temperature, **memory)
            status.value = "running cats…"
            events: list[Event] = []
            title = run_label("cats", options)
            for event in engine.generate(prompt_box.value, "cats", **settings, **options):
                events.append(event)
                if isinstance(event, (Commit, RunEnd)):
                    cards.value = run_card_html(title, events)
            status.value = "running ar under the same budget for the speedup…"
            reference = list(engine.generate(prompt_box.value, "ar", **settings))
            cards.value = side_by_side_html({"ar (same budget)": reference, title: events}, baseline="ar (same budget)")
            stats = events[-1].stats
            status.value = (f"{html.escape(cv.memory_caption(events))} · BPT {cv.decode_bytes_per_token(events) / 1e6:.1f}"
                            f" MB (ar {cv.decode_bytes_per_token(reference) / 1e6:.1f} MB) · "
                            f"{stats['bytes_streamed'] / 1e6:.0f} MB streamed · peak "
                            f"{stats['peak_resident_bytes'] / 1e6:.0f} MB resident")
            with plots:
                plots.clear_output(wait=True)
                if cv.cats_cycles(events):
                    display(cv.gantt_figure(events, [cv.showcase_cycle(events)]))
                    display(cv.confusion_figure(events))
        except Exception as error:  # a bad combination of settings: say so, keep the explorer alive
            status.value = f"<span style='color:#c62828'>{type(error).__name__}: {html.escape(str(error))}</span>"
            if _button is None:  # the notebook's own first run: a failure must fail the cell (and CI)
                raise
        finally:
            button.disabled = False

    button.on_click(run)
    if run_now:
        run()
    return W.VBox([prompt_box, W.HBox([W.VBox(list(controls.values())), W.VBox([*budget.values(), button])]),
                   cards, status, plots])
