"""Mutation checks of the safety rules: each rule broken on its own, in a copy of the repository, must make
the tests chosen for it fail. Run through ``scripts/mutate`` (``--list``, ``--only NAME``).

A mutation names the rule it breaks, the file, an exact snippet of that file and what replaces it, and the
tests that must catch it. The snippet must occur exactly once: when the code moves, the mutation is
reported as not applied, and the run fails, rather than passing over a rule no longer checked. To re-point
one after a change, edit its entry in ``MUTATIONS`` (the snippet is a literal copied from the file), then
``scripts/mutate --only NAME``. Each selection lists the rule's own test in ``tests/*/test_rules.py`` first,
then the older tests found to catch it; ``--every`` names every test of a selection that fails.

For each mutation the tracked and untracked-but-not-ignored files are copied to a temporary directory, the
replacement is made there, and pytest runs the selection there with the repository's interpreter
(``.venv/bin/python`` of the repository it runs from, found relative to this file; ``--python`` to
choose another). Tests failing is ``caught``; tests passing is ``missed``. First the union of the selections
runs once on an unmutated copy: a selection that fails there proves nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RUN_TIMEOUT_S = 600
"""A selection that runs this long is stopped and counted as caught: it did not pass (pytest's own
per-test timeout, 120 s in pyproject, usually stops a hang first)."""


@dataclass(frozen=True)
class Mutation:
    name: str
    rule: str
    """The rule it breaks, in one line."""
    path: str
    """The file, relative to the repository's root."""
    snippet: str
    """Exact text that must occur once in ``path``."""
    replacement: str
    tests: tuple[str, ...]
    """pytest node ids or files that must fail with the mutation made."""


MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        name="commit-free-cards",
        rule="a commit re-checks the node's free cards (busy outside modelplan) before holding them",
        path="worker/lua/transition.lua",
        snippet=" or (gpus > 0 and node.free_gpus - unseen_gpus < gpus)",
        replacement="",
        tests=(
            "tests/worker/test_rules.py::test_commit_refuses_cards_busy_outside_modelplan",
            "tests/worker/test_lifecycle.py::test_two_plans_from_one_snapshot_cannot_both_take_the_card",
        ),
    ),
    Mutation(
        name="commit-unseen-cards",
        rule="one card never to two jobs: holds the node has not yet reported started count against its free cards",
        path="worker/lua/transition.lua",
        snippet="node.free_gpus - unseen_gpus < gpus",
        replacement="node.free_gpus < gpus",
        tests=(
            "tests/worker/test_rules.py::test_one_card_is_never_held_for_two_jobs",
            "tests/worker/test_lifecycle.py::test_two_plans_from_one_snapshot_cannot_both_take_the_card",
        ),
    ),
    Mutation(
        name="commit-total-cards",
        rule="the holds on a node never add up to more cards than it has",
        path="worker/lua/transition.lua",
        snippet="if all_gpus + gpus > node.gpus or ",
        replacement="if ",
        tests=("tests/worker/test_rules.py::test_holds_never_pass_a_nodes_cards",),
    ),
    Mutation(
        name="commit-free-host",
        rule="a commit re-checks the node's free host memory, less the CPU holds it has not yet reported started",
        path="worker/lua/transition.lua",
        snippet="node.host_free_gb - unseen_host < host_gb",
        replacement="node.host_free_gb < host_gb",
        tests=(
            "tests/worker/test_rules.py::test_two_cpu_replicas_never_share_the_same_ram",
            "tests/worker/test_rules.py::test_two_cpu_plans_from_one_snapshot_cannot_both_take_the_ram",
        ),
    ),
    Mutation(
        name="commit-holds-summed",
        rule="the holds one commit writes on one node are checked together against its room, not each alone",
        path="worker/lua/transition.lua",
        snippet="  local add = adding[node_id] or {gpus = 0, host = 0}\n",
        replacement="  local add = {gpus = 0, host = 0}\n",
        tests=(
            "tests/worker/test_rules_replicas.py::test_two_holds_on_one_node_in_one_commit_count_together_against_its_cards",
            "tests/worker/test_rules_replicas.py::test_two_cpu_holds_on_one_node_in_one_commit_count_together_against_its_ram",
        ),
    ),
    Mutation(
        name="commit-version",
        rule="a commit made from an older version of the job's record is refused as stale",
        path="worker/lua/transition.lua",
        snippet="if current ~= ARGV[2] then",
        replacement="if false then",
        tests=(
            "tests/worker/test_rules.py::test_a_commit_from_an_older_version_is_stale",
            "tests/worker/test_lifecycle.py::test_a_commit_reads_the_stored_version_however_the_record_is_laid_out",
        ),
    ),
    Mutation(
        name="commit-epoch",
        rule="a job left waiting is woken when capacity freed (the epoch moved) while it was being planned",
        path="worker/lua/transition.lua",
        snippet="if ARGV[8] ~= '' and tostring(redis.call('GET', KEYS[8]) or '0') ~= ARGV[8] then",
        replacement="if false then",
        tests=(
            "tests/worker/test_rules.py::test_a_wait_planned_before_capacity_freed_is_woken",
            "tests/worker/test_lifecycle.py::test_cards_freed_while_a_job_is_planned_into_waiting_still_wake_it",
        ),
    ),
    Mutation(
        name="claim-once",
        rule="a job another worker is planning under a live lease is not claimed again: one planner a job",
        path="worker/planning.py",
        snippet="if rec.state is not JobState.QUEUED and not expired:",
        replacement="if rec.state is not JobState.QUEUED and rec.state is not JobState.PLANNING:",
        tests=(
            "tests/worker/test_rules.py::test_a_job_being_planned_is_not_claimed_by_a_second_worker",
            "tests/worker/test_lifecycle.py::test_a_claim_rewrites_only_the_head_of_a_queued_record",
        ),
    ),
    Mutation(
        name="lost-node-own-replicas",
        rule="a node lost (silent, or restarted) takes only its own replicas: the job's others keep their holds",
        path="worker/moves.py",
        snippet="            if p.node_id == node_id\n            and (boot_id is None",
        replacement="            if (boot_id is None",
        tests=(
            "tests/worker/test_rules_replicas.py::test_a_silent_node_takes_only_its_own_replicas",
            "tests/worker/test_rules_replicas.py::test_a_restarted_node_takes_only_its_own_replicas",
        ),
    ),
    Mutation(
        name="scale-cap",
        rule="a job is never scaled past the replicas a request may ask (256): refused, nothing changed",
        path="worker/scaling.py",
        snippet="    check_replicas(replicas)\n\n    def attempt() -> JobRecord | Again:",
        replacement="    def attempt() -> JobRecord | Again:",
        tests=("tests/worker/test_rules_replicas.py::test_a_job_is_never_scaled_past_the_replicas_a_request_may_ask",),
    ),
    Mutation(
        name="vet-function",
        rule="a worker refuses a queued job naming a function that is not one of modelplan's planning jobs",
        path="worker/queueing.py",
        snippet='raise Refused(job.id, name, "which is not one of modelplan\'s job functions")',
        replacement="return name, tuple(args)",
        tests=(
            "tests/worker/test_rules.py::test_a_worker_refuses_a_queued_job_of_another_function",
            "tests/reliability/test_queue_guard.py::test_only_modelplans_jobs_run_under_the_readme_acl_user",
        ),
    ),
    Mutation(
        name="vet-prefix",
        rule="a worker refuses a queued job for another prefix than its own",
        path="worker/queueing.py",
        snippet="if args[0] != prefix:",
        replacement="if False:",
        tests=(
            "tests/worker/test_rules.py::test_a_worker_refuses_a_queued_job_for_another_prefix",
            "tests/reliability/test_queue_guard.py::test_a_tenant_cannot_make_another_tenants_worker_do_anything",
        ),
    ),
    Mutation(
        name="rank-cards-before-precision",
        rule="ranking puts fewer cards before better precision",
        path="planner/options.py",
        snippet="return (o.cpu, o.gpus, o.nodes, -quality(o), not o.free_now",
        replacement="return (o.cpu, -quality(o), o.gpus, o.nodes, not o.free_now",
        tests=("tests/planner/test_rules.py::test_fewer_cards_rank_before_better_precision",),
    ),
    Mutation(
        name="rank-card-before-cpu",
        rule="ranking puts any card before the CPU",
        path="planner/options.py",
        snippet="return (o.cpu, o.gpus, o.nodes, -quality(o), not o.free_now",
        replacement="return (not o.cpu, o.gpus, o.nodes, -quality(o), not o.free_now",
        tests=(
            "tests/planner/test_rules.py::test_a_card_ranks_before_the_cpu",
            "tests/planner/test_seed_rules.py::test_busy_is_not_unfit",
        ),
    ),
    Mutation(
        name="rank-busy-is-not-unfit",
        rule="whether cards are free now only breaks a tie in the ranking, it never leads it",
        path="planner/options.py",
        snippet="return (o.cpu, o.gpus, o.nodes, -quality(o), not o.free_now",
        replacement="return (not o.free_now, o.cpu, o.gpus, o.nodes, -quality(o)",
        tests=(
            "tests/planner/test_rules.py::test_busy_cards_rank_by_their_hardware",
            "tests/planner/test_seed_rules.py::test_busy_is_not_unfit",
        ),
    ),
    Mutation(
        name="wake-fallback-classes",
        rule="a job with fallbacks is woken by every class it can run on",
        path="worker/classes.py",
        snippet="    if rec.request.fallback:\n        same = list(alternatives)",
        replacement="    if False:\n        same = list(alternatives)",
        tests=("tests/worker/test_rules.py::test_a_fallback_job_is_woken_by_every_class_it_can_run_on",),
    ),
    Mutation(
        name="wake-equal-classes",
        rule="a waiting job is woken by every class ranked equal to its best on the hardware",
        path="worker/classes.py",
        snippet="            if rank == key:\n                same.append(o)",
        replacement="            if rank == key:\n                pass",
        tests=(
            "tests/worker/test_rules.py::test_a_waiting_job_is_woken_by_every_class_equal_to_its_best",
            "tests/worker/test_wake_equal.py::test_pending_for_names_every_class_ranked_equal",
        ),
    ),
    Mutation(
        name="kv-bytes-per-element",
        rule="the KV cache per token counts two bytes a value (bf16/fp16), keys and values",
        path="planner/shape.py",
        snippet=") * KV_BYTES_PER_ELEMENT\n    kv += len(attention)",
        replacement=")\n    kv += len(attention)",
        tests=(
            "tests/planner/test_rules.py::test_kv_cache_bytes_per_token_of_a_plain_decoder",
            "tests/planner/test_config_rules.py::test_mimo_sliding_layers_keep_their_own_kv_heads",
        ),
    ),
    Mutation(
        name="kv-values-counted",
        rule="the KV cache per token counts the values as well as the keys",
        path="planner/shape.py",
        snippet='per_layer = kv_heads * (head_dim + whole("v_head_dim", default=head_dim))',
        replacement="per_layer = kv_heads * head_dim",
        tests=(
            "tests/planner/test_rules.py::test_kv_cache_bytes_per_token_of_a_plain_decoder",
            "tests/planner/test_config_rules.py::test_mimo_sliding_layers_keep_their_own_kv_heads",
        ),
    ),
    Mutation(
        name="heartbeat-seq-refresh",
        rule="a refresh heartbeat (same figures) with a seq no later than the stored one is refused as stale",
        path="worker/lua/heartbeat.lua",
        snippet="if tonumber(old_seq) >= tonumber(seq) then",
        replacement="if false then",
        tests=(
            "tests/worker/test_rules.py::test_a_heartbeat_with_an_older_seq_is_refused",
            "tests/worker/test_lifecycle.py::test_a_batch_of_heartbeats_is_stored_as_one_at_a_time_would_be",
        ),
    ),
    Mutation(
        name="heartbeat-seq-change",
        rule="a heartbeat with new figures and a seq no later than the stored one is refused as stale",
        path="worker/lua/heartbeat.lua",
        snippet="      if old.seq >= new.seq then\n        return 'stale', 0",
        replacement="      if false then\n        return 'stale', 0",
        tests=(
            "tests/worker/test_rules.py::test_a_heartbeat_with_an_older_seq_is_refused",
            "tests/worker/test_lifecycle.py::test_an_older_heartbeat_changes_nothing",
        ),
    ),
    Mutation(
        name="owner-acts",
        rule="a client cannot release, cancel or scale another client's job",
        path="worker/owners.py",
        snippet="    if acting is not ANYONE and rec.owner != acting:\n        raise NotOwner(rec.job_id)",
        replacement="    if False:\n        raise NotOwner(rec.job_id)",
        tests=(
            "tests/worker/test_rules.py::test_a_client_cannot_act_on_another_clients_job",
            "tests/worker/test_owners.py::test_no_one_but_its_owner_releases_cancels_scales_or_resubmits_a_job",
        ),
    ),
    Mutation(
        name="owner-submit",
        rule="a client cannot submit again under the id of another client's job",
        path="worker/owners.py",
        snippet="    if acting is not ANYONE and rec.owner != acting:\n        raise JobTaken(rec.job_id)",
        replacement="    if False:\n        raise JobTaken(rec.job_id)",
        tests=(
            "tests/worker/test_rules.py::test_a_client_cannot_submit_over_another_clients_job",
            "tests/worker/test_owners.py::test_no_one_but_its_owner_releases_cancels_scales_or_resubmits_a_job",
        ),
    ),
    Mutation(
        name="acl-agent-one-node",
        rule="an agent's login writes its own node's record, no other node's",
        path="producer/roles.py",
        snippet='f"~{p}:node:{nodes}",',
        replacement='f"~{p}:node:*",',
        tests=(
            "tests/worker/test_rules.py::test_an_agent_rule_reaches_its_own_node_alone",
            "tests/reliability/test_roles.py::test_an_agent_cannot_speak_for_another_node",
        ),
    ),
    Mutation(
        name="acl-client-reads-jobs",
        rule="a client's login only reads job records, never writes them",
        path="producer/roles.py",
        snippet='*(f"%R~{p}" for p in reads)',
        replacement='*(f"~{p}" for p in reads)',
        tests=(
            "tests/worker/test_rules.py::test_a_client_rule_reads_job_records_and_writes_only_its_own_keys",
            "tests/reliability/test_roles.py::test_a_client_acts_on_its_own_jobs_only",
        ),
    ),
    Mutation(
        name="acl-no-eval",
        rule="no role but the operator runs a script of its own (EVAL, SCRIPT LOAD): FCALL only",
        path="producer/roles.py",
        snippet='SCRIPTING = ("fcall",)',
        replacement='SCRIPTING = ("fcall", "eval")',
        tests=(
            "tests/worker/test_rules.py::test_no_role_but_the_operator_may_eval",
            "tests/reliability/test_roles.py::test_no_role_runs_lua_of_its_own",
        ),
    ),
    Mutation(
        name="acl-worker-every-step",
        rule="the worker's rule allows every command its periodic steps run, HKEYS of the waiting recount among them",
        path="producer/roles.py",
        snippet='"hgetall", "hkeys", "hmget"',
        replacement='"hgetall", "hmget"',
        tests=(
            "tests/reliability/test_role_steps.py::test_a_waiting_job_beside_a_free_card_is_placed_by_the_sweep_under_the_workers_rule",
            "tests/reliability/test_role_steps.py::test_every_periodic_step_runs_under_its_roles_rule",
        ),
    ),
    Mutation(
        name="unheld-replanned",
        rule="a replica whose hold is gone from its node is planned again by the sweep, never left on unreserved cards",
        path="worker/unheld.py",
        snippet="        if not isinstance(found, Exception) and not found:",
        replacement="        if False:",
        tests=(
            "tests/worker/test_unheld.py::test_a_placed_replica_whose_hold_is_gone_is_placed_again",
            "tests/worker/test_unheld.py::test_its_card_taken_meanwhile_is_not_booked_twice",
        ),
    ),
    Mutation(
        name="wait-not-fallback",
        rule="a job whose best cards are busy waits for them, rather than falls to a worse option (the CPU)",
        path="planner/decide.py",
        snippet="        if fallback:\n            for o in ranked[1:]:",
        replacement="        if True:\n            for o in ranked[1:]:",
        tests=(
            "tests/planner/test_rules.py::test_a_job_whose_best_cards_are_busy_waits",
            "tests/worker/test_fallbacks_replicas.py::test_without_the_flag_it_waits",
        ),
    ),
    Mutation(
        name="zero-frees-cards",
        rule="a job scaled to zero replicas holds no card: no held card without a placed replica",
        path="worker/scaling.py",
        snippet="score=now_ms(), clear=clear_all(rec))",
        replacement="score=now_ms())",
        tests=(
            "tests/worker/test_scale_to_zero.py::test_a_placed_job_scaled_to_zero_frees_its_cards_and_comes_back",
            "tests/worker/test_scale_to_zero.py::test_a_waiting_job_scaled_to_zero_lets_its_held_cards_go",
        ),
    ),
    Mutation(
        name="observed-quorum",
        rule="what the engines held moves a plan only where a quorum of nodes ran it: one node's word does not",
        path="planner/observed.py",
        snippet="        if len(nodes) < quorum:\n            continue",
        replacement="        if not nodes:\n            continue",
        tests=(
            "tests/planner/test_observed.py::test_one_nodes_runs_leave_the_option_to_the_formula",
            "tests/worker/test_observed_nodes.py::test_one_nodes_runs_leave_the_plan_to_the_formula_and_two_nodes_agreeing_move_it",
        ),
    ),
    Mutation(
        name="observed-robust-figure",
        rule="the figure a plan counts is the one a quorum of nodes reached, never the largest one node said",
        path="planner/observed.py",
        snippet="figure = sorted(nodes.values(), reverse=True)[quorum - 1]",
        replacement="figure = sorted(nodes.values(), reverse=True)[0]",
        tests=(
            "tests/planner/test_observed.py::test_the_figure_is_what_the_quorum_of_nodes_reached_not_the_largest",
            "tests/worker/test_observed_nodes.py::test_one_nodes_runs_leave_the_plan_to_the_formula_and_two_nodes_agreeing_move_it",
        ),
    ),
    Mutation(
        name="observed-releases-apart",
        rule="runs of different engine releases are never pooled: a plan compares the runs of one release",
        path="planner/observed.py",
        snippet="nodes = by_release.setdefault(s.release, {})",
        replacement='nodes = by_release.setdefault("", {})',
        tests=("tests/planner/test_observed.py::test_releases_are_kept_apart_and_the_one_most_nodes_run_counts",),
    ),
    Mutation(
        name="observed-release-evicts-none",
        rule="a release one node names (999.0) drops no other node's runs",
        path="worker/observations.py",
        snippet="x.node != run.node and x.at >= oldest",
        replacement="x.node != run.node and x.version == run.version and x.at >= oldest",
        tests=("tests/worker/test_observed_nodes.py::test_a_made_up_engine_release_drops_no_other_nodes_runs",),
    ),
    Mutation(
        name="observed-one-slot-a-node",
        rule="one node's runs of a kind fill one slot, whatever holds it reports for",
        path="worker/observations.py",
        snippet="x.node != run.node and x.at >= oldest",
        replacement="x.hold_id != run.hold_id and x.at >= oldest",
        tests=("tests/worker/test_observed_nodes.py::test_one_nodes_many_holds_fill_one_slot",),
    ),
    Mutation(
        name="observed-flagged-apart",
        rule="flagged footprints are kept apart from accepted runs and never push one out",
        path="worker/observations.py",
        snippet="    if run.flagged:\n",
        replacement="    if False:\n",
        tests=(
            "tests/worker/test_observed_nodes.py::test_a_flagged_footprint_of_the_same_hold_keeps_its_accepted_run",
            "tests/worker/test_observed_nodes.py::test_flagged_runs_are_kept_apart_within_their_own_bound",
        ),
    ),
    Mutation(
        name="observed-window-size",
        rule="a kind keeps exactly OBSERVED_NODES_KEPT nodes' runs",
        path="worker/observations.py",
        snippet="return (*others, run)[-nodes:]",
        replacement="return (*others, run)[-nodes + 1 :]",
        tests=("tests/worker/test_observed_nodes.py::test_the_window_keeps_the_latest_nodes_at_its_edge",),
    ),
    Mutation(
        name="observed-window-latest",
        rule="past OBSERVED_NODES_KEPT nodes, the node written longest ago goes, never the latest",
        path="worker/observations.py",
        snippet="return (*others, run)[-nodes:]",
        replacement="return (*others, run)[:nodes]",
        tests=("tests/worker/test_observed_nodes.py::test_the_window_keeps_the_latest_nodes_at_its_edge",),
    ),
    Mutation(
        name="observed-never-rules-out",
        rule="an observation never rules out an option the formula allows: it stays, counted by the formula",
        path="planner/observed.py",
        snippet='out.append(_noted(o, found, need, f"the {o.have_gb:.1f} GiB its cards offer"))',
        replacement="pass",
        tests=(
            "tests/planner/test_observed.py::test_an_option_whose_cards_would_not_hold_what_was_seen_stays_as_the_formula_counted_it",
            "tests/worker/test_observed_nodes.py::test_nodes_agreeing_on_more_than_the_cards_offer_leave_the_option_to_the_formula",
        ),
    ),
)


def by_name() -> dict[str, Mutation]:
    out: dict[str, Mutation] = {}
    for m in MUTATIONS:
        if m.name in out:
            raise ValueError(f"mutation {m.name!r} is listed twice")
        if m.snippet == m.replacement:
            raise ValueError(f"mutation {m.name!r}: its replacement is its snippet")
        if not m.tests:
            raise ValueError(f"mutation {m.name!r} names no test")
        out[m.name] = m
    return out


def default_python(root: Path) -> Path:
    """The checkout's own interpreter, ``root/.venv/bin/python``, whether or not it exists (``main`` says
    when it does not)."""
    return root / ".venv" / "bin" / "python"


def tracked_files(root: Path) -> list[str]:
    """The files git tracks in ``root``'s working tree, and the untracked ones it does not ignore."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout
    return sorted({p for p in out.decode().split("\0") if p and (root / p).is_file()})


def copy_tree(root: Path, files: Sequence[str], into: Path) -> None:
    for rel in files:
        dest = into / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, dest)


class NotApplied(Exception):
    """A mutation's snippet is not in its file exactly once (the code moved), or the file is gone."""


def apply(m: Mutation, tree: Path) -> None:
    target = tree / m.path
    if not target.is_file():
        raise NotApplied(f"{m.name}: {m.path} does not exist")
    source = target.read_text()
    count = source.count(m.snippet)
    if count != 1:
        raise NotApplied(f"{m.name}: its snippet occurs {count} times in {m.path}, not once: re-point it")
    target.write_text(source.replace(m.snippet, m.replacement))


def run_tests(python: Path, tree: Path, tests: Sequence[str], *, stop_first: bool) -> tuple[int, str]:
    """pytest's exit code and the last lines of its output, run in ``tree``."""
    cmd = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *(["-x"] if stop_first else []), *tests]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tree)}
    try:
        done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return -1, f"stopped after {RUN_TIMEOUT_S} s"
    lines = (done.stdout + done.stderr).strip().splitlines()
    # pytest's summary lines: "FAILED <node id> - <message>", a node id's parameters may hold spaces
    failed = [
        line.split(" ", 1)[1].split(" - ", 1)[0] for line in lines if line.startswith(("FAILED tests/", "ERROR tests/"))
    ]
    if done.returncode in (1, 2) and failed:
        return done.returncode, "by " + ", ".join(failed)
    if done.returncode == 0 and lines:
        return 0, lines[-1].strip("= ")  # pytest's summary: "N passed in T s"
    return done.returncode, "\n".join(lines[-15:])


def check_imports(python: Path, root: Path, files: Sequence[str]) -> None:
    """Refuses to go on if the interpreter, run in a copy, imports the packages from anywhere but the copy
    (an installed modelplan that shadows it would make every mutation pass unseen)."""
    with tempfile.TemporaryDirectory(prefix="mutate-imports-") as tmp:
        tree = Path(tmp)
        copy_tree(root, [f for f in files if f.startswith(("planner/", "producer/", "worker/"))], tree)
        _imports_from(python, tree)


def _imports_from(python: Path, tree: Path) -> None:
    code = "import planner, producer, worker; print(planner.__file__, producer.__file__, worker.__file__)"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(tree)}
    out = subprocess.run([str(python), "-c", code], cwd=tree, env=env, capture_output=True, text=True)
    if out.returncode:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"mutate: {python} cannot import modelplan's packages ({last}); give --python")
    for path in out.stdout.split():
        if not Path(path).resolve().is_relative_to(tree.resolve()):
            raise SystemExit(f"mutate: {python} imports {path}, not the copy in {tree}; cannot test mutations")


def selections(ms: Sequence[Mutation]) -> list[str]:
    return sorted({t for m in ms for t in m.tests})


def baseline(python: Path, root: Path, files: Sequence[str], ms: Sequence[Mutation]) -> bool:
    with tempfile.TemporaryDirectory(prefix="mutate-base-") as tmp:
        tree = Path(tmp)
        copy_tree(root, files, tree)
        started = time.monotonic()
        code, tail = run_tests(python, tree, selections(ms), stop_first=False)
        took = time.monotonic() - started
    if code != 0:
        print(f"baseline: the selections fail without any mutation (pytest exit {code}, {took:.0f} s):\n{tail}")
        return False
    print(f"baseline: the selections pass without mutations: {tail} ({took:.0f} s)")
    return True


def run_one(python: Path, root: Path, files: Sequence[str], m: Mutation, *, every: bool = False) -> tuple[str, str]:
    """``caught``, ``missed``, ``not applied`` or ``broken`` (the selection did not run), with a detail."""
    with tempfile.TemporaryDirectory(prefix=f"mutate-{m.name}-") as tmp:
        tree = Path(tmp)
        copy_tree(root, files, tree)
        try:
            apply(m, tree)
        except NotApplied as e:
            return "not applied", str(e)
        started = time.monotonic()
        code, tail = run_tests(python, tree, m.tests, stop_first=not every)
        took = f"{time.monotonic() - started:.0f} s"
    if code in (1, 2, -1):  # tests failed, collection failed, or it hung
        return "caught", f"{took} {tail}" if tail.startswith("by ") else took
    if code == 0:
        return "missed", f"{took}; the selection passes with the mutation made"
    return "broken", f"pytest exit {code}:\n{tail}"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/mutate", description=__doc__.split("\n\n")[0])
    p.add_argument("--list", action="store_true", help="list the mutations and exit")
    p.add_argument("--only", action="append", metavar="NAME", help="run this mutation only (repeatable)")
    p.add_argument("--python", type=Path, help="the interpreter to run the tests with")
    p.add_argument("--no-baseline", action="store_true", help="skip the run of the selections without mutations")
    p.add_argument("--every", action="store_true", help="run each whole selection, naming every test that fails")
    args = p.parse_args(argv)

    known = by_name()
    if args.list:
        try:
            for m in MUTATIONS:
                print(f"{m.name}\t{m.path}\t{m.rule}\t{' '.join(m.tests)}")
        except BrokenPipeError:  # a reader that stopped early (| head)
            sys.stderr.close()
        return 0
    chosen = list(MUTATIONS)
    if args.only:
        unknown = [n for n in args.only if n not in known]
        if unknown:
            print(f"mutate: no mutation named {', '.join(unknown)} (see --list)", file=sys.stderr)
            return 2
        chosen = [known[n] for n in args.only]

    root = ROOT
    python = args.python or default_python(root)
    if not python.exists():
        print(f"mutate: no {python}; run scripts/setup, or give --python", file=sys.stderr)
        return 2
    files = tracked_files(root)
    started = time.monotonic()
    check_imports(python, root, files)
    if not args.no_baseline and not baseline(python, root, files, chosen):
        return 1
    tally: dict[str, list[str]] = {}
    for m in chosen:
        outcome, detail = run_one(python, root, files, m, every=args.every)
        tally.setdefault(outcome, []).append(m.name)
        print(f"{outcome:<11} {m.name:<28} {detail}", flush=True)
    caught = len(tally.get("caught", []))
    print(f"{caught} of {len(chosen)} caught in {time.monotonic() - started:.0f} s", end="")
    bad = {k: v for k, v in tally.items() if k != "caught"}
    print("".join(f"; {k}: {', '.join(v)}" for k, v in sorted(bad.items())))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
