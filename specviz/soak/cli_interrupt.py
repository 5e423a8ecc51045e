"""Ctrl-C on ``specviz generate`` at a random moment of a run: it must stop within seconds, print what it
produced with the stats so far (no traceback), exit 130 and leave no process behind."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass

import psutil

from .resources import live_children

PROMPT = "Write a long story about a cat who learns to sail."


def unavailable_reason() -> str | None:
    if os.name == "nt":
        return "Ctrl-C is sent as SIGINT: on Windows a console's CTRL_C_EVENT reaches every process in it"
    return None


@dataclass
class InterruptResult:
    method: str
    at_s: float
    returncode: int
    seconds_to_exit: float
    printed_stats: bool
    traceback: bool
    children_left: int

    @property
    def clean(self) -> bool:
        return self.returncode == 130 and self.printed_stats and not self.traceback and not self.children_left

    def as_dict(self) -> dict:
        return {**asdict(self), "clean": self.clean}


def _restore_sigint() -> None:
    """A child of a non-interactive shell inherits SIGINT ignored; a terminal's Ctrl-C is what we imitate."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt_generate(method: str, at_s: float, max_new_tokens: int = 2000) -> InterruptResult:
    """Start ``specviz generate`` and send SIGINT ``at_s`` seconds after its first token is printed."""
    command = [sys.executable, "-m", "specviz.cli", "generate", "--method", method,
               "--max-new-tokens", str(max_new_tokens), "--prompt", PROMPT]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_restore_sigint)
    first = process.stdout.read(1)  # the first byte of generated text: the run is under way
    time.sleep(at_s)
    descendants = [c.pid for c in live_children(psutil.Process(process.pid))]
    sent = time.perf_counter()
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    seconds = time.perf_counter() - sent
    time.sleep(0.5)
    left = [pid for pid in descendants if psutil.pid_exists(pid)
            and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    text = (first + out).decode(errors="replace")
    return InterruptResult(method, round(at_s, 2), process.returncode, round(seconds, 2),
                           "interrupted:" in text and "tok/s" in text,
                           "Traceback" in err.decode(errors="replace"), len(left))


def soak_interrupts(methods: tuple[str, ...] = ("ar", "ssd"), each: int = 1, seed: int = 0) -> list[InterruptResult]:
    rng = random.Random(seed)
    return [interrupt_generate(method, rng.uniform(0.5, 4.0)) for method in methods for _ in range(each)]
