"""specviz.quick: the one reader of SPECVIZ_QUICK, which `make test` sets to run the notebooks small."""

from __future__ import annotations

import pytest

from specviz.quick import ENV_VAR, announce, banner, pick, quick_mode


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "yes", " Yes ", "on"])
def test_quick_mode_on(monkeypatch, value):
    monkeypatch.setenv(ENV_VAR, value)
    assert quick_mode()
    assert pick(128, 24) == 24
    assert "quick mode" in banner("fewer tokens")


@pytest.mark.parametrize("value", [None, "", "0", "false", "no", "off", "quick"])
def test_quick_mode_off(monkeypatch, value):
    if value is None:
        monkeypatch.delenv(ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(ENV_VAR, value)
    assert not quick_mode()
    assert pick(128, 24) == 128
    assert pick((1, 2, 3), (1,)) == (1, 2, 3)
    assert banner("fewer tokens") is None


def test_pick_reads_the_variable_each_call(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "0")
    assert pick("full", "quick") == "full"
    monkeypatch.setenv(ENV_VAR, "1")
    assert pick("full", "quick") == "quick"


def test_announce_prints_only_in_quick_mode(monkeypatch, capsys):
    monkeypatch.delenv(ENV_VAR, raising=False)
    announce("24 new tokens")
    assert capsys.readouterr().out == ""
    monkeypatch.setenv(ENV_VAR, "1")
    announce("24 new tokens")
    assert "24 new tokens" in capsys.readouterr().out
