"""Every TTL, interval and bound the worker keeps state with, each with its reason."""

from __future__ import annotations

from typing import Literal

SchemaVersion = Literal[1]
SCHEMA_VERSION: SchemaVersion = 1
"""The version of the records modelplan stores (``schema_version`` in each: a job's, a node's, a
conflict's), the one place it is spelled: the scripts that write or match a record's text are handed it
(``claim.lua``, ``heartbeat.lua``), and a reader takes a record of a higher version for a newer modelplan's
(``records.read_record``). A new version changes both lines."""

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_PREFIX = "modelplan"
"""Every key modelplan writes starts with this and a colon; RQ's own keys sit under ``rq:`` with the queue
named after the prefix."""

HEARTBEAT_INTERVAL_S = 5.0
"""How often a node agent publishes by default."""

NODE_TTL_MS = 15_000
"""A node is in the pool while its last heartbeat is younger than this: three missed intervals."""

WORKER_TTL_MS = 15_000
"""A worker counts as alive while its registration (``worker:{name}``), renewed about once a second while
its loop runs (``RQ_HEARTBEAT_EVERY_S``), is younger than this."""

BOOT_DISPLACED_MS = 300_000
"""How long a node's boot is remembered after another took its place (or after it was last heard while two
agents claim the node): heard again within this, with a later seq, it is a second agent under the same
node id, not a restart. A restarted node's old boot is never heard again (what it sent before it went down
carries a seq no later than its last), so the length costs nothing there; five minutes catches agents on
intervals up to that, and outlasts CONFLICT_CLEAR_MS, so that a conflict that cleared comes back at once
if the other agent is heard again."""

CONFLICT_CLEAR_MS = 60_000
"""Two agents claim a node id until only one boot has been heard for this long (twelve default
intervals): the node is out of the pool until then, and rejoins with the next heartbeat after it."""

LEASE_MS = 10_000
"""How long a worker may hold a job in ``planning``. A plan takes milliseconds; past this the worker is
taken for dead and the job is planned again by another, well within 30 s."""

MAINTENANCE_INTERVAL_S = 2.0
"""How often a worker looks for expired leases, silent nodes and stalled jobs. Only one worker at a time
does it (a lock), so more workers do not mean more sweeps."""

NODE_KEYS_KEPT = 10_000
"""Nodes whose five keys a ``Keys`` keeps made for ``heartbeat.lua`` (some 400 bytes each, 4 MB at most):
a relay publishes the same racks' nodes every interval, and making them anew (the id checked, four strings
joined) took some 1 us a node, four times the rest of building a call; past this many, all are forgotten
and made again as they come."""

HEARTBEAT_BATCH = 200
"""Heartbeats stored by one ``heartbeat.lua`` call: a relay's batch is split into calls of this many, so
that no one call holds Redis for long."""

SILENT_HANDOFF_MS = 10_000
"""A silent node that held jobs is handed to a worker on the queue (its jobs planned again on that worker's
mirror of the pool), and not handed again for this long: again only if that worker died before it was done."""

MAINTENANCE_LOCK_MS = 1_500
"""The maintenance lock's life: shorter than the interval, so a dead worker's lock never stops the next."""

WAITING_SWEEP_INTERVAL_S = 30.0
"""The safety net: every waiting job is re-planned this often even if no wake-up came."""

ORPHAN_GRACE_S = 10.0
"""How long a hold no job owns must be seen so, unchanged and its job's record unchanged, before the sweep
clears it: a commit writes a hold and its record in one step, so this guards only against what no script
promises (a hold written by anything else); a lapsed lease (``LEASE_MS``) is no shorter."""

ORPHAN_SWEEP_NODES = 250
"""Nodes of ``holding`` whose holds one sweep judges (a read of their holds and of their jobs'
records, some 10 KB each): some 2.5 MB a sweep at most, a megabyte or so a second; a pool of 100,000 nodes
that hold jobs is gone over in under a quarter of an hour, one of a few hundred in every sweep."""

ORPHANS_KEPT = 10_000
"""Holds seen with no owner that a worker remembers until their grace is past: past it, more are left for
a later round (a bound on what anyone writing ``held:{node}`` can make a worker keep)."""

ORPHANS_LOGGED = 20
"""Reclaimed holds named in one ``holds_reclaimed`` line; the count names them all."""

QUEUED_LOST_MS = 10_000
"""A job ``queued`` this long whose planning job is no longer on the queue was lost: taken off the queue by
a worker that died before it could claim the job (a claim comes milliseconds after). It is enqueued
again. A job still on the queue is only waiting its turn, and is left alone however long that takes."""

GC_FREEZE_S = 5.0
"""How often a worker moves what it holds out of the cyclic garbage collector's reach (``gc.freeze``), as
it does after each whole read of the pool (``runner.Frozen``): what changed in between is all a
collection walks."""

WAKE_KEEP_UP_S = 0.02
"""How long a worker's waker waits on ``wake:signal`` before it brings the pool mirror up to date instead
(and waits again): a pass then reads at most this long's changes of the pool before it plans, where it
read all since the worker's last job or pass (a tenth of a second and more, at 20,000 heartbeats a second
some 2,000 of them, the changed records among them parsed). In the cluster run this took the pass's
read from 3.6 / 7.0 ms (p50 / p90) to 2.4 / 4.4."""

SNAPSHOT_REUSE_S = 0.25
"""A worker plans consecutive jobs on one read of the pool for this long. That is safe, not just fast: a
placement's commit re-checks every node's room (a card taken since is a retry on a fresh read), and a
waiting commit re-checks the epoch (capacity freed since wakes the job). A stale read costs a retry. A
failure, final and re-checked by nothing, is decided on a fresh read."""

NODE_RECORD_MAX_BYTES = 1 << 20
"""The longest node record (or conflict record) a worker's intake takes: a heartbeat of a node running
its most replicas (``MAX_STARTED`` holds started, with footprints) is some hundreds of KiB at most, a usual
one under 1 KiB. A longer one, written by the node's own login, is deleted (``node_records_dropped``) and the
node is gone from the pool: a node's login cannot grow what workers keep past this for it."""

CONFLICT_REFUSED_STEP_MAX = 1000
"""The most heartbeats refused for a conflict that one conflict record may add to ``stats`` at a time: the
count is the node's own record's, which its login may write as it likes."""

INTAKE_BATCH = 200
"""Nodes per ``intake.lua`` call: a batch of keyspace notifications, or a reconcile's share."""

INTAKE_PROBE_WAIT_S = 2.0
"""How long a worker waits for the notifications of its own probe key before it says that keyspace
notifications are off and reconciles in full every ``INTAKE_RECONCILE_S`` instead."""

INTAKE_RECONCILE_S = 1.0
"""How often a worker that hears no keyspace notifications reconciles every node in full (the fallback),
and checks again whether notifications came on."""

NOTIFY_FLAGS = "K$x"
"""The keyspace notifications a worker's intake needs (``notify-keyspace-events``): keyspace channels
(``K``) of string writes (``$``: a node's record set) and expirations (``x``). ``modelplan setup-redis``
adds those the server lacks and keeps every other flag set."""

HOLD_MAX_BYTES = 1024
"""The longest stored hold a worker reads: ``transition.lua`` writes some 80 bytes (cards, GiB, boot id,
a flag). One longer (written by hand, or to fill memory) is not parsed but counted unreadable: every card
of its node taken, as for a hold that does not parse."""

PARSE_CACHE_SLACK = 10_000
"""Entries a parse cache may hold past twice the pool before it is emptied: hold values repeat (the same
cards, boot and flags), so their cache stays small, and is emptied when it reaches this."""

PARSE_CACHE_ENTRY_MAX_BYTES = 16 * 1024
"""The longest stored node record a parse cache keeps: a heartbeat of a node running a few dozen replicas
is a few KiB. A longer one is parsed each time it is read, not kept by its bytes, so that distinct large
values cannot grow a worker's memory (with ``PARSE_CACHE_SLACK`` and ``HOLD_MAX_BYTES``, the bound on
what the cache keeps beyond the pool)."""

PLAN_ATTEMPTS = 5
"""How many times a worker plans again when its commit finds the cards taken since its snapshot."""

ALTERNATIVES_KEPT = 10
"""How many ranked alternatives a job record keeps beside its chosen option."""

EVENTS_MAXLEN = 100_000
"""Approximate length the shared event stream is trimmed to."""

JOB_EVENTS_MAXLEN = 1_000
"""Approximate length each job's own event stream is trimmed to."""

FINISHED_TTL_S = 7 * 24 * 3600
"""How long a failed, cancelled or released job's record and stream are kept."""

RQ_JOB_TIMEOUT_S = 60
"""RQ's limit on one planning job; a plan takes milliseconds, so this only catches a hung worker."""

RQ_FAILURE_TTL_S = 24 * 3600
"""How long RQ keeps a failed planning job for inspection."""

PRIORITY_MAX = 1000
"""Priorities run from 0 to this; higher is served first."""

WATCH_BLOCK_MS = 1_000
"""How long one blocking read of a job's stream waits before ``watch`` checks its own timeout."""

NOMINATION_S = 300
"""How long cards held for the waiting job at the head of a class may sit idle: each card that frees into
the hold starts the time again; past it with none, the hold is let go for others."""

POOL_CHANGES_MAXLEN = 200_000
"""Changes kept on ``pool:changes``: ten seconds of 20,000 heartbeats a second. A worker further behind
than this reads the whole pool again."""
REFRESHES_MAX_BYTES = HEARTBEAT_BATCH * 129
"""The longest list of refreshed nodes an entry of ``pool:changes`` holds as modelplan writes it (a call of
``HEARTBEAT_BATCH`` ids of at most 128 characters, space-separated). A longer one is passed over: its
nodes, not refreshed in a mirror, are read again when they seem to lapse."""
MIRROR_BATCH = 20_000
"""The most changes a worker takes from ``pool:changes`` in one read; more waiting are read in further
pages of this size, while the stream still holds them."""
MIRROR_IDLE_READ_S = 1
"""An idle worker brings its mirror up to date this often (its wait for the next job times out), so that
the first job after a quiet spell finds it at most a second behind: at 20,000 heartbeats a second, some
200 entries of refreshes and the few hundred changes among them."""

REQUEST_GROUP = "workers"
"""The consumer group every worker reads the request stream in: each entry goes to one worker."""

REQUEST_CLAIM_IDLE_MS = 10_000
"""An entry a worker took and has not acknowledged for this long is taken over by another: carrying one
out takes milliseconds, so its worker died (as ``LEASE_MS`` for a planning job)."""

REQUEST_RECLAIM_S = 1.0
"""How often a worker looks for entries to take over (one round trip over every stream): an entry is
taken over within a second of ``REQUEST_CLAIM_IDLE_MS``, however many clients there are."""

REQUEST_MAX_DELIVERIES = 3
"""An entry handed out this many times without an answer (each worker that took it died) is answered as
refused and acknowledged, rather than killing the next worker too."""

REQUEST_MAX_BYTES = 1 << 20
"""The largest entry a worker carries out: a request with the most artifacts allowed is well under this."""

REQUEST_BLOCK_MS = 1_000
"""How long one read of the request stream blocks; under the socket timeout, so a quiet stream is not
taken for a dead connection."""

REQUEST_BATCH = 16
"""Entries one read takes."""

REPLY_MAXLEN = 1_000
"""Approximate length a reply stream is trimmed to."""

REPLY_TTL_S = 24 * 3600
"""How long a reply stream lives after its last answer: a sender that went away leaves nothing for long."""

CLIENTS_REFRESH_S = 2.0
"""How often a worker reads the registered clients again: a client added while workers run has its stream
read within this and one blocking read (``REQUEST_BLOCK_MS``)."""

DEFAULT_MAX_REPLICAS = 16
"""The most replicas one job asked for through a request stream may have (``MODELPLAN_MAX_REPLICAS``): a
large serving deployment, well short of a whole cluster's cards in one entry."""

DEFAULT_CLIENT_REPLICAS = 64
"""The most replicas one client's live jobs may want together (``MODELPLAN_CLIENT_REPLICAS``): four jobs at
the per-job bound, so that one client cannot take every card by submitting many."""

OUTAGE_RETRY_S = 1.0
"""How long the request reader waits before trying Redis again after a failed read: the first pause;
each failure in a row doubles it, up to ``RETRY_MAX_S``."""

RQ_RESTART_S = 2.0
"""How long a worker waits before starting RQ's loop again after it quit on an error (Redis away): the
first pause; each time it quits again at once the pause doubles, up to ``RETRY_MAX_S``."""

RETRY_FIRST_S = 0.05
"""The waker's first pause after a try that failed: a pass put off is a job left waiting, so it tries again
soon; each failure in a row doubles the pause, up to ``RETRY_MAX_S``. (The request reader starts from
``OUTAGE_RETRY_S``, RQ's loop from ``RQ_RESTART_S``, the sweep from its interval.)"""

RETRY_MAX_S = 10.0
"""The longest pause of a worker's loop that keeps failing (an error that does not mend, Redis busy with a
script past its time limit): a try every so often and a line when it changes, not a loop that spins and
writes megabytes of log a second; within a third of the safety net's ``WAITING_SWEEP_INTERVAL_S``."""

RQ_HEARTBEAT_EVERY_S = 1.0
"""How often, at most, a worker renews its own registration with RQ (its hash's ``last_heartbeat``
and the TTL of its keys, ``worker_ttl`` + 60 s, minutes). RQ renews it three times a job, each three
commands sent one by one; a busy worker sends one such pipeline a second instead."""

RESTARTS_TAKEN = 1000
"""Restart notices a waker takes at once (``restarts``): a rack's worth, each one RQ task; the rest wait for
the next pass."""

OBSERVED_NODES_KEPT = 8
"""Nodes whose accepted runs are kept per kind of replica of a model (``observed:{identity}``), one run
each (the node's peak at its latest engine release): the nodes written latest. A plan takes the figure a
quorum of them agree on (``planner.observed``); eight nodes give it that and more, and a node that runs
the kind again is written latest again."""
OBSERVED_FLAGGED_KEPT = 4
"""Nodes whose flagged runs are kept per kind, apart from the accepted ones (which they never push out),
one run each: enough for ``modelplan status`` to show them; no plan reads them."""
OBSERVED_RUNS_KEPT = OBSERVED_NODES_KEPT + OBSERVED_FLAGGED_KEPT
"""The most runs one kind holds: one accepted run for each of ``OBSERVED_NODES_KEPT`` nodes and one flagged
run for each of ``OBSERVED_FLAGGED_KEPT``."""
OBSERVED_KINDS_KEPT = 32
"""Kinds of replica kept per model (artifact, card class and width, context, settings): those written
latest. A model runs as a few kinds (a context or two, a card class or two); 32 keep them all."""
OBSERVED_RECORD_BYTES = 256 << 10
"""The most one stored record (``observed:{identity}``) may take, as JSON: 32 kinds of 12 runs of about
250 bytes, with their settings, come to about 110 KiB. A record past it is written without the kinds
written longest ago, and one read past it is dropped (said in one line): a plan reads it every 10 s."""
OBSERVED_MODELS_KEPT = 10_000
"""Models with observations kept (``observed``): past it, those written longest ago are dropped."""
OBSERVED_TTL_S = 30 * 86_400
"""A model's observations go 30 days after its last run was taken: its engines may have changed since."""
OBSERVED_REREAD_S = 10.0
"""How long a worker plans with a model's observations as it read them before it reads them again."""
OBSERVED_CACHE_KEPT = 4096
"""Models whose observations one worker keeps read at a time."""
OBSERVED_TAKEN_KEPT = 1 << 17
"""Footprints a sweeper remembers having taken (node, hold), so as not to take them again; past it, they
are forgotten and the next are taken once more (which adds nothing)."""

API_KEY_MAX = 128
"""The longest engine API key a hold may carry (``worker.apikeys`` makes 40 characters)."""
