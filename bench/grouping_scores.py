"""How well predicted groups (signatures) recover true groups (planted modes, Loghub events).

* grouping accuracy (GA), as the Loghub benchmark defines it (Zhu et al., ICSE-SEIP 2019; He et
  al., "Loghub", ISSRE 2023): the fraction of messages whose predicted group holds exactly the
  messages of their true group, as a set. One stray message spoils its whole true group.
* purity: the messages in the majority true group of their predicted group, over all messages
  (1.0: no predicted group mixes two true groups; merging everything into one group scores low).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence


def grouping_accuracy(predicted: Sequence[Hashable], truth: Sequence[Hashable]) -> float:
    if len(predicted) != len(truth):
        raise ValueError("one prediction per message")
    by_predicted: dict[Hashable, set[int]] = defaultdict(set)
    by_truth: dict[Hashable, set[int]] = defaultdict(set)
    for i, (p, t) in enumerate(zip(predicted, truth, strict=True)):
        by_predicted[p].add(i)
        by_truth[t].add(i)
    correct = 0
    for members in by_predicted.values():
        labels = {truth[i] for i in members}
        if len(labels) == 1 and by_truth[next(iter(labels))] == members:
            correct += len(members)
    return correct / max(len(truth), 1)


def purity(predicted: Sequence[Hashable], truth: Sequence[Hashable]) -> float:
    by_predicted: dict[Hashable, Counter[Hashable]] = defaultdict(Counter)
    for p, t in zip(predicted, truth, strict=True):
        by_predicted[p][t] += 1
    return sum(c.most_common(1)[0][1] for c in by_predicted.values()) / max(len(truth), 1)
