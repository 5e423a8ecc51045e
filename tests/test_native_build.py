"""How step.c is built (engines/model/native/library.py): keyed by what the build depends on and nothing that
moves between boots, a second compiler where the first fails, OpenMP builds and single-threaded ones kept
apart, and SPECVIZ_NATIVE_ISA=avx2 forcing the AVX2 build. One real compile (the AVX2 build, in a temporary
cache); every other build is a stand-in compiler that copies the library this process already loaded."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from engines import Engine
from engines.model import machine
from engines.model.native import library
from engines.model.native import step as native_step
from tests.conftest import tiny_llama

CPUINFO = """processor\t: {n}
vendor_id\t: AuthenticAMD
model name\t: {model}
cpu MHz\t\t: {mhz}
flags\t\t: fpu sse2 avx2 fma f16c {extra}
bogomips\t: {bogomips}
"""


def cpuinfo(model: str = "AMD EPYC", mhz: str = "2595.124", bogomips: str = "5190.24", extra: str = "avx512f") -> str:
    return "".join(CPUINFO.format(n=n, model=model, mhz=mhz, bogomips=bogomips, extra=extra) for n in range(2))


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty cache, no library loaded or warned about yet in this process, the default ISA."""
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.delenv(library.ISA_VARIABLE, raising=False)
    monkeypatch.setattr(library, "_loaded", {})
    monkeypatch.setattr(library, "_warned", set())
    return tmp_path


@pytest.fixture(scope="session")
def native_build() -> library.Loaded:
    """The native build this process runs (in the user's cache, loaded before any test empties the cache)."""
    loaded = library.load(native_step.SOURCE) if library.isa() == "native" else library.Loaded(None)
    if loaded.library is None:
        pytest.skip("the native step does not build here")
    return loaded


@pytest.fixture
def built(native_build) -> Path:
    """The library a stand-in compiler copies."""
    return native_build.path


def stand_in(monkeypatch, built: Path, refuses) -> list[list[str]]:
    """Compilers ``cc1`` and ``cc2`` that 'build' by copying ``built``; ``refuses(command)`` says which fail."""
    calls: list[list[str]] = []

    def run(command: list[str]) -> None:
        calls.append(command)
        if refuses(command):
            raise subprocess.CalledProcessError(1, command, stderr=b"step.c:1: error: this compiler cannot\n")
        shutil.copyfile(built, command[command.index("-o") + 1])

    monkeypatch.setattr(library, "compilers", lambda: ["/opt/cc1", "/opt/cc2"])
    monkeypatch.setattr(library, "compiler_version", lambda cc: f"{Path(cc).name} 1.0")
    monkeypatch.setattr(library, "_run_compiler", run)
    return calls


# --- the key ----------------------------------------------------------------------------------------------------
def test_the_key_follows_the_cpus_model_and_flags_not_its_clock(monkeypatch):
    def key(text: str) -> str:
        monkeypatch.setattr(machine, "cpuinfo_text", lambda: text)
        return library._digest("int x;", "/usr/bin/gcc", ["-O3", "-march=native"])

    booted = key(cpuinfo())
    assert key(cpuinfo(mhz="3700.000", bogomips="7400.48")) == booted  # another boot, another clock: same build
    assert key(cpuinfo(extra="")) != booted  # no AVX-512: another build
    assert key(cpuinfo(model="AMD EPYC 9R14")) != booted
    assert machine.cpu_identity() == "AMD EPYC 9R14|avx2 avx512f f16c fma fpu sse2"


def test_the_cpu_identity_off_linux(monkeypatch):
    monkeypatch.setattr(machine, "cpuinfo_text", lambda: "")
    monkeypatch.setattr(machine.platform, "system", lambda: "Darwin")
    monkeypatch.setattr(machine.subprocess, "run",
                        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout="Apple M2\n", stderr=""))
    assert machine.cpu_identity() == "Apple M2"
    monkeypatch.setattr(machine.platform, "system", lambda: "Windows")
    monkeypatch.setattr(machine.platform, "processor", lambda: "Intel64 Family 6 Model 85")
    assert machine.cpu_identity() == "Intel64 Family 6 Model 85"


# --- SPECVIZ_NATIVE_ISA -----------------------------------------------------------------------------------------
def test_the_avx2_switch_changes_the_flags_and_the_key_and_refuses_other_values(monkeypatch):
    monkeypatch.setattr(library.platform, "machine", lambda: "x86_64")
    monkeypatch.delenv(library.ISA_VARIABLE, raising=False)
    assert library.isa() == "native" and "-march=native" in library.flags()
    native_key = library._digest("int x;", "/usr/bin/gcc", library.flags())
    monkeypatch.setenv(library.ISA_VARIABLE, "avx2")
    assert library.isa() == "avx2"
    assert "-march=x86-64-v3" in library.flags() and "-march=native" not in library.flags()
    assert library._digest("int x;", "/usr/bin/gcc", library.flags()) != native_key
    monkeypatch.setenv(library.ISA_VARIABLE, "avx512")
    with pytest.raises(ValueError, match="SPECVIZ_NATIVE_ISA must be one of native, avx2; got 'avx512'"):
        library.isa()
    monkeypatch.setenv(library.ISA_VARIABLE, "avx2")
    monkeypatch.setattr(library.platform, "machine", lambda: "aarch64")
    with pytest.raises(ValueError, match="SPECVIZ_NATIVE_ISA=avx2 builds for x86-64 only; this machine is aarch64"):
        library.isa()


def test_extra_compiler_flags_join_the_flags_and_the_key(monkeypatch):
    """SPECVIZ_NATIVE_CFLAGS (the stage clock, other tiles) builds apart: an experiment never loads the default build."""
    monkeypatch.delenv(library.CFLAGS_VARIABLE, raising=False)
    plain = library.flags()
    monkeypatch.setenv(library.CFLAGS_VARIABLE, " -DSPECVIZ_STAGE_CLOCK  -DRM=8 ")
    assert library.flags() == plain + ["-DSPECVIZ_STAGE_CLOCK", "-DRM=8"]
    assert library._digest("int x;", "/usr/bin/gcc", library.flags()) != library._digest("int x;", "/usr/bin/gcc", plain)


def test_an_avx2_build_on_a_cpu_without_avx2_is_not_loaded(fresh, monkeypatch):
    """A build using AVX2 on a CPU without it would die of SIGILL on its first step: PyTorch's path runs."""
    monkeypatch.setattr(library.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(library, "cpu_flags", lambda: frozenset({"fpu", "sse2", "avx"}))
    monkeypatch.setenv(library.ISA_VARIABLE, "avx2")
    loaded = library.load(native_step.SOURCE)
    assert loaded.library is None and "this CPU lacks avx2, bmi2, f16c, fma" in loaded.why_not


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64")
                    or not {"avx2", "fma", "f16c"} <= machine.cpu_flags(), reason="an x86-64 CPU with AVX2")
def test_the_avx2_build_compiles_without_avx512_computes_alike_and_keys_apart(fresh, monkeypatch, native_build):
    library._loaded[(str(native_step.SOURCE), "native")] = native_build  # the native build: loaded, not rebuilt
    native_id = native_step.build_id()
    reference = Engine(tiny_llama(vocab=64, layers=2, seed=3))
    monkeypatch.setenv(library.ISA_VARIABLE, "avx2")
    avx2 = Engine(tiny_llama(vocab=64, layers=2, seed=3))  # compiles here, into the empty cache
    loaded = library.load(native_step.SOURCE)
    assert loaded.info.isa == "avx2" and "-march=x86-64-v3" in loaded.info.flags and loaded.info.openmp
    assert loaded.path.name.endswith("-avx2-omp" + library._suffix()) and loaded.path.parent.parent == fresh
    assert native_step.build_id().endswith("-avx2") and native_id.endswith("-native")
    assert native_step.build_info() == loaded.info and native_step.build_description().endswith("OpenMP, ISA avx2")
    assert native_step.build_id().split("-")[0] != native_id.split("-")[0]
    assert avx2.target.native.lib is not reference.target.native.lib
    with torch.inference_mode():
        ids = list(range(3, 30))
        logits = [engine.target.forward(ids, engine.target.new_cache(64)) for engine in (reference, avx2)]
    assert torch.allclose(logits[0], logits[1], atol=1e-5)
    objdump = shutil.which("objdump")
    if objdump:  # no AVX-512 register anywhere in the build
        listing = subprocess.run([objdump, "-d", str(loaded.path)], capture_output=True, text=True).stdout
        assert "ymm" in listing and "zmm" not in listing


# --- compilers ------------------------------------------------------------------------------------------------
def test_a_second_compiler_builds_where_the_first_fails_and_the_failure_is_remembered(fresh, monkeypatch, built):
    calls = stand_in(monkeypatch, built, refuses=lambda command: command[0] == "/opt/cc1")
    loaded = library.load(native_step.SOURCE)
    assert loaded.library is not None and loaded.info.compiler == "/opt/cc2" and loaded.info.openmp
    assert loaded.info.version == "cc2 1.0" and "cc1: step.c:1: error: this compiler cannot" in loaded.attempts
    assert [c[0] for c in calls] == ["/opt/cc1", "/opt/cc2"]
    assert len(list((fresh / "kernels").glob("*.failed"))) == 1
    monkeypatch.setattr(library, "_loaded", {})  # another process: cc1's refusal is not paid for again
    assert library.load(native_step.SOURCE).info.compiler == "/opt/cc2" and len(calls) == 2


def test_a_library_that_no_longer_loads_is_said_once_and_built_again(fresh, monkeypatch, built, caplog):
    """A build damaged in the cache (a copy cut short, a disk error): set aside by name and rebuilt, once. (The
    damaged file is put where cc1's build goes before this process loads it: a path already loaded would be
    served from memory.)"""
    from engines import storage

    calls = stand_in(monkeypatch, built, refuses=lambda command: False)
    monkeypatch.setattr(storage, "_reported", set())
    caplog.set_level("WARNING", logger=storage.__name__)
    digest = library._digest(native_step.SOURCE.read_text(), "/opt/cc1", [*library.flags(), "-fopenmp"])
    damaged = fresh / "kernels" / f"{native_step.SOURCE.stem}-{digest}-native-omp{library._suffix()}"
    damaged.parent.mkdir()
    damaged.write_bytes(b"\x7fELF cut short")
    loaded = library.load(native_step.SOURCE)
    assert loaded.library is not None and loaded.path == damaged and loaded.info.compiler == "/opt/cc1"
    assert len(calls) == 1 and damaged.with_name(damaged.name + ".corrupt").read_bytes() == b"\x7fELF cut short"
    (line,) = [r.getMessage() for r in caplog.records if r.name == storage.__name__]
    assert line.startswith(f"specviz: the native build {damaged} is damaged (it does not load: ")
    assert line.endswith("it will be built again")


def test_a_build_that_does_not_load_is_remembered_and_the_next_compiler_runs(fresh, monkeypatch, built):
    calls = stand_in(monkeypatch, built, refuses=lambda command: False)
    copy = library._run_compiler

    def cc1_builds_junk(command: list[str]) -> None:
        copy(command)
        if command[0] == "/opt/cc1":
            Path(command[command.index("-o") + 1]).write_bytes(b"not a library")

    monkeypatch.setattr(library, "_run_compiler", cc1_builds_junk)
    loaded = library.load(native_step.SOURCE)
    assert loaded.info.compiler == "/opt/cc2" and loaded.attempts[0].startswith("cc1: builds but cannot load")
    monkeypatch.setattr(library, "_loaded", {})  # the next process does not build with cc1 again
    assert library.load(native_step.SOURCE).info.compiler == "/opt/cc2" and [c[0] for c in calls] == ["/opt/cc1",
                                                                                                       "/opt/cc2"]


def test_where_no_compiler_builds_it_the_reasons_come_back(fresh, monkeypatch, built):
    calls = stand_in(monkeypatch, built, refuses=lambda command: True)
    loaded = library.load(native_step.SOURCE)
    assert loaded.library is None and loaded.info is None and len(calls) == 4  # each compiler, with and without OpenMP
    assert loaded.why_not.startswith("the native step failed to build or load (cc1: step.c:1: error")
    assert "cc2 without OpenMP: step.c:1: error" in loaded.why_not


def test_a_timeout_is_not_remembered_as_a_refusal(fresh, monkeypatch, built):
    stand_in(monkeypatch, built, refuses=lambda command: False)

    def slow(command):
        raise subprocess.TimeoutExpired(command, 300)

    monkeypatch.setattr(library, "_run_compiler", slow)
    assert library.load(native_step.SOURCE).library is None
    assert not list((fresh / "kernels").glob("*.failed"))


def test_a_build_without_openmp_is_keyed_apart_and_said_once(fresh, monkeypatch, built, caplog):
    stand_in(monkeypatch, built, refuses=lambda command: "-fopenmp" in command)
    caplog.set_level("WARNING", logger=library.__name__)
    loaded = library.load(native_step.SOURCE)
    assert not loaded.info.openmp and "-fopenmp" not in loaded.info.flags
    assert loaded.path.name.endswith("-native-noomp" + library._suffix())
    assert native_step.build_id() == f"{loaded.digest}-native-noomp"
    omp = library._digest(native_step.SOURCE.read_text(), "/opt/cc1", [*library.flags(), "-fopenmp"])
    assert loaded.digest != omp
    monkeypatch.setattr(library, "_loaded", {})
    assert not library.load(native_step.SOURCE).info.openmp
    (line,) = [r.getMessage() for r in caplog.records if r.name == library.__name__]
    assert "step.c built without OpenMP: the step runs on one thread" in line


# --- the command line -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ["verify-cost", "bench"])
def test_isa_sets_the_variable_for_the_process_and_its_lane_workers(monkeypatch, command):
    from specviz import cli

    monkeypatch.setenv(library.ISA_VARIABLE, "native")  # restored after the test
    seen = []
    monkeypatch.setitem(cli.COMMANDS, command, lambda args: seen.append(os.environ[library.ISA_VARIABLE]) or 0)
    assert cli.main([command, "--isa", "avx2"]) == 0 and seen == ["avx2"]
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args([command, "--isa", "sse"])
