"""The options every method with a client–server mode shares (:mod:`engines.programs.client_server`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from engines.methods.base import MethodConfig, require_int
from engines.network.link import PROFILES, Link, link_profile

NO_NETWORK = "none"


@dataclass
class LinkConfig(MethodConfig):
    """Options every method with a client–server mode shares."""

    network: str = field(default=NO_NETWORK, metadata={
        "choices": (NO_NETWORK, *PROFILES),
        "help": "none: one device. Otherwise a client (the drafter) and a server (the target) over a simulated "
                "link: local (free), base (9 ms ping, 50 Mbit/s), 5g, 4g (the MoA paper's profiles)."})
    packet_loss: float | None = None  # overrides the profile's per-packet loss rate
    disconnect_after: int | None = None  # B: the server leaves after B new tokens (lossy); None = never
    link_seed: int = 0

    def __post_init__(self):
        # text boxes (dashboard, notebook widgets, the CLI) send "None" or "" for "not set"
        self.packet_loss = optional_number(self.packet_loss, float)
        self.disconnect_after = optional_number(self.disconnect_after, int)

    def validate_link(self) -> None:
        names = (NO_NETWORK, *PROFILES)
        if self.network not in names:
            raise ValueError(f"network must be one of {', '.join(names)}, got {self.network!r}")
        if self.packet_loss is not None:
            if isinstance(self.packet_loss, bool) or not isinstance(self.packet_loss, (int, float)) \
                    or not 0 <= self.packet_loss < 1:
                raise ValueError(f"packet_loss must be in [0, 1), got {self.packet_loss!r}")
        if self.disconnect_after is not None:
            require_int("disconnect_after", self.disconnect_after, 1)
            if self.network == NO_NETWORK:
                raise ValueError("disconnect_after needs a client–server network (local, base, 5g or 4g), "
                                 "got network='none'")
        require_int("link_seed", self.link_seed, 0)

    @property
    def client_server(self) -> bool:
        return self.network != NO_NETWORK

    def run_labels(self) -> tuple[bool, str]:
        """(lossless, clock) for the run's start event: a disconnected client is lossy; a link adds its
        simulated seconds to the measured compute."""
        return self.disconnect_after is None, "wall+link" if self.client_server else "wall"

    def link(self) -> Link:
        return Link(link_profile(self.network, self.packet_loss), seed=self.link_seed)


def optional_number(value, kind: type):
    """``None``, ``""`` and ``"none"`` mean not set; a number given as text becomes ``kind``; anything else
    is left for ``validate`` to refuse with its message."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    if isinstance(value, str):
        try:
            return kind(value.strip())
        except ValueError:
            return value
    return value
