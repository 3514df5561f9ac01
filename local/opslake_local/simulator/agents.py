"""The simulated agents: an API key each (its name is the agent's identity) and a seeded
probability per planted mistake."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from opslake_local.simulator.modes import MODES


class HasBaseRate(Protocol):
    """A planted mistake as a profile needs it (any world's modes: its default rate)."""

    @property
    def base_rate(self) -> float: ...


@dataclass(frozen=True)
class SimAgent:
    """One simulated agent: its API key (its name is the agent's identity) and mistake rates."""

    agent_id: str
    api_key: str
    mistakes: Mapping[str, float]
    rescue_rate: float = 0.7
    overseer_rate: float = 0.3
    log_rate: float = 0.3


def mistake_profile(
    seed: int, index: int, modes: Mapping[str, HasBaseRate] = MODES, *, salt: str = "profile"
) -> dict[str, float]:
    """Agent ``index``'s probability per mode: the mode's base rate × a factor from 0.5 to 1.5
    (``modes``: the staffing mistakes unless another world's are given, drawn with its own ``salt``)."""
    rng = random.Random(f"{salt}:{seed}:{index}")
    return {name: round(min(0.9, mode.base_rate * rng.uniform(0.5, 1.5)), 3) for name, mode in modes.items()}


def create_agents(
    create_key: Callable[[str], Any],
    count: int = 8,
    *,
    seed: int = 7,
    prefix: str = "sim-agent",
    modes: Mapping[str, HasBaseRate] = MODES,
    salt: str = "profile",
) -> list[SimAgent]:
    """``count`` agents named ``<prefix>-01``…, each with an API key from ``create_key(name)``
    (e.g. ``LocalStack.create_api_key``: anything with a ``value``) and a seeded mistake profile
    over ``modes`` (see :func:`mistake_profile`)."""
    if not 1 <= count <= 99:
        raise ValueError(f"count must be from 1 to 99, got {count}")
    agents = []
    for index in range(count):
        name = f"{prefix}-{index + 1:02d}"
        profile = mistake_profile(seed, index, modes, salt=salt)
        agents.append(SimAgent(name, str(create_key(name).value), profile))
    return agents
