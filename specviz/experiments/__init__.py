"""Experiments: run the real engine (sweeps, measurements, drafter comparisons, lane physics) and return data;
the figures that draw that data are :mod:`specviz.views`."""
