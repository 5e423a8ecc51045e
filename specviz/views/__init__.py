"""Views: figures, tables and HTML drawn from data already there (a run's events, bench results, sweep results,
the formulas of :mod:`specviz.theory`). Nothing here loads, builds or runs a model; that is
:mod:`specviz.experiments`, :mod:`specviz.bench` and :mod:`specviz.widgets`."""
