"""The text layouts of stored records that code relies on without decoding them: the order of a record's
fields in its JSON, as pydantic writes a model's fields (in the order the model declares them).

A job record (``records.JobRecord``, at ``job:{id}``) starts with ``JOB_HEAD``, then its request, then
``wanted``:

- ``claim.lua`` takes a queued job into planning by matching a queued record's head (its first four
  fields, then ``worker`` and ``lease_until`` both null) and writing a new head before the rest, which it
  keeps as text;
- ``transition.lua`` reads a record's version from its first four fields (anything else it decodes);
- ``worker.jobtext`` cuts a record's request out at ``REQUEST_AT`` and ``REQUEST_END`` to read and write
  it from a cache of requests.

A node's record (``reports.NodeRecord``, at ``node:{id}``) ends with ``NODE_TAIL``, the heartbeat's own
fields before it: ``heartbeat.lua`` tells a refresh (the same view under a later seq) by the text before
the first ``SEQ_AT``; ``records.stored_tail`` writes the tail after a heartbeat's own JSON.

Each reader falls back to decoding in full (or to the whole way, in ``jobtext``) when the text is not in
this layout, so a record another tool rewrote still reads right; but a change of the models' field order
would turn every record onto the slow path, and ``claim.lua`` would take no queued job by its text at
all. ``tests/worker/test_layout.py`` fails when the models' serialisation no longer holds these markers, or
a script spells them otherwise.

Pure: constants only.
"""

from __future__ import annotations

JOB_HEAD = ("schema_version", "job_id", "state", "version", "updated_at", "worker", "lease_until")
"""The first fields of every job record, in this order (``worker`` and ``lease_until`` null while no
worker holds the job). The first four hold no quote in their values: two numbers, an id and a state."""

JOB_VERSION_HEAD = JOB_HEAD[:4]
"""What ``transition.lua`` reads a version from, and ``claim.lua`` matches exactly (the version aside)."""

REQUEST_AT = ',"request":'
"""What stands before a job record's request: the field after ``JOB_HEAD``. The field before it
(``lease_until``) is a time or null, so the first of these in a record's text is the one."""

REQUEST_END = ',"wanted":'
"""What stands after a job record's request: no field of a request is named ``wanted``, so the first of
these after ``REQUEST_AT`` ends it."""

NODE_TAIL = ("seq", "schema_version", "received_at")
"""The last fields of every node record, in this order: the heartbeat's seq, then what storing it adds."""

SEQ_AT = ',"seq":'
"""What stands before a node record's seq: no value in a record holds a quote (ids, hold ids, figures), so
the first of these is the seq's."""
