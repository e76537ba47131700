"""The pool counted by what options read of it: how many nodes of each class and fabric have so many cards
and so many free, and how many have so much RAM. Options are made from these counts, in the number of
kinds of node (a few hundred in a pool of 100,000) rather than in the pool."""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from operator import attrgetter
from typing import TypeAlias

from planner.constants import HOST_SHARE, card_budget_gb
from planner.model import PoolNode
from planner.platform import Graphs, graphs_of, worst

CardKey: TypeAlias = tuple[str, int, int, int]
"""Card class, card size, cards and free cards: what a one-node layout reads of a node."""
FabricKey: TypeAlias = tuple[str, int, str, int, int]
"""Card class, card size, fabric, cards and free cards: what a layout over one fabric's nodes reads."""
GroupKey: TypeAlias = tuple[str, int, str, int, int, str]
"""A ``FabricKey`` and what the node's graphs take (``planner.platform.Graphs``): what a group counts."""
HostKey: TypeAlias = tuple[int, int, int]
"""Whether a node has cards (the sign of its count: -1, 0, 1), its RAM and its free RAM, in GiB: what a
CPU layout reads."""


@dataclass(slots=True)
class FabricGroup:
    """One card class's nodes on one fabric, as counts: how many nodes have each (cards, free cards)."""

    name: str
    cards: dict[tuple[int, int], int] = field(default_factory=dict)
    _takers: dict[int, tuple[int, int]] = field(default_factory=dict, compare=False, repr=False)
    kept: dict[int, object] = field(default_factory=dict, compare=False, repr=False)
    """What the planner worked out from these counts, by what it was for; emptied when they change."""

    def takers(self, width: int) -> tuple[int, int]:
        """How many nodes have ``width`` cards, and how many of those have them free now."""
        got = self._takers.get(width)
        if got is None:
            got = self._takers[width] = _takers(self.cards, width)
        return got


@dataclass(slots=True)
class Group:
    """The GPU nodes of one card class, by fabric (in order of name), with like nodes counted together:
    what ``ClassPool`` says, in the size of the kinds of node rather than of the pool. Options are made
    from these."""

    gpu_class: str
    mem_gb: int
    max_gpus: int = 0
    fabrics: list[FabricGroup] = field(default_factory=list)
    cards: dict[tuple[int, int], int] = field(default_factory=dict)
    """Every fabric's counts together."""
    platforms: dict[str, int] = field(default_factory=dict)
    """How many of the class's nodes have graphs of each kind (``planner.platform.Graphs``)."""
    _takers: dict[int, tuple[int, int]] = field(default_factory=dict, compare=False, repr=False)
    kept: dict[int, object] = field(default_factory=dict, compare=False, repr=False)
    """What the planner worked out from the class's counts, by what it was for; emptied when they change."""

    @property
    def budget_gb(self) -> float:
        return card_budget_gb(self.mem_gb)

    @property
    def graphs(self) -> Graphs:
        """What vLLM's graphs take on the class's cards: the most any of its nodes' take, as any node of
        the class may be chosen for its options (``planner.platform``)."""
        return worst(self.platforms)

    def takers(self, width: int) -> tuple[int, int]:
        """How many of the class's nodes have ``width`` cards, and how many of those have them free now."""
        got = self._takers.get(width)
        if got is None:
            got = self._takers[width] = _takers(self.cards, width)
        return got


def _takers(cards: dict[tuple[int, int], int], width: int) -> tuple[int, int]:
    hosts = free = 0
    for (gpus, free_gpus), count in cards.items():
        if gpus >= width:
            hosts += count
            if free_gpus >= width:
                free += count
    return hosts, free


@dataclass(frozen=True, slots=True)
class HostPool:
    """The nodes' RAM for CPU options: how many nodes have each size, and the most RAM any node could
    give a replica now (the lesser of its share of RAM and its free RAM)."""

    sizes: dict[int, int]
    best_free: float
    bare: dict[int, int] = field(default_factory=dict)
    """Of those, the nodes without cards: how many have each size (a CPU replica goes to one first)."""
    _shares: list[float] = field(init=False, repr=False, compare=False)
    """Each size's share of RAM a replica may take, largest first, negated (for ``bisect``)."""
    _hosts: list[int] = field(init=False, repr=False, compare=False)
    """How many nodes have at least each of those shares."""
    _bare_share: float = field(init=False, repr=False, compare=False)
    """The largest share of a node without cards (0 if none)."""

    def __post_init__(self) -> None:
        by_share = sorted(((m * HOST_SHARE, count) for m, count in self.sizes.items() if m > 0), reverse=True)
        object.__setattr__(self, "_shares", [-share for share, _ in by_share])
        object.__setattr__(self, "_hosts", list(accumulate(count for _, count in by_share)))
        object.__setattr__(self, "_bare_share", max((m for m in self.bare if m > 0), default=0) * HOST_SHARE)

    def holding(self, need_gb: float) -> tuple[int, float]:
        """How many nodes' share of RAM holds ``need_gb``, and the share a replica is counted against (0 if
        none holds it): the largest of a node without cards where one holds it, as such a node is taken
        first (``planner.decide.choose_nodes``), else the largest of any."""
        k = bisect_right(self._shares, -need_gb)
        if not k:
            return 0, 0.0
        return self._hosts[k - 1], self._bare_share if self._bare_share >= need_gb else -self._shares[0]

    @staticmethod
    def of(nodes: Sequence[PoolNode]) -> HostPool:
        bare = Counter(n.host_mem_gb for n in nodes if n.gpus <= 0)
        mem = list(map(attrgetter("host_mem_gb"), nodes))
        shares = map(HOST_SHARE.__rmul__, mem)
        best = max(map(min, shares, map(attrgetter("host_free_gb"), nodes)), default=-math.inf)
        if best <= 0:
            # only nodes with RAM count; one without gives at most 0, so past 0 the best is theirs anyway
            best = max(
                (min(n.host_mem_gb * HOST_SHARE, n.host_free_gb) for n in nodes if n.host_mem_gb > 0),
                default=-math.inf,
            )
        return HostPool(dict(Counter(mem)), best, dict(bare))


_NAME = attrgetter("name")
CARDS = attrgetter("gpu_class", "gpu_mem_gb", "gpus", "free_gpus")
FABRIC_CARDS = attrgetter("gpu_class", "gpu_mem_gb", "fabric", "gpus", "free_gpus")
GPUS, HOST_MEM, HOST_FREE = attrgetter("gpus"), attrgetter("host_mem_gb"), attrgetter("host_free_gb")


def counted_groups(
    counts: Mapping[GroupKey, int],
) -> tuple[dict[tuple[str, int], Group], dict[tuple[str, int, str], FabricGroup]]:
    """The classes ``grouped`` makes, by (class, card size), and their fabrics by (class, card size,
    fabric), from how many nodes there are of each ``GroupKey``."""
    by: dict[tuple[str, int], Group] = {}
    fabrics: dict[tuple[str, int, str], FabricGroup] = {}
    for (gpu_class, mem_gb, fabric, gpus, free_gpus, graphs), count in counts.items():
        if not gpu_class or gpus <= 0 or mem_gb <= 0:
            continue
        key = (gpu_class, mem_gb)
        c = by.get(key)
        if c is None:
            c = by[key] = Group(gpu_class=gpu_class, mem_gb=mem_gb)
        c.max_gpus = max(c.max_gpus, gpus)
        fab = fabrics.get((*key, fabric))
        if fab is None:
            fab = fabrics[(*key, fabric)] = FabricGroup(name=fabric)
            c.fabrics.append(fab)
        fab.cards[(gpus, free_gpus)] = fab.cards.get((gpus, free_gpus), 0) + count
        c.cards[(gpus, free_gpus)] = c.cards.get((gpus, free_gpus), 0) + count
        c.platforms[graphs] = c.platforms.get(graphs, 0) + count
    for c in by.values():
        c.fabrics.sort(key=_NAME)
    return by, fabrics


def grouped_key(n: PoolNode) -> GroupKey | None:
    """What ``grouped`` counts a node by (class, card size, fabric, cards, free cards, what its graphs
    take); None for a node it leaves out: no class, no cards, or cards of no size."""
    if not n.gpu_class or n.gpus <= 0 or n.gpu_mem_gb <= 0:
        return None
    return (n.gpu_class, n.gpu_mem_gb, n.fabric, n.gpus, n.free_gpus, graphs_of(n.gpu_vendor, n.gpu_driver))


def ram_room(n: PoolNode) -> float:
    """What RAM ``n`` could give a CPU replica now: the lesser of its share and what is free."""
    return min(n.host_mem_gb * HOST_SHARE, n.host_free_gb)


def tally(g: Group, f: FabricGroup, cards: tuple[int, int], d: int, graphs: str = "current") -> None:
    """Count ``d`` more nodes (fewer, if negative) with ``cards`` and ``graphs`` in class ``g``, on its
    fabric ``f``."""
    for counts in (g.cards, f.cards):
        c = counts.get(cards, 0) + d
        if c:
            counts[cards] = c
        else:
            del counts[cards]
    p = g.platforms.get(graphs, 0) + d
    if p:
        g.platforms[graphs] = p
    else:
        del g.platforms[graphs]
    g._takers.clear()
    f._takers.clear()
    g.kept.clear()
    f.kept.clear()
    if d > 0:
        g.max_gpus = max(g.max_gpus, cards[0])
    elif cards[0] == g.max_gpus and not any(gpus == cards[0] for gpus, _ in g.cards):
        g.max_gpus = max((gpus for gpus, _ in g.cards), default=0)


def fabric_in(g: Group, name: str) -> tuple[int, bool]:
    """Where fabric ``name`` is in ``g.fabrics`` (kept in order of name), and whether it is there."""
    i = bisect_left(g.fabrics, name, key=_NAME)
    return i, i < len(g.fabrics) and g.fabrics[i].name == name
