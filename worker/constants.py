"""Every TTL, interval and bound the worker keeps state with, each with its reason."""

from __future__ import annotations

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_PREFIX = "modelplan"
"""Every key modelplan writes starts with this and a colon; RQ's own keys sit under ``rq:`` with the queue
named after the prefix."""

HEARTBEAT_INTERVAL_S = 5.0
"""How often a node agent publishes by default."""

NODE_TTL_MS = 15_000
"""A node is in the pool while its last heartbeat is younger than this: three missed intervals."""

LEASE_MS = 10_000
"""How long a worker may hold a job in ``planning``. A plan takes milliseconds; past this the worker is
taken for dead and the job is planned again by another, well within 30 s."""

MAINTENANCE_INTERVAL_S = 2.0
"""How often a worker looks for expired leases, silent nodes and stalled jobs. Only one worker at a time
does it (a lock), so more workers do not mean more sweeps."""

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

OUTAGE_RETRY_S = 1.0
"""How long the request reader waits before trying Redis again after a failed read."""

RQ_RESTART_S = 2.0
"""How long a worker waits before starting RQ's loop again after it quit on an error (Redis away)."""

RQ_HEARTBEAT_EVERY_S = 1.0
"""How often, at most, a worker renews its own registration with RQ (its hash's ``last_heartbeat``
and the TTL of its keys, ``worker_ttl`` + 60 s, minutes). RQ renews it three times a job, each three
commands sent one by one; a busy worker sends one such pipeline a second instead."""
