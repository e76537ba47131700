"""The pool indexed by what a plan reads of it, kept up to date node by node.

A plan reads the pool three ways: how many nodes of each kind there are (``options``), the nodes that can
take a layout now, best fit first (``choose_nodes``), and the nodes nearest to having it free
(``nominate``, ``wait_for``). Over a list of nodes each is a pass over the pool, which at 100,000 nodes was
most of a plan. ``PoolIndex`` keeps the counts ``options`` reads, and the ids of each kind of node in
order, so that each answer comes from the few kinds that match, merged by id and taken as far as it is
read: a plan costs what the kinds of node cost, not the nodes. A node that comes, changes or goes changes
a few counts and lists.

``PoolView`` is an index with a few nodes seen otherwise: the cards a plan has just taken, a job's own
nomination counted as free, the cards held for others counted back. It answers as the index does, less
the nodes it overrides, merged with those nodes as it sees them, so it costs what it overrides.

Node ids are unique in a pool: a node put again replaces the one of its id, in its place.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, bisect_right, insort
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, compress
from operator import attrgetter
from typing import Any, TypeAlias, TypeVar

from planner.constants import HOST_SHARE, card_budget_gb
from planner.model import Option, PoolNode

CardKey: TypeAlias = tuple[str, int, int, int]
"""Card class, card size, cards and free cards: what a one-node layout reads of a node."""
FabricKey: TypeAlias = tuple[str, int, str, int, int]
"""Card class, card size, fabric, cards and free cards: what a layout over one fabric's nodes reads."""
HostKey: TypeAlias = tuple[int, int, int]
"""Whether a node has cards (the sign of its count: -1, 0, 1), its RAM and its free RAM, in GiB: what a
CPU layout reads."""


# --- the counts options are made from ----------------------------------------------------------------------


@dataclass(slots=True)
class FabricGroup:
    """One card class's nodes on one fabric, as counts: how many nodes have each (cards, free cards)."""

    name: str
    cards: dict[tuple[int, int], int] = field(default_factory=dict)
    _takers: dict[int, tuple[int, int]] = field(default_factory=dict, compare=False, repr=False)

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
    _takers: dict[int, tuple[int, int]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def budget_gb(self) -> float:
        return card_budget_gb(self.mem_gb)

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
    _shares: list[float] = field(init=False, repr=False, compare=False)
    """Each size's share of RAM a replica may take, largest first, negated (for ``bisect``)."""
    _hosts: list[int] = field(init=False, repr=False, compare=False)
    """How many nodes have at least each of those shares."""

    def __post_init__(self) -> None:
        by_share = sorted(((m * HOST_SHARE, count) for m, count in self.sizes.items() if m > 0), reverse=True)
        object.__setattr__(self, "_shares", [-share for share, _ in by_share])
        object.__setattr__(self, "_hosts", list(accumulate(count for _, count in by_share)))

    def holding(self, need_gb: float) -> tuple[int, float]:
        """How many nodes' share of RAM holds ``need_gb``, and the largest such share (0 if none)."""
        k = bisect_right(self._shares, -need_gb)
        return (self._hosts[k - 1], -self._shares[0]) if k else (0, 0.0)

    @staticmethod
    def of(nodes: Sequence[PoolNode]) -> HostPool:
        mem = list(map(attrgetter("host_mem_gb"), nodes))
        shares = map(HOST_SHARE.__rmul__, mem)
        best = max(map(min, shares, map(attrgetter("host_free_gb"), nodes)), default=-math.inf)
        if best <= 0:
            # only nodes with RAM count; one without gives at most 0, so past 0 the best is theirs anyway
            best = max(
                (min(n.host_mem_gb * HOST_SHARE, n.host_free_gb) for n in nodes if n.host_mem_gb > 0),
                default=-math.inf,
            )
        return HostPool(dict(Counter(mem)), best)


_NAME = attrgetter("name")
_CARDS = attrgetter("gpu_class", "gpu_mem_gb", "gpus", "free_gpus")
_FABRIC_CARDS = attrgetter("gpu_class", "gpu_mem_gb", "fabric", "gpus", "free_gpus")
_GPUS, _HOST_MEM, _HOST_FREE = attrgetter("gpus"), attrgetter("host_mem_gb"), attrgetter("host_free_gb")


def counted_groups(
    counts: Mapping[FabricKey, int],
) -> tuple[dict[tuple[str, int], Group], dict[tuple[str, int, str], FabricGroup]]:
    """The classes ``grouped`` makes, by (class, card size), and their fabrics by (class, card size,
    fabric), from how many nodes there are of each ``FabricKey``."""
    by: dict[tuple[str, int], Group] = {}
    fabrics: dict[tuple[str, int, str], FabricGroup] = {}
    for (gpu_class, mem_gb, fabric, gpus, free_gpus), count in counts.items():
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
    for c in by.values():
        c.fabrics.sort(key=_NAME)
    return by, fabrics


def grouped_key(n: PoolNode) -> tuple[str, int, str, int, int] | None:
    """What ``grouped`` counts a node by (class, card size, fabric, cards, free cards); None for a node it
    leaves out: no class, no cards, or cards of no size."""
    if not n.gpu_class or n.gpus <= 0 or n.gpu_mem_gb <= 0:
        return None
    return (n.gpu_class, n.gpu_mem_gb, n.fabric, n.gpus, n.free_gpus)


def _room(n: PoolNode) -> float:
    """What RAM ``n`` could give a CPU replica now: the lesser of its share and what is free."""
    return min(n.host_mem_gb * HOST_SHARE, n.host_free_gb)


def _tally(g: Group, f: FabricGroup, cards: tuple[int, int], d: int) -> None:
    """Count ``d`` more nodes (fewer, if negative) with ``cards`` in class ``g``, on its fabric ``f``."""
    for counts in (g.cards, f.cards):
        c = counts.get(cards, 0) + d
        if c:
            counts[cards] = c
        else:
            del counts[cards]
    g._takers.clear()
    f._takers.clear()
    if d > 0:
        g.max_gpus = max(g.max_gpus, cards[0])
    elif cards[0] == g.max_gpus and not any(gpus == cards[0] for gpus, _ in g.cards):
        g.max_gpus = max((gpus for gpus, _ in g.cards), default=0)


def _fabric_in(g: Group, name: str) -> tuple[int, bool]:
    """Where fabric ``name`` is in ``g.fabrics`` (kept in order of name), and whether it is there."""
    i = bisect_left(g.fabrics, name, key=_NAME)
    return i, i < len(g.fabrics) and g.fabrics[i].name == name


# --- what the node choice reads ----------------------------------------------------------------------------


def takes(o: Option, n: PoolNode) -> bool:
    """Whether ``n`` could ever hold its share of ``o``, free now or not."""
    if o.cpu:
        return n.host_mem_gb * HOST_SHARE >= o.need_gb
    return (
        n.gpu_class == o.gpu_class
        and card_budget_gb(n.gpu_mem_gb) == o.have_gb
        and n.gpus >= o.gpus_per_node
        and (o.nodes <= 1 or n.fabric == o.fabric)
    )


def lack(o: Option, n: PoolNode) -> int:
    """What ``n`` lacks now to take its share of ``o``: cards, or whole GiB of RAM for the CPU."""
    if o.cpu:
        return _ram_lack(o.need_gb, n.host_free_gb)
    return max(0, o.gpus_per_node - n.free_gpus)


def _ram_lack(need_gb: float, free_gb: int) -> int:
    return max(0, int(-(-(need_gb - free_gb) // 1)))


def cpu_rank(n: PoolNode) -> tuple[bool, int, str]:
    """The order a CPU replica prefers nodes in, smallest first: a node without cards, the least RAM free
    that holds it; failing one, the GPU node with the most RAM free; then by id."""
    return (n.gpus > 0, -n.host_free_gb if n.gpus else n.host_free_gb, n.id)


def _sign(gpus: int) -> int:
    return (gpus > 0) - (gpus < 0)


def _merged(lists: Sequence[list[str]]) -> Iterable[str]:
    return lists[0] if len(lists) == 1 else heapq.merge(*lists)


_T = TypeVar("_T", str, int, float)


def _remove_from(lst: list[_T], item: _T) -> None:
    """Take ``item`` out of sorted ``lst``, which holds it."""
    del lst[bisect_left(lst, item)]


class PoolIndex:
    """Ready nodes by id (in the order they came), with the counts and ordered ids a plan reads.

    Every node is listed by its cards (``CardKey``), by its cards on its fabric (``FabricKey``) and by its
    RAM (``HostKey``), each list of ids kept sorted; the GPU nodes ``grouped`` counts are counted as it
    counts them (``groups``), and the nodes' RAM as ``HostPool.of`` does (``hosts``). Queries go through a
    ``PoolView`` (``view``); they read the lists as they stand, so a query is consumed before the index
    changes again.
    """

    __slots__ = (
        "_card_keys",
        "_cards",
        "_fabric_groups",
        "_fabric_keys",
        "_fabrics",
        "_group_list",
        "_groups",
        "_host_frees",
        "_host_sizes",
        "_hosts",
        "_nodes",
        "_room",
        "_rooms",
    )

    def __init__(self, nodes: Iterable[PoolNode] = ()) -> None:
        self._nodes: dict[str, PoolNode] = {}
        self._cards: dict[CardKey, list[str]] = {}
        self._card_keys: dict[str, set[CardKey]] = {}
        """Each card class's keys in ``_cards``: the kinds a one-node layout of that class looks at."""
        self._fabrics: dict[FabricKey, list[str]] = {}
        self._fabric_keys: dict[tuple[str, str], set[FabricKey]] = {}
        self._hosts: dict[HostKey, list[str]] = {}
        self._host_frees: dict[tuple[int, int], list[int]] = {}
        """The free RAM sizes present for each (sign of cards, RAM), in order."""
        self._host_sizes: dict[int, int] = {}
        """How many nodes have each RAM size (``HostPool.sizes``)."""
        self._room: dict[float, int] = {}
        self._rooms: list[float] = []
        """How many nodes with RAM could give a CPU replica each amount now, and those amounts in order:
        the last is ``HostPool.best_free``."""
        self._groups: dict[tuple[str, int], Group] = {}
        self._fabric_groups: dict[tuple[str, int, str], FabricGroup] = {}
        self._group_list: list[Group] | None = None
        for n in nodes:
            self._nodes[n.id] = n  # a repeated id replaces the node in its place, as ``put`` does
        if self._nodes:
            self._load()

    def _load(self) -> None:
        """List and count every node at once: what ``put`` would, node by node, with the passes in C
        where they can be."""
        nodes, ids = list(self._nodes.values()), list(self._nodes)
        fabric_keys = list(map(_FABRIC_CARDS, nodes))
        mems, frees = list(map(_HOST_MEM, nodes)), list(map(_HOST_FREE, nodes))
        signs = [(g > 0) - (g < 0) for g in map(_GPUS, nodes)]
        for lists, keys in (
            (self._cards, map(_CARDS, nodes)),
            (self._fabrics, fabric_keys),
            (self._hosts, zip(signs, mems, frees, strict=True)),
        ):
            by: defaultdict[Any, list[str]] = defaultdict(list)
            for key, node_id in zip(keys, ids, strict=True):
                by[key].append(node_id)
            for listed in by.values():
                listed.sort()
            lists.update(by)
        for ck in self._cards:
            self._card_keys.setdefault(ck[0], set()).add(ck)
        for fk in self._fabrics:
            self._fabric_keys.setdefault((fk[0], fk[2]), set()).add(fk)
        for sign, mem, free in self._hosts:
            self._host_frees.setdefault((sign, mem), []).append(free)
        for sizes in self._host_frees.values():
            sizes.sort()
        self._host_sizes = dict(Counter(mems))
        rooms = map(min, map(HOST_SHARE.__rmul__, mems), frees)
        self._room = dict(Counter(compress(rooms, map((0).__lt__, mems))))  # of the nodes with RAM
        self._rooms = sorted(self._room)
        self._groups, self._fabric_groups = counted_groups(Counter(fabric_keys))

    # --- reading ------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._nodes)

    def __iter__(self) -> Iterator[PoolNode]:
        return iter(self._nodes.values())

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._nodes

    def get(self, node_id: str) -> PoolNode | None:
        return self._nodes.get(node_id)

    def view(self, nodes: Iterable[PoolNode] = ()) -> PoolView:
        """The pool with ``nodes`` seen as given in place of the nodes of their ids (ids not in the pool
        are left out)."""
        return PoolView(self, nodes)

    def groups(self) -> list[Group]:
        """``grouped(list(self))``, kept rather than counted. Read only: the index changes these in place."""
        if self._group_list is None:
            self._group_list = [self._groups[k] for k in sorted(self._groups)]
        return self._group_list

    def hosts(self) -> HostPool:
        """``HostPool.of(list(self))``, kept rather than counted."""
        # the best over nodes with RAM is the best over all: ``HostPool.of`` falls back to it when the best
        # is not above 0, and a node without RAM gives at most 0
        return HostPool(dict(self._host_sizes), self._rooms[-1] if self._rooms else -math.inf)

    def copy(self) -> PoolIndex:
        """An index of its own over the same nodes, to change apart from this one."""
        new = PoolIndex()
        new._nodes = dict(self._nodes)
        new._cards = {k: list(v) for k, v in self._cards.items()}
        new._card_keys = {k: set(v) for k, v in self._card_keys.items()}
        new._fabrics = {k: list(v) for k, v in self._fabrics.items()}
        new._fabric_keys = {k: set(v) for k, v in self._fabric_keys.items()}
        new._hosts = {k: list(v) for k, v in self._hosts.items()}
        new._host_frees = {k: list(v) for k, v in self._host_frees.items()}
        new._host_sizes = dict(self._host_sizes)
        new._room = dict(self._room)
        new._rooms = list(self._rooms)
        for key, g in self._groups.items():
            fabrics = [FabricGroup(f.name, dict(f.cards)) for f in g.fabrics]
            new._groups[key] = Group(g.gpu_class, g.mem_gb, g.max_gpus, fabrics, dict(g.cards))
            for f in fabrics:
                new._fabric_groups[(*key, f.name)] = f
        return new

    # --- changing -----------------------------------------------------------------------------------------

    def put(self, node: PoolNode) -> None:
        """A node joins the pool, or replaces the node of its id (in its place)."""
        old = self._nodes.get(node.id)
        if old == node:
            return
        if old is not None:
            self._remove(old)
        self._nodes[node.id] = node
        self._add(node)

    def drop(self, node_id: str) -> None:
        """A node leaves the pool (nothing if it is not in it)."""
        old = self._nodes.pop(node_id, None)
        if old is not None:
            self._remove(old)

    def _add(self, n: PoolNode) -> None:
        """List and count ``n`` everywhere."""
        ck = (n.gpu_class, n.gpu_mem_gb, n.gpus, n.free_gpus)
        ids = self._cards.get(ck)
        if ids is None:
            ids = self._cards[ck] = []
            self._card_keys.setdefault(n.gpu_class, set()).add(ck)
        insort(ids, n.id)

        fk = (n.gpu_class, n.gpu_mem_gb, n.fabric, n.gpus, n.free_gpus)
        ids = self._fabrics.get(fk)
        if ids is None:
            ids = self._fabrics[fk] = []
            self._fabric_keys.setdefault((n.gpu_class, n.fabric), set()).add(fk)
        insort(ids, n.id)

        hk = (_sign(n.gpus), n.host_mem_gb, n.host_free_gb)
        ids = self._hosts.get(hk)
        if ids is None:
            ids = self._hosts[hk] = []
            insort(self._host_frees.setdefault(hk[:2], []), n.host_free_gb)
        insort(ids, n.id)

        self._host_sizes[n.host_mem_gb] = self._host_sizes.get(n.host_mem_gb, 0) + 1
        if n.host_mem_gb > 0:
            room = _room(n)
            count = self._room.get(room, 0)
            if not count:
                insort(self._rooms, room)
            self._room[room] = count + 1

        gk = grouped_key(n)
        if gk is not None:
            key = (n.gpu_class, n.gpu_mem_gb)
            g = self._groups.get(key)
            if g is None:
                g = self._groups[key] = Group(n.gpu_class, n.gpu_mem_gb)
                self._group_list = None
            f = self._fabric_groups.get((*key, n.fabric))
            if f is None:
                f = self._fabric_groups[(*key, n.fabric)] = FabricGroup(n.fabric)
                g.fabrics.insert(_fabric_in(g, n.fabric)[0], f)
            _tally(g, f, (n.gpus, n.free_gpus), 1)

    def _remove(self, n: PoolNode) -> None:
        """Unlist ``n`` everywhere, dropping what is left empty."""
        ck = (n.gpu_class, n.gpu_mem_gb, n.gpus, n.free_gpus)
        ids = self._cards[ck]
        _remove_from(ids, n.id)
        if not ids:
            del self._cards[ck]
            keys = self._card_keys[n.gpu_class]
            keys.discard(ck)
            if not keys:
                del self._card_keys[n.gpu_class]

        fk = (n.gpu_class, n.gpu_mem_gb, n.fabric, n.gpus, n.free_gpus)
        ids = self._fabrics[fk]
        _remove_from(ids, n.id)
        if not ids:
            del self._fabrics[fk]
            fkeys = self._fabric_keys[(n.gpu_class, n.fabric)]
            fkeys.discard(fk)
            if not fkeys:
                del self._fabric_keys[(n.gpu_class, n.fabric)]

        hk = (_sign(n.gpus), n.host_mem_gb, n.host_free_gb)
        ids = self._hosts[hk]
        _remove_from(ids, n.id)
        if not ids:
            del self._hosts[hk]
            frees = self._host_frees[hk[:2]]
            _remove_from(frees, n.host_free_gb)
            if not frees:
                del self._host_frees[hk[:2]]

        left = self._host_sizes[n.host_mem_gb] - 1
        if left:
            self._host_sizes[n.host_mem_gb] = left
        else:
            del self._host_sizes[n.host_mem_gb]
        if n.host_mem_gb > 0:
            room = _room(n)
            left = self._room[room] - 1
            if left:
                self._room[room] = left
            else:
                del self._room[room]
                _remove_from(self._rooms, room)

        if grouped_key(n) is not None:
            key = (n.gpu_class, n.gpu_mem_gb)
            g = self._groups[key]
            f = self._fabric_groups[(*key, n.fabric)]
            _tally(g, f, (n.gpus, n.free_gpus), -1)
            if not f.cards:
                del g.fabrics[_fabric_in(g, n.fabric)[0]]
                del self._fabric_groups[(*key, n.fabric)]
            if not g.cards:
                del self._groups[key]
                self._group_list = None

    # --- the lists a query reads --------------------------------------------------------------------------

    def _gpu_lists(self, o: Option) -> list[tuple[int, list[str]]]:
        """``(free cards, ids)`` of each kind of node that could ever take a share of GPU layout ``o``."""
        width, have = o.gpus_per_node, o.have_gb
        if o.nodes <= 1:
            keys = self._card_keys.get(o.gpu_class, ())
            return [(k[3], self._cards[k]) for k in keys if k[2] >= width and card_budget_gb(k[1]) == have]
        fkeys = self._fabric_keys.get((o.gpu_class, o.fabric), ())
        return [(k[4], self._fabrics[k]) for k in fkeys if k[3] >= width and card_budget_gb(k[1]) == have]

    def _ram_lists(self, o: Option) -> Iterator[tuple[int, int, list[int]]]:
        """``(sign of cards, RAM, free RAM sizes)`` of each RAM size that could ever hold CPU layout ``o``."""
        for (sign, mem), frees in self._host_frees.items():
            if mem * HOST_SHARE >= o.need_gb:
                yield sign, mem, frees


class PoolView:
    """A ``PoolIndex`` with some nodes seen otherwise. Iterates as the whole pool in the index's order,
    with those nodes in place of the index's; queries cost the kinds of node they read, and the nodes
    overridden."""

    __slots__ = ("index", "over")

    def __init__(self, index: PoolIndex, nodes: Iterable[PoolNode] = ()) -> None:
        self.index = index
        base = index._nodes
        self.over: dict[str, PoolNode] = {}
        """The nodes seen otherwise than the index has them, by id."""
        for n in nodes:
            if n.id in base:
                if base[n.id] == n:
                    self.over.pop(n.id, None)
                else:
                    self.over[n.id] = n

    def __len__(self) -> int:
        return len(self.index)

    def __iter__(self) -> Iterator[PoolNode]:
        over = self.over
        if not over:
            return iter(self.index)
        return (over.get(i, n) for i, n in self.index._nodes.items())

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.index

    def get(self, node_id: str) -> PoolNode | None:
        n = self.over.get(node_id)
        return n if n is not None else self.index.get(node_id)

    def with_nodes(self, nodes: Iterable[PoolNode]) -> PoolView:
        """This view with ``nodes`` seen as given, too."""
        return PoolView(self.index, [*self.over.values(), *nodes])

    # --- options ------------------------------------------------------------------------------------------

    def groups(self) -> list[Group]:
        """``grouped(list(self))``: the index's, with the classes the overrides change copied and changed."""
        base = self.index.groups()
        delta: Counter[tuple[str, int, str, int, int]] = Counter()
        for i, n in self.over.items():
            was, now = grouped_key(self.index._nodes[i]), grouped_key(n)
            if was != now:
                if was is not None:
                    delta[was] -= 1
                if now is not None:
                    delta[now] += 1
        if not any(delta.values()):
            return base
        copies: dict[tuple[str, int], Group] = {}
        fresh: set[tuple[str, int, str]] = set()
        for (gpu_class, mem_gb, fabric, gpus, free), d in delta.items():
            if not d:
                continue
            g = copies.get((gpu_class, mem_gb))
            if g is None:
                old = self.index._groups.get((gpu_class, mem_gb))
                g = Group(gpu_class, mem_gb)
                if old is not None:  # the fabrics are shared until one is changed
                    g.max_gpus, g.fabrics, g.cards = old.max_gpus, list(old.fabrics), dict(old.cards)
                copies[(gpu_class, mem_gb)] = g
            at, there = _fabric_in(g, fabric)
            if not there:
                g.fabrics.insert(at, FabricGroup(fabric))
            elif (gpu_class, mem_gb, fabric) not in fresh:
                g.fabrics[at] = FabricGroup(fabric, dict(g.fabrics[at].cards))
            fresh.add((gpu_class, mem_gb, fabric))
            _tally(g, g.fabrics[at], (gpus, free), d)
        by = {(g.gpu_class, g.mem_gb): g for g in base}
        for key, g in copies.items():
            g.fabrics = [f for f in g.fabrics if f.cards]
            by[key] = g
        return [by[k] for k in sorted(by) if by[k].cards]

    def hosts(self) -> HostPool:
        """``HostPool.of(list(self))``: the index's, less the nodes overridden, with the overrides."""
        index = self.index
        if not self.over:
            return index.hosts()
        sizes = dict(index._host_sizes)
        gone: Counter[float] = Counter()
        best = -math.inf
        for i, n in self.over.items():
            was = index._nodes[i]
            sizes[was.host_mem_gb] -= 1
            if not sizes[was.host_mem_gb]:
                del sizes[was.host_mem_gb]
            sizes[n.host_mem_gb] = sizes.get(n.host_mem_gb, 0) + 1
            if was.host_mem_gb > 0:
                gone[_room(was)] += 1
            if n.host_mem_gb > 0:
                best = max(best, _room(n))
        for room in reversed(index._rooms):
            if index._room[room] > gone[room]:
                best = max(room, best)
                break
        return HostPool(sizes, best)

    # --- nodes for a layout -------------------------------------------------------------------------------

    def fitting(self, o: Option) -> Iterator[PoolNode]:
        """The nodes that can take a share of GPU layout ``o`` now, best fit first: the fewest cards free,
        then by id."""
        width, over = o.gpus_per_node, self.over
        by_free: dict[int, list[list[str]]] = {}
        for free, ids in self.index._gpu_lists(o):
            if free >= width:
                by_free.setdefault(free, []).append(ids)
        base = ((free, i) for free in sorted(by_free) for i in _merged(by_free[free]) if i not in over)
        extra = sorted((n.free_gpus, n.id) for n in over.values() if takes(o, n) and lack(o, n) == 0)
        return self._nodes_of(heapq.merge(base, extra) if extra else base)

    def nearest(self, o: Option) -> Iterator[tuple[int, PoolNode]]:
        """``(lack, node)`` for every node that could ever take a share of ``o``, nearest to free first:
        the least lacking, then by id."""
        over = self.over
        by_lack: dict[int, list[list[str]]] = {}
        if o.cpu:
            index = self.index
            for sign, mem, frees in index._ram_lists(o):
                for free in frees:
                    by_lack.setdefault(_ram_lack(o.need_gb, free), []).append(index._hosts[(sign, mem, free)])
        else:
            for free, ids in self.index._gpu_lists(o):
                by_lack.setdefault(max(0, o.gpus_per_node - free), []).append(ids)
        base = ((k, i) for k in sorted(by_lack) for i in _merged(by_lack[k]) if i not in over)
        extra = sorted((lack(o, n), n.id) for n in over.values() if takes(o, n))
        node = self._node
        for k, i in heapq.merge(base, extra) if extra else base:
            yield k, node(i)

    def takers(self, o: Option) -> int:
        """How many nodes could ever take a share of ``o``."""
        index = self.index
        if o.cpu:
            count = sum(len(index._hosts[(s, m, f)]) for s, m, frees in index._ram_lists(o) for f in frees)
        else:
            count = sum(len(ids) for _, ids in index._gpu_lists(o))
        for i, n in self.over.items():
            count += takes(o, n) - takes(o, index._nodes[i])
        return count

    def cpu_fit(self, o: Option) -> PoolNode | None:
        """The node to run CPU layout ``o`` on now (``cpu_rank``'s first), or None if none has the RAM free."""
        index, over = self.index, self.over
        found = [n for n in over.values() if takes(o, n) and lack(o, n) == 0]
        for sign, mem, frees in index._ram_lists(o):
            start = bisect_left(frees, o.need_gb)  # those with at least its need free lack nothing
            # without cards, the least RAM free first; with them (or fewer than none), the most
            order = range(start, len(frees)) if sign == 0 else range(len(frees) - 1, start - 1, -1)
            for j in order:
                first = next((i for i in index._hosts[(sign, mem, frees[j])] if i not in over), None)
                if first is not None:
                    found.append(index._nodes[first])
                    break
        return min(found, key=cpu_rank) if found else None

    def _nodes_of(self, keyed: Iterable[tuple[int, str]]) -> Iterator[PoolNode]:
        node = self._node
        for _, i in keyed:
            yield node(i)

    def _node(self, node_id: str) -> PoolNode:
        """The node of an id the index lists, as this view sees it."""
        n = self.over.get(node_id)
        return n if n is not None else self.index._nodes[node_id]


Nodes: TypeAlias = Sequence[PoolNode] | PoolIndex | PoolView
"""What the planner takes as a pool: a list of nodes, an index of them, or a view of one."""


def pool_view(nodes: Nodes) -> PoolView:
    """``nodes`` as a view: as it is, of an index as it is, or of a list indexed first (a pass over it)."""
    if isinstance(nodes, PoolView):
        return nodes
    if isinstance(nodes, PoolIndex):
        return PoolView(nodes)
    return PoolView(PoolIndex(nodes))
