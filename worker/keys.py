"""Every Redis key modelplan uses, and nothing else spells one. What each key holds is in docs/KEYS.md, a
table ``tests/test_docs.py`` checks against this module; here, who writes it.

=======================================  ======  ============================  ======================
RQ's own keys for the queue and its jobs live under the prefix too (``worker.queueing`` gives RQ these
names), so that one key pattern covers a deployment's clients. What a worker writes for its own
bookkeeping (worker registrations, registries of started and failed jobs) RQ names from its
``RQ_KEY_PREFIX`` environment variable, ``rq`` by default: set it to ``{prefix}:rq`` for the worker
processes to keep those under the prefix as well.

Every key a Lua script touches is handed to it in ``KEYS``, never built inside it from a prefix and an id
(``worker.calls`` builds each call; ``tests/worker/test_script_keys.py`` reads the scripts for a key made
by concatenation and runs each with a guard that refuses any key it was not handed), as Redis Cluster asks
of a script; a deployment there would next need a call's keys in one hash slot (not done yet).
"""

from __future__ import annotations

import re

from worker.constants import DEFAULT_PREFIX, NODE_KEYS_KEPT
from worker.errors import BadId
from worker.ids import check_client_id, check_id

PREFIX_MAX = 64
PREFIX_PATTERN = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{PREFIX_MAX - 1}}}")
JOB_STATES = frozenset({"queued", "planning", "placed", "waiting", "failed", "cancelled", "released"})
"""The job states (``worker.records.JobState``), spelled here too since records import this module."""

CPU_CLASS = "cpu"
"""The class key of CPU capacity (host memory) in ``pending:for`` and ``wake:classes``."""

ANY_CLASS = "any"
"""What a pending job with no option to name a class by (an empty pool; its hardware left) waits on in
``pending:for``: capacity freed in any class wakes it."""


class Keys:
    """The keys under one prefix."""

    def __init__(self, prefix: str = DEFAULT_PREFIX) -> None:
        if not isinstance(prefix, str) or not PREFIX_PATTERN.fullmatch(prefix):
            raise BadId("prefix", prefix, PREFIX_MAX)
        self.prefix = prefix
        self._p = prefix + ":"
        self._node_families = (
            self._p + "node:",
            self._p + "held:",
            self._p + "boots:",
            self._p + "conflict:",
            self._p + "beat:",
        )
        self._node_keys: dict[str, tuple[str, str, str, str, str]] = {}

    @property
    def queue_name(self) -> str:
        """The RQ queue planning jobs go on."""
        return self.prefix

    @property
    def rq_queue_namespace(self) -> str:
        """What RQ puts before a queue's name to make its key: ``rq:queue:{prefix}`` is the queue."""
        return f"{self._p}rq:queue:"

    @property
    def rq_job_namespace(self) -> str:
        """What RQ puts before a planning job's id to make its key."""
        return f"{self._p}rq:job:"

    @property
    def rq_queues(self) -> str:
        """RQ's set of the queues under this prefix."""
        return f"{self._p}rq:queues"

    @property
    def rq_queue(self) -> str:
        """The planning queue's key, as RQ spells it from ``rq_queue_namespace`` and ``queue_name``."""
        return self.rq_queue_namespace + self.queue_name

    def rq_job(self, rq_job_id: str) -> str:
        return self.rq_job_namespace + check_id(rq_job_id, "rq_job_id")

    @property
    def hints(self) -> frozenset[str]:
        """The fixed keys that only tell a worker to look again (wake-up signal and classes, epoch, change
        feed, nodes by lapse, pending jobs by class, their records), all rebuilt by what comes next: one of
        another type is deleted, not obeyed."""
        return frozenset(
            {
                self.wake_signal,
                self.wake_classes,
                self.epoch,
                self.pool_changes,
                self.nodes,
                self.pending_classes,
                self.pending_records,
                self.restarts,
            }
        )

    @property
    def quarantine(self) -> str:
        return f"{self._p}quarantine"

    def node(self, node_id: str) -> str:
        return f"{self._p}node:{check_id(node_id, 'node_id')}"

    def node_keys(self, node_id: str) -> tuple[str, str, str, str, str]:
        """A node's own keys as ``heartbeat.lua`` is handed them: ``node``, ``held``, ``boots``,
        ``conflict`` and ``beat``. A relay's batch needs these for every heartbeat, of the same nodes again and again:
        they are kept by node id (up to ``NODE_KEYS_KEPT``), the id checked when they are made."""
        found = self._node_keys.get(node_id)
        if found is None:
            check_id(node_id, "node_id")
            if len(self._node_keys) >= NODE_KEYS_KEPT:
                self._node_keys.clear()
            node, held, boots, conflict, beat = self._node_families
            found = self._node_keys[node_id] = (
                node + node_id,
                held + node_id,
                boots + node_id,
                conflict + node_id,
                beat + node_id,
            )
        return found

    @property
    def nodes(self) -> str:
        return f"{self._p}nodes"

    def beat(self, node_id: str) -> str:
        """The seq of a node's last refresh (a hash, field ``seq``): a refresh moves its record's TTL and
        writes this, never the record, so that it rings no worker's intake."""
        return f"{self._p}beat:{check_id(node_id, 'node_id')}"

    @property
    def taken(self) -> str:
        """What the workers' intake took of each node (node id -> JSON), so that a record is taken once."""
        return f"{self._p}taken"

    def probe(self, name: str) -> str:
        """A worker's own key, set to see its keyspace notification arrive."""
        return f"{self._p}probe:{check_id(name, 'worker')}"

    @property
    def node_prefix(self) -> str:
        """What every node record's key starts with: a keyspace notification's channel names the key."""
        return f"{self._p}node:"

    @property
    def conflict_prefix(self) -> str:
        return f"{self._p}conflict:"

    def keyspace_patterns(self, db: int | str = "*") -> tuple[str, str]:
        """The keyspace notification channels (``PSUBSCRIBE`` patterns) of the node records and conflict
        records in database ``db`` (``*``: any, as an ACL rule names them: Redis grants a pattern
        subscription only to the pattern a rule spells)."""
        return (f"__keyspace@{db}__:{self.node_prefix}*", f"__keyspace@{db}__:{self.conflict_prefix}*")

    def probe_channel(self, db: int, name: str) -> str:
        return f"__keyspace@{db}__:{self.probe(name)}"

    @property
    def probe_channels(self) -> str:
        """An ACL channel pattern covering every worker's probe channel, in any database."""
        return f"__keyspace@*__:{self._p}probe:*"

    def boots(self, node_id: str) -> str:
        return f"{self._p}boots:{check_id(node_id, 'node_id')}"

    def conflict(self, node_id: str) -> str:
        return f"{self._p}conflict:{check_id(node_id, 'node_id')}"

    @property
    def conflicts(self) -> str:
        return f"{self._p}conflicts"

    @property
    def restarts(self) -> str:
        """Nodes back with a new boot (or after a lapse) while holding reservations: a hint, for a worker's
        waker to have each checked (``node_restarted`` acts only on what the node's record says)."""
        return f"{self._p}restarts"

    def held(self, node_id: str) -> str:
        return f"{self._p}held:{check_id(node_id, 'node_id')}"

    @property
    def held_nodes(self) -> str:
        return f"{self._p}holding"

    def job(self, job_id: str) -> str:
        return f"{self._p}job:{check_id(job_id, 'job_id')}"

    def job_events(self, job_id: str) -> str:
        return f"{self._p}job:{check_id(job_id, 'job_id')}:events"

    @property
    def events(self) -> str:
        return f"{self._p}events"

    def jobs(self, state: str) -> str:
        """The index of jobs in ``state`` (one of ``JobState``'s values)."""
        if state not in JOB_STATES:
            raise BadId("state", state)
        return f"{self._p}jobs:{state}"

    @property
    def pending(self) -> str:
        return f"{self._p}pending"

    @property
    def pending_for(self) -> str:
        return f"{self._p}pending:for"

    @property
    def pending_classes(self) -> str:
        return f"{self._p}pending:classes"

    @property
    def pending_records(self) -> str:
        return f"{self._p}pending:records"

    @property
    def pool_changes(self) -> str:
        return f"{self._p}pool:changes"

    @property
    def seq(self) -> str:
        return f"{self._p}seq"

    @property
    def epoch(self) -> str:
        return f"{self._p}epoch"

    @property
    def wake_signal(self) -> str:
        return f"{self._p}wake:signal"

    @property
    def wake_classes(self) -> str:
        return f"{self._p}wake:classes"

    @property
    def ack(self) -> str:
        return f"{self._p}ack"

    @property
    def requests(self) -> str:
        """The request stream: operations any client appends, carried out by the workers."""
        return f"{self._p}requests"

    def reply(self, name: str) -> str:
        """A reply stream a request entry names (``reply_to``): the sender's own, under the prefix."""
        return f"{self._p}reply:{check_id(name, 'reply_to')}"

    @property
    def clients(self) -> str:
        """The registered client ids: each has a request stream of its own, which the workers read."""
        return f"{self._p}clients"

    def client_requests(self, client_id: str) -> str:
        """A client's own request stream: only its ACL user may append to it, whatever an entry says."""
        return f"{self._p}client:{check_client_id(client_id)}:requests"

    def client_replies(self, client_id: str) -> str:
        """The answers to a client's own request stream, and to no other."""
        return f"{self._p}client:{check_client_id(client_id)}:replies"

    def client_key(self, client_id: str, job_id: str) -> str:
        """The API key of the engines of a client's own job (``worker.apikeys``): under the client's pattern,
        so that its owner alone of the clients reads it."""
        return f"{self._p}client:{check_client_id(client_id)}:key:{check_id(job_id, 'job_id')}"

    @property
    def secret(self) -> str:
        """The deployment's secret, from which each job's engine API key is made: the workers' alone."""
        return f"{self._p}secret"

    def client_pattern(self, client_id: str) -> str:
        """An ACL key pattern covering a client's own keys and no other's (an id holds no ``:`` or glob)."""
        return f"{self._p}client:{check_client_id(client_id)}:*"

    @property
    def job_pattern(self) -> str:
        """An ACL key pattern covering every job record and job stream (``job:{id}``, ``job:{id}:events``)."""
        return f"{self._p}job:*"

    def owned(self, client_id: str) -> str:
        """A client's jobs -> replicas counted against its quota: the workers' own, out of the client's reach."""
        return f"{self._p}owned:{check_client_id(client_id)}"

    @property
    def stats(self) -> str:
        """Counters and histogram buckets the workers add to, which the metrics exporter reads."""
        return f"{self._p}stats"

    def worker(self, name: str) -> str:
        return f"{self._p}worker:{check_id(name, 'worker')}"

    @property
    def workers(self) -> str:
        return f"{self._p}workers"

    @property
    def worker_pattern(self) -> str:  # an ACL key pattern covering every ``worker:{name}``
        return f"{self._p}worker:*"

    def lock(self, name: str) -> str:
        return f"{self._p}lock:{check_id(name, 'lock')}"

    def observed(self, identity: str) -> str:
        """A model's footprints as the engines were measured (``worker.observations``)."""
        return f"{self._p}observed:{check_id(identity, 'identity')}"

    @property
    def observed_models(self) -> str:
        """The models with footprints kept, by when they were last written: the oldest go past a cap."""
        return f"{self._p}observed"

    @property
    def estimates_off(self) -> str:
        """The models with footprints kept, by how far their estimate was off (``|log2 ratio|``)."""
        return f"{self._p}estimates:off"

    def hub(self, repo_id: str, revision: str) -> str:
        """The cached listing and config of a Hub repository (``org/name``) at a revision."""
        org, slash, name = repo_id.partition("/")
        if not slash:
            raise BadId("repo_id", repo_id)
        return f"{self._p}hub:{check_id(org, 'repo_id')}/{check_id(name, 'repo_id')}@{check_id(revision, 'revision')}"
