"""Everything random about a task, drawn before it runs: two simulators with the same seed plan
identical tasks and roll identical mistakes whatever the server answers."""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass

from opslake.datasets.staffing import CITIES, ROLES
from opslake_local.simulator.agents import SimAgent
from opslake_local.simulator.modes import MODES, QUESTIONS, TASK_CLASSES, Question

_TASK_WEIGHTS = (0.4, 0.4, 0.2)


@dataclass(frozen=True)
class TaskPlan:
    """Everything random about one task, drawn before it runs."""

    task_class: str
    role: str
    city: str
    state: str
    count: int
    need: str
    question: Question
    guess: str
    rolls: Mapping[str, bool]  # mode → whether the agent makes that mistake (if nothing stops it)
    guessed_id: str
    rescue: bool
    overseer: bool
    log: bool
    timeout_rescued: bool
    durations: tuple[float, ...]


def plan_task(rng: random.Random, agent: SimAgent) -> TaskPlan:
    """Draw one task; the number of draws never depends on the outcome (same seed, same plans)."""
    task_class = rng.choices(TASK_CLASSES, weights=_TASK_WEIGHTS)[0]
    role = rng.choice(ROLES)
    city, state = rng.choice(CITIES)
    skills = rng.sample(role.skills, 2)
    cert = rng.choice(role.certifications)
    question = rng.choice(QUESTIONS)
    guess = rng.choice(question.guesses)
    rolls = {name: rng.random() < agent.mistakes.get(name, 0.0) for name in MODES}
    number = rng.randint(0, 2)
    guessed_id = (f"W{rng.randint(90000, 99999)}", f"w-{rng.randint(100, 9999)}", str(rng.randint(1, 3000)))[
        number
    ]
    return TaskPlan(
        task_class=task_class,
        role=role.name,
        city=city,
        state=state,
        count=rng.randint(2, 4),
        need=f"{skills[0]}, {skills[1]}" + (f", {cert}" if rng.random() < 0.5 else ""),
        question=question,
        guess=guess,
        rolls=rolls,
        guessed_id=guessed_id,
        rescue=rng.random() < agent.rescue_rate,
        overseer=rng.random() < agent.overseer_rate,
        log=rng.random() < agent.log_rate,
        timeout_rescued=rng.random() < 0.6,
        durations=tuple(round(rng.lognormvariate(6, 0.6), 1) for _ in range(4)),
    )
