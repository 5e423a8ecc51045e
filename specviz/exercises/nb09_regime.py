"""Notebook 09's exercises: which method wins where, and which hardware number decides it.

Both expected answers are computed here from the reader's own measured terms and the projection, so they
follow the run: a different prompt or machine changes the right answer, never the check.
"""

from __future__ import annotations

from ..regime.hardware import Hardware
from ..regime.projection import MachineTerms, projected_speedup, projection_table, winners
from .checks import check_choice
from .predictions import reveal

LEVERS = ("bandwidth", "compute", "step_overhead", "link_latency")


def phone_winner(terms: MachineTerms, machines: list[Hardware], phone: str) -> tuple[str, float]:
    """The method the projection puts first on the machine named ``phone``, and its speedup."""
    table = projection_table(terms, machines)
    if phone not in next(iter(table.values())):
        raise ValueError(f"phone must name one of the machines, got {phone!r}")
    return winners(table)[phone]


def reveal_phone_winner(terms: MachineTerms, machines: list[Hardware], phone: str) -> bool | None:
    """Compare the prediction 'phone winner' with the projected map."""
    label, speedup = phone_winner(terms, machines, phone)
    return reveal("phone winner", label, explanation=(
        f"On '{phone}' the projection puts {label} first at {speedup:.2f}× (a projection, not a measurement)."))


def lever(terms: MachineTerms, machine: Hardware, label: str) -> str:
    """Which of :data:`LEVERS`, made twice as good (bandwidth, compute doubled; overhead, latency halved),
    raises ``label``'s projected speedup on ``machine`` the most."""
    method = terms.method(label)

    def better(name: str) -> Hardware:
        value = getattr(machine, name)
        return machine.with_numbers(**{name: value * 2 if name in ("bandwidth", "compute") else value / 2})

    return max(LEVERS, key=lambda name: projected_speedup(terms, method, better(name)))


def check_lever(answer: str | None, terms: MachineTerms, machine: Hardware, label: str) -> bool | None:
    """The reader names the hardware number that moves ``label``'s projected speedup on ``machine`` most."""
    if answer is not None and answer not in LEVERS:
        print(f"✗ Choose one of {LEVERS}.")
        return False
    return check_choice(answer, lever(terms, machine, label), explanation=(
        "A speedup is a ratio: a number that speeds up ar's step and the method's round alike moves nothing; "
        "the lever is the cost the method pays more of than ar does."),
        hint=("Look at what the method's round has that ar's step has not: more rows per forward (compute), "
              "more forwards (overhead), lane messages (latency)."))
