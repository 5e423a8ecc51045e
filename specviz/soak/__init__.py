"""``make soak``: hours of use compressed — every method run hundreds of times in one process, one run of
thousands of tokens, the dashboard driven by several browsers at once, lane workers killed, stopped and cut
off mid-run, and ``specviz generate`` interrupted with Ctrl-C — with a table of what each held after warm-up
and at the end. Not part of ``make test`` (it takes over an hour); ``tests/test_soak.py`` runs a short form.
See docs/soak.md for the targets and the last measured table."""
