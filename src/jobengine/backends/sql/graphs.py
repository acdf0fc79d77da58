"""The GraphStore port (:mod:`jobengine.ports.graphs`), written once for SQLite and PostgreSQL (tables:
migration ``0013_graphs``). A graph, its node rows and its node jobs are written in one transaction.

Two steps run inside the store's own transitions: :func:`settle_in` (in the transaction that ends nodes,
so a node a failure policy lets run is queued with the failure that lets it) and :meth:`SqlGraphs.expand`
(a node's completion and the nodes it adds, in one transaction)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final

from jobengine.core.graphs import GraphRecord, GraphSpec, GraphState, Node, Policy, check_in_graph, settle
from jobengine.core.ids import GraphId, JobId
from jobengine.core.models import AddedNode, Changed, Completion, Event, Inserted, Job, NewEvent, NewJob
from jobengine.core.states import UNFINISHED

from .base import Db, Tx, conditions

_GRAPH: Final = "SELECT id, tenant, name, total, cancelled, state, created_at, updated_at, finished_at FROM {s}graphs"
_UNFINISHED: Final = "(" + ", ".join(f"'{s}'" for s in sorted(UNFINISHED)) + ")"


def _record(r: Sequence[Any]) -> GraphRecord:
    return GraphRecord(
        id=GraphId(r[0]), tenant=r[1], name=r[2], total=r[3], cancelled=bool(r[4]),
        state=GraphState(r[5]) if r[5] is not None else None, created_at=r[6], updated_at=r[7], finished_at=r[8],
    )  # fmt: skip


async def _counts(tx: Tx, ids: Sequence[str]) -> dict[str, tuple[dict[str, int], float, float | None]]:
    """Per graph: node counts by state, the progress of its unfinished nodes summed, its first start."""
    out: dict[str, tuple[dict[str, int], float, float | None]] = {i: ({}, 0.0, None) for i in ids}
    rows = await tx.rows(
        "SELECT graph_id, state, count(*), sum(CASE WHEN state IN " + _UNFINISHED + " THEN progress ELSE 0 END), "
        "min(started_at) FROM {s}jobs WHERE graph_id {in_array} GROUP BY graph_id, state",
        (tx.d.array(ids),),
    )
    for gid, state, n, progress, started in rows:
        counts, total, first = out[gid]
        counts[state] = int(n)
        if started is not None and (first is None or started < first):
            first = started
        out[gid] = (counts, total + float(progress or 0.0), first)
    return out


async def _nodes(tx: Tx, graph_id: str) -> list[Node]:
    jobs = {j.id: j for j in await tx.jobs("jobs.graph_id = ?", (graph_id,))}
    rows = await tx.rows(
        "SELECT job_id, node, policy, parents, pending FROM {s}graph_nodes WHERE graph_id = ?", (graph_id,)
    )
    nodes = [Node(r[1], Policy(r[2]), tx.d.strings(r[3]), jobs[r[0]], bool(r[4])) for r in rows if r[0] in jobs]
    return sorted(nodes, key=lambda n: n.job.id)


def ended_graphs(jobs: Iterable[Job]) -> list[str]:
    """The graphs of the nodes among ``jobs`` that ended: those :func:`settle_in` looks at."""
    return list(dict.fromkeys(j.graph_id for j in jobs if j.graph_id is not None and j.terminal))


async def settle_in(tx: Tx, graph_ids: Iterable[str], now: float) -> Changed:
    """In the transaction of a transition that ended nodes of these graphs: queue again the nodes that a
    failure policy (``continue``, ``always``) or a retry of the graph lets run now, and stop waiting for
    those that can no longer run (:func:`jobengine.core.graphs.settle`). A graph none of whose nodes ended
    dead or cancelled is passed over after one index probe; a cancelled graph is left to the engine."""
    out = Changed()
    for graph_id in dict.fromkeys(graph_ids):
        broken = await tx.rows(
            "SELECT 1 FROM {s}jobs WHERE graph_id = ? AND state IN ('dead', 'cancelled') LIMIT 1", (graph_id,)
        )
        if not broken:
            continue
        row = await tx.rows("SELECT cancelled FROM {s}graphs WHERE id = ?", (graph_id,))
        if not row or row[0][0]:
            continue
        revive, drop = settle(await _nodes(tx, graph_id), False)
        if revive:
            changed = await tx.retry_jobs([JobId(n.job.id) for n in revive], now)
            out.jobs.extend(changed.jobs)
            out.events.extend(changed.events)
        if done := [n.job.id for n in (*revive, *drop) if n.pending]:
            await tx.run("UPDATE {s}graph_nodes SET pending = NOT {true} WHERE job_id {in_array}", (tx.d.array(done),))
    return out


async def write_graph(
    tx: Tx, spec: GraphSpec, jobs: Sequence[NewJob], phases: Sequence[tuple[str, ...]], now: float
) -> Inserted:
    """Write the graph's row, its node jobs (``jobs``, parents first) and its node rows in ``tx``."""
    await tx.run(
        "INSERT INTO {s}graphs (id, tenant, name, total, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
        (spec.id, spec.tenant, spec.name, len(spec.nodes), now, now),
    )
    inserted = await tx.insert_jobs(jobs, now, phases)
    await tx.many(
        "INSERT INTO {s}graph_nodes (job_id, graph_id, node, policy, parents) VALUES (?, ?, ?, ?, ?)",
        [(n.job.id, spec.id, n.name, n.policy.value, tx.d.array(n.parents)) for n in spec.nodes],
    )
    await tx.run(
        "UPDATE {s}jobs SET graph_id = ? WHERE id IN (SELECT job_id FROM {s}graph_nodes WHERE graph_id = ?)",
        (spec.id, spec.id),
    )
    return inserted


class SqlGraphs:
    """Graphs in the store's database (:class:`jobengine.ports.graphs.GraphStore`)."""

    def __init__(self, db: Db) -> None:
        self.db = db

    async def insert_graph(
        self, spec: GraphSpec, jobs: Sequence[NewJob], phases: Sequence[tuple[str, ...]], now: float
    ) -> Inserted:
        """The graph, its node rows and its node jobs (``jobs``, parents first) in one transaction."""

        return await self.db.write(lambda tx: write_graph(tx, spec, jobs, phases, now), retry=False)

    async def get_graphs(
        self, ids: Sequence[GraphId], tenant: str | None
    ) -> list[tuple[GraphRecord, dict[str, int], float, float | None]]:
        """The graphs among ``ids`` (of ``tenant``) with their node counts (see :func:`_counts`)."""
        return await self.db.read(lambda tx: self._graphs(tx, "id {in_array}", [tx.d.array(ids)], tenant))

    async def list_graphs(
        self, tenant: str | None, limit: int, before: str | None = None
    ) -> list[tuple[GraphRecord, dict[str, int], float, float | None]]:
        """Newest first."""
        return await self.db.read(
            lambda tx: self._graphs(tx, "1 = 1", [], tenant, before=before, limit=limit),
        )

    async def _graphs(
        self, tx: Tx, base: str, params: list[Any], tenant: str | None, *, before: str | None = None,
        limit: int | None = None,
    ) -> list[tuple[GraphRecord, dict[str, int], float, float | None]]:  # fmt: skip
        where, values = conditions(("tenant = ?", tenant), ("id < ?", before), base=base)
        sql = f"{_GRAPH} WHERE {where} ORDER BY id DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        records = [_record(r) for r in await tx.rows(sql, [*params, *values])]
        counts = await _counts(tx, [r.id for r in records])
        return [(r, *counts[r.id]) for r in records]

    async def count_graphs(self) -> dict[GraphState, int]:
        """By outcome once written; an open graph is running once a node left the waiting states or
        reported progress (what :func:`jobengine.core.graphs.derive` calls started), else pending."""
        rows = await self.db.read(
            lambda tx: tx.rows(
                "SELECT g.state, CASE WHEN g.state IS NULL AND EXISTS (SELECT 1 FROM {s}jobs j WHERE "
                "j.graph_id = g.id AND (j.state NOT IN ('blocked', 'queued', 'scheduled') OR j.progress > 0)) "
                "THEN 1 ELSE 0 END AS started, count(*) FROM {s}graphs g GROUP BY 1, 2"
            )
        )
        out = dict.fromkeys(GraphState, 0)
        for state, started, n in rows:
            if state is not None:
                out[GraphState(state)] += int(n)
            else:
                out[GraphState.RUNNING if started else GraphState.PENDING] += int(n)
        return out

    async def nodes(self, graph_id: GraphId) -> list[Node]:
        """The nodes of a graph with their jobs, in the order they were submitted (parents first)."""

        return await self.db.read(lambda tx: _nodes(tx, graph_id))

    async def expand(
        self,
        completion: Completion,
        adding: str,
        nodes: Sequence[AddedNode],
        jobs: Sequence[NewJob],
        phases: Sequence[tuple[str, ...]],
        now: float,
    ) -> Changed:
        """Complete node ``adding`` (``completion``) and store the nodes it adds (``nodes`` with their
        ``jobs``, parents first) in one transaction: all of it, or nothing when the lease is no longer held
        (an empty result) or the graph does not allow them (InvalidJob naming the field, from
        :func:`jobengine.core.graphs.check_in_graph`)."""

        async def op(tx: Tx) -> Changed:
            held = await tx.rows(
                "SELECT graph_id FROM {s}jobs WHERE id = ? AND lease_token = ? AND state = 'running'{lock}",
                (completion.job_id, completion.token),
            )
            if not held or held[0][0] is None:
                return Changed()
            graph_id = held[0][0]
            # The graph's row is locked first: two nodes adding to one graph at once take turns.
            total = (await tx.rows("SELECT total FROM {s}graphs WHERE id = ?{lock}", (graph_id,)))[0][0]
            names = [n.name for n in nodes]
            wanted = list(dict.fromkeys([*names, *(c for n in nodes for c in n.before)]))
            found = await tx.rows(
                "SELECT job_id, node, policy, parents FROM {s}graph_nodes WHERE graph_id = ? AND node {in_array}",
                (graph_id, tx.d.array(wanted)),
            )
            befores = {r[1]: r for r in found if r[1] not in names}
            before_jobs = {
                j.id: j for j in await tx.jobs("jobs.id {in_array}", (tx.d.array(r[0] for r in befores.values()),))
            }
            before = {
                name: Node(name, Policy(r[2]), tx.d.strings(r[3]), before_jobs[r[0]])
                for name, r in befores.items() if r[0] in before_jobs
            }  # fmt: skip
            check_in_graph(adding, nodes, total, {r[1] for r in found if r[1] in names}, before)
            inserted = await tx.insert_jobs(jobs, now, phases)
            await tx.many(
                "INSERT INTO {s}graph_nodes (job_id, graph_id, node, policy, parents) VALUES (?, ?, ?, ?, ?)",
                [(j.id, graph_id, n.name, n.policy, tx.d.array(n.after)) for n, j in zip(nodes, jobs, strict=True)],
            )
            await tx.run(
                "UPDATE {s}jobs SET graph_id = ? WHERE id {in_array}", (graph_id, tx.d.array(j.id for j in jobs))
            )
            await tx.run(
                "UPDATE {s}graphs SET total = total + ?, updated_at = ? WHERE id = ?", (len(nodes), now, graph_id)
            )
            ids = {n.name: j.id for n, j in zip(nodes, jobs, strict=True)}
            edges: list[tuple[JobId, JobId]] = []
            for name, node in before.items():
                more = [n.name for n in nodes if name in n.before]
                await tx.run(
                    "UPDATE {s}graph_nodes SET parents = ? WHERE job_id = ?",
                    (tx.d.array([*node.parents, *more]), node.job.id),
                )
                edges += [(JobId(node.job.id), JobId(ids[m])) for m in more]
            await tx.add_edges(edges)
            done = await tx.complete_jobs([Completion(completion.job_id, completion.token, completion.result)], now)
            return Changed(done.jobs, [*inserted.events, *done.events])

        return await self.db.write(op, retry=False)

    async def node_names(self, job_ids: Sequence[JobId]) -> dict[JobId, str]:
        """The node name of each of ``job_ids`` that is a graph node (the ``graph_nodes`` primary key)."""
        if not job_ids:
            return {}
        rows = await self.db.read(
            lambda tx: tx.rows(
                "SELECT job_id, node FROM {s}graph_nodes WHERE job_id {in_array}", (tx.d.array(job_ids),)
            )
        )
        return {JobId(r[0]): r[1] for r in rows}

    async def parent_results(self, job_id: JobId) -> dict[str, Any]:
        """The results of the parents of node ``job_id`` that succeeded, by node name."""

        async def op(tx: Tx) -> dict[str, Any]:
            row = await tx.rows("SELECT graph_id, parents FROM {s}graph_nodes WHERE job_id = ?", (job_id,))
            if not row:
                return {}
            graph_id, parents = row[0][0], tx.d.strings(row[0][1])
            if not parents:
                return {}
            named = await tx.rows(
                "SELECT job_id, node FROM {s}graph_nodes WHERE graph_id = ? AND node {in_array}",
                (graph_id, tx.d.array(parents)),
            )
            names = {r[0]: r[1] for r in named}
            jobs = await tx.jobs("jobs.id {in_array}", (tx.d.array(names),))
            return {names[j.id]: j.result for j in jobs if j.final_state.value == "succeeded"}

        return await self.db.read(op)

    async def probe(self, graph_id: GraphId) -> tuple[bool, bool]:
        """(a node is unfinished, a node ended dead or cancelled): two index probes."""

        async def op(tx: Tx) -> tuple[bool, bool]:
            unfinished = await tx.rows(
                f"SELECT 1 FROM {{s}}jobs WHERE graph_id = ? AND state IN {_UNFINISHED} LIMIT 1", (graph_id,)
            )
            broken = await tx.rows(
                "SELECT 1 FROM {s}jobs WHERE graph_id = ? AND state IN ('dead', 'cancelled') LIMIT 1", (graph_id,)
            )
            return bool(unfinished), bool(broken)

        return await self.db.read(op)

    async def mark_pending(self, graph_id: GraphId, job_ids: Sequence[JobId], pending: bool, now: float) -> None:
        """Set the nodes' ``pending`` flag; a retry (``pending`` True) also reopens the graph."""

        async def op(tx: Tx) -> None:
            if job_ids:
                await tx.run(
                    f"UPDATE {{s}}graph_nodes SET pending = {'{true}' if pending else 'NOT {true}'} "
                    "WHERE job_id {in_array}",
                    (tx.d.array(job_ids),),
                )
            if pending:
                await tx.run(
                    "UPDATE {s}graphs SET cancelled = NOT {true}, state = NULL, finished_at = NULL, updated_at = ? "
                    "WHERE id = ?",
                    (now, graph_id),
                )

        await self.db.write(op, retry=True)

    async def mark_cancelled(self, graph_id: GraphId, now: float) -> None:
        await self.db.write(
            lambda tx: tx.run("UPDATE {s}graphs SET cancelled = {true}, updated_at = ? WHERE id = ?", (now, graph_id)),
            retry=True,
        )

    async def finish(self, graph_id: GraphId, state: GraphState, now: float, event: NewEvent) -> list[Event]:
        """Write the graph's outcome and append ``event``, once: a graph already finished (another process
        finished it first), or with a node unfinished or waiting on a retry, is left as it is and nothing is
        appended."""

        async def op(tx: Tx) -> list[Event]:
            # Checked again in this transaction: a retry may have reopened the graph since it was read.
            changed = await tx.run(
                "UPDATE {s}graphs SET state = ?, finished_at = ?, updated_at = ? WHERE id = ? AND state IS NULL "
                f"AND NOT EXISTS (SELECT 1 FROM {{s}}jobs WHERE graph_id = ? AND state IN {_UNFINISHED}) "
                "AND NOT EXISTS (SELECT 1 FROM {s}graph_nodes WHERE graph_id = ? AND pending = {true})",
                (state.value, now, now, graph_id, graph_id, graph_id),
            )
            return await tx.events([event], now) if changed else []

        return await self.db.write(op, retry=False)
