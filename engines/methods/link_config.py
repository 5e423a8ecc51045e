"""The options every method with a client–server mode shares (:mod:`engines.client_server`)."""

from __future__ import annotations

from dataclasses import dataclass

from ..network import PROFILES, Link, link_profile
from .base import MethodConfig, require_int

NO_NETWORK = "none"


@dataclass
class LinkConfig(MethodConfig):
    """Options every method with a client–server mode shares."""

    network: str = NO_NETWORK  # none (one device) | local | base | 5g | 4g
    packet_loss: float | None = None  # overrides the profile's per-packet loss rate
    disconnect_after: int | None = None  # B: the server leaves after B new tokens (lossy); None = never
    link_seed: int = 0

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

    def link(self) -> Link:
        return Link(link_profile(self.network, self.packet_loss), seed=self.link_seed)
