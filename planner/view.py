"""A pool index seen with a few nodes otherwise: what a plan works on. The index (``planner.index``) owns
the nodes and their lists; a view reads them through its public methods and keeps only its overrides."""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import TypeAlias

from planner.groups import FabricGroup, Group, GroupKey, HostPool, fabric_in, grouped_key, ram_room, tally
from planner.index import PoolIndex, cpu_rank, lack, merged, ram_lack, takes
from planner.model import Option, PoolNode


class PoolView:
    """A ``PoolIndex`` with some nodes seen otherwise: what the planner reads (a job's own nomination
    counted free, the cards a plan has just taken). Iterates as the whole pool in the index's order,
    with those nodes in place of the index's; queries cost the kinds of node they read, and the nodes
    overridden."""

    __slots__ = ("_base", "index", "over")

    def __init__(self, index: PoolIndex, nodes: Iterable[PoolNode] = ()) -> None:
        """The pool of ``index`` with ``nodes`` seen as given in place of the nodes of their ids (ids not
        in the pool are left out)."""
        self.index = index
        self._base = base = index.nodes
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
        return (over.get(i, n) for i, n in self._base.items())

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
        delta: Counter[GroupKey] = Counter()
        for i, n in self.over.items():
            was, now = grouped_key(self._base[i]), grouped_key(n)
            if was != now:
                if was is not None:
                    delta[was] -= 1
                if now is not None:
                    delta[now] += 1
        if not any(delta.values()):
            return base
        copies: dict[tuple[str, int], Group] = {}
        fresh: set[tuple[str, int, str]] = set()
        for (gpu_class, mem_gb, fabric, gpus, free, graphs), d in delta.items():
            if not d:
                continue
            g = copies.get((gpu_class, mem_gb))
            if g is None:
                old = self.index.group(gpu_class, mem_gb)
                g = Group(gpu_class, mem_gb)
                if old is not None:  # the fabrics are shared until one is changed
                    g.max_gpus, g.fabrics, g.cards = old.max_gpus, list(old.fabrics), dict(old.cards)
                    g.platforms = dict(old.platforms)
                copies[(gpu_class, mem_gb)] = g
            at, there = fabric_in(g, fabric)
            if not there:
                g.fabrics.insert(at, FabricGroup(fabric))
            elif (gpu_class, mem_gb, fabric) not in fresh:
                g.fabrics[at] = FabricGroup(fabric, dict(g.fabrics[at].cards))
            fresh.add((gpu_class, mem_gb, fabric))
            tally(g, g.fabrics[at], (gpus, free), d, graphs)
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
        counted = index.hosts()
        sizes, bare = counted.sizes, counted.bare  # copies of the index's
        gone: Counter[float] = Counter()
        best = -math.inf
        for i, n in self.over.items():
            was = self._base[i]
            for by, was_in, is_in in ((sizes, True, True), (bare, was.gpus <= 0, n.gpus <= 0)):
                if was_in:
                    by[was.host_mem_gb] -= 1
                    if not by[was.host_mem_gb]:
                        del by[was.host_mem_gb]
                if is_in:
                    by[n.host_mem_gb] = by.get(n.host_mem_gb, 0) + 1
            if was.host_mem_gb > 0:
                gone[ram_room(was)] += 1
            if n.host_mem_gb > 0:
                best = max(best, ram_room(n))
        for room, count in index.rooms():
            if count > gone[room]:
                best = max(room, best)
                break
        return HostPool(sizes, best, bare)

    # --- nodes for a layout -------------------------------------------------------------------------------

    def fitting(self, o: Option) -> Iterator[PoolNode]:
        """The nodes that can take a share of GPU layout ``o`` now, best fit first: the fewest cards free,
        then by id."""
        width, over = o.gpus_per_node, self.over
        by_free: dict[int, list[list[str]]] = {}
        for free, ids in self.index.gpu_lists(o):
            if free >= width:
                by_free.setdefault(free, []).append(ids)
        base = ((free, i) for free in sorted(by_free) for i in merged(by_free[free]) if i not in over)
        extra = sorted((n.free_gpus, n.id) for n in over.values() if takes(o, n) and lack(o, n) == 0)
        return self._nodes_of(heapq.merge(base, extra) if extra else base)

    def nearest(self, o: Option) -> Iterator[tuple[int, PoolNode]]:
        """``(lack, node)`` for every node that could ever take a share of ``o``, nearest to free first:
        the least lacking, then by id."""
        over = self.over
        by_lack: dict[int, list[list[str]]] = {}
        if o.cpu:
            index = self.index
            for sign, mem, frees in index.ram_lists(o):
                for free in frees:
                    by_lack.setdefault(ram_lack(o.need_gb, free), []).append(index.host_ids(sign, mem, free))
        else:
            for free, ids in self.index.gpu_lists(o):
                by_lack.setdefault(max(0, o.gpus_per_node - free), []).append(ids)
        base = ((k, i) for k in sorted(by_lack) for i in merged(by_lack[k]) if i not in over)
        extra = sorted((lack(o, n), n.id) for n in over.values() if takes(o, n))
        node = self._node
        for k, i in heapq.merge(base, extra) if extra else base:
            yield k, node(i)

    def takers(self, o: Option) -> int:
        """How many nodes could ever take a share of ``o``."""
        index = self.index
        if o.cpu:
            count = sum(len(index.host_ids(s, m, f)) for s, m, frees in index.ram_lists(o) for f in frees)
        else:
            count = sum(len(ids) for _, ids in index.gpu_lists(o))
        base = self._base
        for i, n in self.over.items():
            count += takes(o, n) - takes(o, base[i])
        return count

    def cpu_fit(self, o: Option) -> PoolNode | None:
        """The node to run CPU layout ``o`` on now (``cpu_rank``'s first), or None if none has the RAM free."""
        index, over = self.index, self.over
        found = [n for n in over.values() if takes(o, n) and lack(o, n) == 0]
        for sign, mem, frees in index.ram_lists(o):
            start = bisect_left(frees, o.need_gb)  # those with at least its need free lack nothing
            # without cards, the least RAM free first; with them (or fewer than none), the most
            order = range(start, len(frees)) if sign == 0 else range(len(frees) - 1, start - 1, -1)
            for j in order:
                first = next((i for i in index.host_ids(sign, mem, frees[j]) if i not in over), None)
                if first is not None:
                    found.append(self._base[first])
                    break
        return min(found, key=cpu_rank) if found else None

    def _nodes_of(self, keyed: Iterable[tuple[int, str]]) -> Iterator[PoolNode]:
        node = self._node
        for _, i in keyed:
            yield node(i)

    def _node(self, node_id: str) -> PoolNode:
        """The node of an id the index lists, as this view sees it."""
        n = self.over.get(node_id)
        return n if n is not None else self._base[node_id]


Nodes: TypeAlias = Sequence[PoolNode] | PoolIndex | PoolView
"""What the planner takes as a pool: a list of nodes, an index of them, or a view of one."""


def pool_view(nodes: Nodes) -> PoolView:
    """``nodes`` as a view: as it is, of an index as it is, or of a list indexed first (a pass over it)."""
    if isinstance(nodes, PoolView):
        return nodes
    if isinstance(nodes, PoolIndex):
        return PoolView(nodes)
    return PoolView(PoolIndex(nodes))
