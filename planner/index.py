"""The pool indexed by what a plan reads of it, kept up to date node by node.

A plan reads the pool three ways: how many nodes of each kind there are (``options``), the nodes that can
take a layout now, best fit first (``choose_nodes``), and the nodes nearest to having it free
(``nominate``, ``wait_for``). Over a list of nodes each is a pass over the pool, which at 100,000 nodes was
most of a plan. ``PoolIndex`` keeps the counts ``options`` reads, and the ids of each kind of node in
order, so that each answer comes from the few kinds that match, merged by id and taken as far as it is
read: a plan costs what the kinds of node cost, not the nodes. A node that comes, changes or goes changes
a few counts and lists.

``PoolView`` (``planner.view``) is an index with a few nodes seen otherwise: the cards a plan has just
taken, a job's own nomination counted as free, the cards held for others counted back. It answers as the
index does, less the nodes it overrides, merged with those nodes as it sees them, so it costs what it
overrides. The index owns its nodes, counts and lists; a view reads them through the index's public
reading methods (``nodes``, ``group``, ``rooms``, ``gpu_lists``, ``ram_lists``, ``host_ids``) and changes
none of them. The counts options read are ``planner.groups``'.

Node ids are unique in a pool: a node put again replaces the one of its id, in its place.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import compress
from typing import Any, TypeVar

from planner.constants import HOST_SHARE, card_budget_gb
from planner.groups import (
    CARDS,
    FABRIC_CARDS,
    GPUS,
    HOST_FREE,
    HOST_MEM,
    CardKey,
    FabricGroup,
    FabricKey,
    Group,
    HostKey,
    HostPool,
    counted_groups,
    fabric_in,
    grouped_key,
    ram_room,
    tally,
)
from planner.model import Option, PoolNode
from planner.platform import graphs_of

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
        return ram_lack(o.need_gb, n.host_free_gb)
    return max(0, o.gpus_per_node - n.free_gpus)


def ram_lack(need_gb: float, free_gb: int) -> int:
    return max(0, int(-(-(need_gb - free_gb) // 1)))


def cpu_rank(n: PoolNode) -> tuple[bool, int, str]:
    """The order a CPU replica prefers nodes in, smallest first: a node without cards, the least RAM free
    that holds it; failing one, the GPU node with the most RAM free; then by id."""
    return (n.gpus > 0, -n.host_free_gb if n.gpus else n.host_free_gb, n.id)


def _sign(gpus: int) -> int:
    return (gpus > 0) - (gpus < 0)


def merged(lists: Sequence[list[str]]) -> Iterable[str]:
    return lists[0] if len(lists) == 1 else heapq.merge(*lists)


_T = TypeVar("_T", str, int, float)


def _remove_from(lst: list[_T], item: _T) -> None:
    """Take ``item`` out of sorted ``lst``, which holds it."""
    del lst[bisect_left(lst, item)]


class PoolIndex:
    """Ready nodes by id (in the order they came), with the counts and ordered ids a plan reads. For:
    keeping what a plan asks of the pool answered as nodes change, a node at a time.

    Every node is listed by its cards (``CardKey``), by its cards on its fabric (``FabricKey``) and by its
    RAM (``HostKey``), each list of ids kept sorted; the GPU nodes ``grouped`` counts are counted as it
    counts them (``groups``), and the nodes' RAM as ``HostPool.of`` does (``hosts``). Queries go through a
    ``PoolView(index)``; they read the lists as they stand, so a query is consumed before the index
    changes again. What a reader is handed (``nodes``, the lists) is the index's own: read only.
    """

    __slots__ = (
        "_bare_sizes",
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
        self._bare_sizes: dict[int, int] = {}
        """Of those, how many without cards (``HostPool.bare``)."""
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
        fabric_keys = list(map(FABRIC_CARDS, nodes))
        mems, frees = list(map(HOST_MEM, nodes)), list(map(HOST_FREE, nodes))
        signs = [(g > 0) - (g < 0) for g in map(GPUS, nodes)]
        for lists, keys in (
            (self._cards, map(CARDS, nodes)),
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
        self._bare_sizes = dict(Counter(m for m, sign in zip(mems, signs, strict=True) if sign <= 0))
        rooms = map(min, map(HOST_SHARE.__rmul__, mems), frees)
        self._room = dict(Counter(compress(rooms, map((0).__lt__, mems))))  # of the nodes with RAM
        self._rooms = sorted(self._room)
        self._groups, self._fabric_groups = counted_groups(Counter(filter(None, map(grouped_key, nodes))))

    # --- reading ------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._nodes)

    def __iter__(self) -> Iterator[PoolNode]:
        return iter(self._nodes.values())

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._nodes

    def get(self, node_id: str) -> PoolNode | None:
        return self._nodes.get(node_id)

    @property
    def nodes(self) -> Mapping[str, PoolNode]:
        """The nodes by id, in the order they came. The index's own mapping, for reading only; the same
        object for the index's life, so a reader may keep it."""
        return self._nodes

    def group(self, gpu_class: str, mem_gb: int) -> Group | None:
        """The counted group of one card class and size (as ``groups`` lists it), or None. Read only."""
        return self._groups.get((gpu_class, mem_gb))

    def rooms(self) -> Iterator[tuple[float, int]]:
        """``(room, nodes)``: how many nodes with RAM could give a CPU replica each amount now, the largest
        amount first."""
        room = self._room
        return ((r, room[r]) for r in reversed(self._rooms))

    def groups(self) -> list[Group]:
        """``grouped(list(self))``, kept rather than counted. Read only: the index changes these in place."""
        if self._group_list is None:
            self._group_list = [self._groups[k] for k in sorted(self._groups)]
        return self._group_list

    def hosts(self) -> HostPool:
        """``HostPool.of(list(self))``, kept rather than counted."""
        # the best over nodes with RAM is the best over all: ``HostPool.of`` falls back to it when the best
        # is not above 0, and a node without RAM gives at most 0
        return HostPool(dict(self._host_sizes), self._rooms[-1] if self._rooms else -math.inf, dict(self._bare_sizes))

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
        new._bare_sizes = dict(self._bare_sizes)
        new._room = dict(self._room)
        new._rooms = list(self._rooms)
        for key, g in self._groups.items():
            fabrics = [FabricGroup(f.name, dict(f.cards)) for f in g.fabrics]
            new._groups[key] = Group(g.gpu_class, g.mem_gb, g.max_gpus, fabrics, dict(g.cards), dict(g.platforms))
            for f in fabrics:
                new._fabric_groups[(*key, f.name)] = f
        return new

    # --- changing -----------------------------------------------------------------------------------------

    def put(self, node: PoolNode) -> None:
        """A node joins the pool, or replaces the node of its id (in its place)."""
        old = self._nodes.get(node.id)
        if old == node:
            return
        # a node whose cards are counted as before (only its RAM changed, say) leaves the groups as they
        # are, and what the planner kept in them
        same = old is not None and grouped_key(old) == grouped_key(node)
        if old is not None:
            self._remove(old, groups=not same)
        self._nodes[node.id] = node
        self._add(node, groups=not same)

    def drop(self, node_id: str) -> None:
        """A node leaves the pool (nothing if it is not in it)."""
        old = self._nodes.pop(node_id, None)
        if old is not None:
            self._remove(old)

    def _add(self, n: PoolNode, *, groups: bool = True) -> None:
        """List and count ``n`` everywhere (in the groups too, unless told not to)."""
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
        if n.gpus <= 0:
            self._bare_sizes[n.host_mem_gb] = self._bare_sizes.get(n.host_mem_gb, 0) + 1
        if n.host_mem_gb > 0:
            room = ram_room(n)
            count = self._room.get(room, 0)
            if not count:
                insort(self._rooms, room)
            self._room[room] = count + 1

        if groups and grouped_key(n) is not None:
            key = (n.gpu_class, n.gpu_mem_gb)
            g = self._groups.get(key)
            if g is None:
                g = self._groups[key] = Group(n.gpu_class, n.gpu_mem_gb)
                self._group_list = None
            f = self._fabric_groups.get((*key, n.fabric))
            if f is None:
                f = self._fabric_groups[(*key, n.fabric)] = FabricGroup(n.fabric)
                g.fabrics.insert(fabric_in(g, n.fabric)[0], f)
            tally(g, f, (n.gpus, n.free_gpus), 1, graphs_of(n.gpu_vendor, n.gpu_driver))

    def _remove(self, n: PoolNode, *, groups: bool = True) -> None:
        """Unlist ``n`` everywhere (in the groups too, unless told not to), dropping what is left empty."""
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
        if n.gpus <= 0:
            left = self._bare_sizes[n.host_mem_gb] - 1
            if left:
                self._bare_sizes[n.host_mem_gb] = left
            else:
                del self._bare_sizes[n.host_mem_gb]
        if n.host_mem_gb > 0:
            room = ram_room(n)
            left = self._room[room] - 1
            if left:
                self._room[room] = left
            else:
                del self._room[room]
                _remove_from(self._rooms, room)

        if groups and grouped_key(n) is not None:
            key = (n.gpu_class, n.gpu_mem_gb)
            g = self._groups[key]
            f = self._fabric_groups[(*key, n.fabric)]
            tally(g, f, (n.gpus, n.free_gpus), -1, graphs_of(n.gpu_vendor, n.gpu_driver))
            if not f.cards:
                del g.fabrics[fabric_in(g, n.fabric)[0]]
                del self._fabric_groups[(*key, n.fabric)]
            if not g.cards:
                del self._groups[key]
                self._group_list = None

    # --- the lists a query reads (the index's own: read only) ----------------------------------------------

    def gpu_lists(self, o: Option) -> list[tuple[int, list[str]]]:
        """``(free cards, ids)`` of each kind of node that could ever take a share of GPU layout ``o``."""
        width, have = o.gpus_per_node, o.have_gb
        if o.nodes <= 1:
            keys = self._card_keys.get(o.gpu_class, ())
            return [(k[3], self._cards[k]) for k in keys if k[2] >= width and card_budget_gb(k[1]) == have]
        fkeys = self._fabric_keys.get((o.gpu_class, o.fabric), ())
        return [(k[4], self._fabrics[k]) for k in fkeys if k[3] >= width and card_budget_gb(k[1]) == have]

    def ram_lists(self, o: Option) -> Iterator[tuple[int, int, list[int]]]:
        """``(sign of cards, RAM, free RAM sizes)`` of each RAM size that could ever hold CPU layout ``o``."""
        for (sign, mem), frees in self._host_frees.items():
            if mem * HOST_SHARE >= o.need_gb:
                yield sign, mem, frees

    def host_ids(self, sign: int, mem: int, free: int) -> list[str]:
        """The ids of the nodes with that sign of cards, RAM and free RAM (one of ``ram_lists``' sizes)."""
        return self._hosts[(sign, mem, free)]
