"""The embedded store: SQLite in WAL mode, one writer connection with group commit.

Why not aiosqlite: it hops to its thread once per statement; here a whole batch of operations from
many concurrent requests runs in ONE hop and ONE transaction (group commit), each operation inside
its own SAVEPOINT so one failing operation does not undo the others. Reads go to separate
connections (WAL lets them run beside the writer). Several processes may share the file: writes
take `BEGIN IMMEDIATE` and wait out each other with `busy_timeout`.
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar, cast

from gateway import ids
from gateway.jobs import (
    RUNNABLE,
    TERMINAL,
    DeliveryState,
    JobStatus,
    WebhookEvent,
    check_path,
)
from gateway.store.base import (
    Attempt,
    CasResult,
    Delivery,
    DeliverySummary,
    FilterOutcome,
    Job,
    JobChanges,
    NewDelivery,
    NewJob,
    PolicyRecord,
    QueueStat,
    QueueStats,
    StoreError,
    expiry_changes,
)
from gateway.store.rows import (
    QUEUES,
    STOPS_DELIVERY,
    Row,
    from_json,
    initial_state,
    row_to_attempt,
    row_to_delivery,
    row_to_job,
    to_json,
)
from gateway.store.sqlfile import load_migrations, load_queries

T = TypeVar("T")

_Q = load_queries("gateway.store", "sqlite_queries.sql")
_JOB_COLS = " ".join(_Q["job_columns"].split())
_DELIVERY_COLS = " ".join(_Q["delivery_columns"].split())
Q = {k: v.replace("{job_columns}", _JOB_COLS) for k, v in _Q.items()}
_NOTICE = WebhookEvent.AWAITING_RESPONSE.value

_MAX_BATCH = 512
# A write carrying more text than this (a job's messages, verdicts and webhook bodies) runs with its
# batch on the writer thread: copying that much into pages would stall the event loop for
# milliseconds, where other clients' requests wait.
_LONG_WRITE_CHARS = 64 * 1024

# CPython's sqlite3 binds int, float, str and bytearray directly, but sends None and bytes through
# its adapter lookup, which builds and throws away two AttributeErrors per parameter (`__adapt__`,
# `__conform__`): a job's insert binds a dozen of them. An identity adapter in the registry answers
# that lookup first. Neither type is one whose registration slows every other type's binding.
sqlite3.register_adapter(type(None), cast("Callable[[None], None]", {}.get))  # {}.get(None) is None
sqlite3.register_adapter(bytes, bytes)  # bytes(b) is b for bytes


def _text_size(changes: JobChanges, deliveries: Sequence[NewDelivery] = ()) -> int:
    """Roughly how much text a transition writes: enough to tell a long write from a short one."""
    size = len(changes.input_text or "") + len(changes.output_text or "")
    for verdict in (changes.inbound, changes.outbound):
        if verdict is not None:
            message = verdict.get("message")
            size += 2 * len(message) if isinstance(message, str) else 0
    return size + sum(len(d.body) for d in deliveries)


def _delivery_args(
    d: NewDelivery, job_id: str, now: float, claim_for: str | None, lease: float
) -> dict[str, Any]:
    """A new, unsent delivery: due now, or already leased to `claim_for` (who sends it at once)."""
    return {
        "id": d.id,
        "job_id": job_id,
        "event": d.event,
        "url": d.url,
        "body": d.body,
        "now": now,
        "deadline": d.deadline,
        "due_at": now + lease if claim_for else now,
        "lease_owner": claim_for,
    }


def _attempt_args(a: Attempt, number: int) -> dict[str, Any]:
    return {
        "delivery_id": a.delivery_id,
        "job_id": a.job_id,
        "event": a.event,
        "attempt": number,
        "started_at": a.started_at,
        "duration_ms": a.duration_ms,
        "status_code": a.status_code,
        "error": a.error,
        "response_excerpt": a.response_excerpt,
        "next_attempt_at": a.next_attempt_at,
    }


def _summaries(conn: sqlite3.Connection, job_ids: Sequence[str]) -> dict[str, DeliverySummary]:
    """Fold each job's deliveries into the contract's `delivery` object."""
    if not job_ids:
        return {}
    marks = ",".join("?" * len(job_ids))
    rows = conn.execute(
        "SELECT job_id, attempts, last_attempt_at, last_status_code, last_error, state, next_attempt_at"
        f" FROM deliveries WHERE job_id IN ({marks})",
        tuple(job_ids),
    ).fetchall()
    acc: dict[str, list[Row]] = {}
    for row in rows:
        acc.setdefault(row[0], []).append(row)
    out: dict[str, DeliverySummary] = {}
    for job_id, group in acc.items():
        last = max(group, key=lambda g: g[2] if g[2] is not None else -1.0)
        pending = [g[6] for g in group if g[5] == "pending" and g[6] is not None]
        out[job_id] = DeliverySummary(
            attempts=sum(g[1] for g in group),
            last_attempt_at=last[2],
            last_status_code=last[3],
            next_attempt_at=min(pending) if pending else None,
            last_error=last[4],
        )
    return out


def _with_summaries(conn: sqlite3.Connection, rows: Sequence[Row]) -> list[Job]:
    with_hooks = [r[0] for r in rows if r[9] is not None]
    sums = _summaries(conn, with_hooks)
    empty = DeliverySummary(0, None, None, None, None)
    return [row_to_job(r, sums.get(r[0], empty) if r[9] is not None else None) for r in rows]


def _connect(path: str, synchronous: str, busy_timeout: float) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=busy_timeout)
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.execute("PRAGMA cache_size = -65536")
    return conn


class _Thread:
    """One sqlite3 connection, used only from its own thread."""

    def __init__(self, path: str, synchronous: str, busy_timeout: float, name: str) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._path = path
        self._synchronous = synchronous
        self._busy_timeout = busy_timeout
        self.conn: sqlite3.Connection | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.conn = await loop.run_in_executor(
            self._pool, _connect, self._path, self._synchronous, self._busy_timeout
        )

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self.conn
        assert conn is not None, "store is not open"
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, fn, conn)

    async def stop(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._pool, conn.close)
        self._pool.shutdown(wait=True)


Op = Callable[[sqlite3.Connection], Any]


def _begin(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")


def _begin_at_once(conn: sqlite3.Connection, busy_timeout_ms: int) -> bool:
    """`BEGIN IMMEDIATE` if the write lock is free now (True); False, with nothing begun, if
    another process holds it. Never waits: the busy timeout is off for this one statement."""
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if conn.in_transaction or not _is_busy(exc):
            raise
        return False
    finally:
        conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
    return True


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(exc) or "busy" in str(exc)


def _commit(conn: sqlite3.Connection) -> None:
    try:
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _run_batch_here(conn: sqlite3.Connection, fns: Sequence[Op]) -> list[Any]:
    """A whole batch in the calling thread (the writer's): for batches with long operations."""
    _begin(conn)
    try:
        out = _run_ops(conn, fns)
    except BaseException:
        _rollback(conn)
        raise
    if out is None:
        _rollback(conn)
        return _run_batch_isolated(conn, fns)
    _commit(conn)
    return out


def _run_ops(conn: sqlite3.Connection, fns: Sequence[Op]) -> list[Any] | None:
    """Run a batch's operations inside the open transaction; None if one raised something other
    than an OperationalError (a bug or a constraint, never a race: the writer is serialised), in
    which case the caller rolls back and runs the batch again with `_run_batch_isolated`."""
    try:
        return [fn(conn) for fn in fns]
    except sqlite3.OperationalError:
        raise
    except Exception:
        return None


def _run_batch_isolated(
    conn: sqlite3.Connection, fns: Sequence[Callable[[sqlite3.Connection], Any]]
) -> list[Any]:
    out: list[Any] = []
    conn.execute("BEGIN IMMEDIATE")
    try:
        for fn in fns:
            conn.execute("SAVEPOINT op")
            try:
                value = fn(conn)
            except sqlite3.OperationalError:
                raise
            except Exception as exc:  # report it to its caller only
                conn.execute("ROLLBACK TO op")
                conn.execute("RELEASE op")
                out.append(_Failed(exc))
            else:
                conn.execute("RELEASE op")
                out.append(value)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return out


class _Failed:
    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def sqlite_path(url: str) -> str:
    """`sqlite:///var/gateway.db` (relative), `sqlite:////abs/path.db`, or `sqlite://:memory:`."""
    rest = url.split("://", 1)[1] if "://" in url else url
    if rest.startswith("/"):
        rest = rest[1:]
    return rest or ":memory:"


class SqliteStore:
    def __init__(
        self, url: str, *, synchronous: str = "NORMAL", readers: int = 2, busy_timeout: float = 5.0
    ) -> None:
        self.path = sqlite_path(url)
        if self.path == ":memory:":
            raise ValueError("use a file path: readers and the writer need to share the database")
        sync = synchronous.upper()
        if sync not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise ValueError(f"bad synchronous setting {synchronous!r}")
        self._writer = _Thread(self.path, sync, busy_timeout, "sqlite-writer")
        self._busy_timeout_ms = int(busy_timeout * 1000)
        self._readers = [_Thread(self.path, sync, busy_timeout, f"sqlite-reader-{i}") for i in range(readers)]
        self._next_reader = itertools.cycle(range(readers))
        self._pending: list[tuple[Callable[[sqlite3.Connection], Any], asyncio.Future[Any], bool]] = []
        self._drainer: asyncio.Task[None] | None = None

    # ---- plumbing -------------------------------------------------------------------------

    async def open(self) -> None:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        await self._writer.start()
        await self._writer.run(self._migrate)
        for reader in self._readers:
            await reader.start()

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations"
                " (version INTEGER PRIMARY KEY, name TEXT NOT NULL)"
            )
            done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
            for mig in load_migrations("gateway.store", "sqlite"):
                if mig.version in done:
                    continue
                for statement in _split_sql(mig.sql):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES (?, ?)", (mig.version, mig.name)
                )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    async def close(self) -> None:
        if self._drainer is not None:
            await asyncio.gather(self._drainer, return_exceptions=True)
        await self._writer.stop()
        for reader in self._readers:
            await reader.stop()

    def on_work(self, callback: Callable[[str], None]) -> None:
        """SQLite has no cross-process signal: other processes' work is found by polling."""

    async def ping(self) -> None:
        await self._read(lambda c: c.execute("SELECT 1").fetchone())

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        reader = self._readers[next(self._next_reader)]
        try:
            return await reader.run(fn)
        except sqlite3.OperationalError as exc:
            raise StoreError(str(exc)) from exc

    async def _write(self, fn: Callable[[sqlite3.Connection], T], *, long: bool = False) -> T:
        """Queue a write for the next batch; `long` for operations that may take milliseconds."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        self._pending.append((fn, fut, long))
        if self._drainer is None or self._drainer.done():
            self._drainer = loop.create_task(self._drain())
        return await fut

    async def _run_batch(self, fns: Sequence[Op], on_thread: bool = False) -> list[Any]:
        """Run every operation in one transaction (one commit, one fsync for the whole batch).

        The transaction's two waits happen on the writer thread: `BEGIN IMMEDIATE` when another
        process holds the write lock (it is tried here first, without waiting: in one process the
        lock is always free, and a thread hop costs the batch a turn of the busy event loop) and
        `COMMIT` (the fsync). The operations themselves run here, on the event loop: inside an
        immediate transaction they never wait for a lock, and they are mostly Python (binding
        arguments, building results). On the writer thread that Python work
        fought the event loop for the GIL statement by statement, and every hand-off went both
        ways (`bench/e2e_throughput.py`: see the README's figures).

        Optimistic: no per-operation SAVEPOINT on the fast path. If an operation raises anything
        but an OperationalError, the batch is rolled back and run again with a SAVEPOINT around
        each operation, so only the failing one fails.

        A batch with a long operation in it (the sweeper's, up to a thousand jobs at a time) runs
        wholly on the writer thread instead, so it cannot stall the event loop.
        """
        writer = self._writer
        if on_thread:
            return await writer.run(lambda c: _run_batch_here(c, fns))
        conn = writer.conn
        assert conn is not None, "store is not open"
        if not _begin_at_once(conn, self._busy_timeout_ms):
            await writer.run(_begin)  # wait for the other process's lock off the event loop
        try:
            out = _run_ops(conn, fns)
        except BaseException:
            await writer.run(_rollback)
            raise
        if out is None:
            await writer.run(_rollback)
            return await writer.run(lambda c: _run_batch_isolated(c, fns))
        await writer.run(_commit)
        return out

    async def _drain(self) -> None:
        while self._pending:
            batch, self._pending = self._pending[:_MAX_BATCH], self._pending[_MAX_BATCH:]
            fns = [fn for fn, _, _ in batch]
            try:
                results = await self._run_batch(fns, on_thread=any(long for _, _, long in batch))
            except sqlite3.Error as exc:
                err = StoreError(f"database write failed: {exc}")
                if isinstance(exc, sqlite3.OperationalError) and _is_busy(exc):
                    # Writes queued while this batch waited out the busy timeout would each wait
                    # it out again: fail them now too, so every caller gets its 503 promptly.
                    batch, self._pending = batch + self._pending, []
                for _, fut, _ in batch:
                    if not fut.done():
                        fut.set_exception(err)
                continue
            for (_, fut, _), value in zip(batch, results, strict=True):
                if fut.done():
                    continue
                if isinstance(value, _Failed):
                    fut.set_exception(value.exc)
                else:
                    fut.set_result(value)

    # ---- keys and policies ----------------------------------------------------------------

    async def add_api_key(self, tenant_id: str, key_hash: str, now: float) -> str:
        key_id = "key_" + ids.ulid(now)
        args = {"id": key_id, "tenant_id": tenant_id, "key_hash": key_hash, "now": now}
        await self._write(lambda c: c.execute(Q["insert_key"], args))
        return key_id

    async def tenant_for_key(self, key_hash: str) -> str | None:
        row = await self._read(lambda c: c.execute(Q["tenant_for_key"], {"key_hash": key_hash}).fetchone())
        return None if row is None else str(row[0])

    async def revoke_api_key(self, key_hash: str, now: float) -> bool:
        args = {"key_hash": key_hash, "now": now}
        return await self._write(lambda c: c.execute(Q["revoke_key"], args).rowcount == 1)

    async def count_api_keys(self) -> int:
        row = await self._read(lambda c: c.execute("SELECT COUNT(*) FROM api_keys").fetchone())
        return int(row[0])

    async def put_policy(self, tenant_id: str, name: str, source: Mapping[str, Any], now: float) -> None:
        args = {"tenant_id": tenant_id, "name": name, "source": to_json(source), "now": now}
        await self._write(lambda c: c.execute(Q["put_policy"], args))

    async def get_policy(self, tenant_id: str, name: str) -> PolicyRecord | None:
        args = {"tenant_id": tenant_id, "name": name}
        row = await self._read(lambda c: c.execute(Q["get_policy"], args).fetchone())
        return None if row is None else PolicyRecord(row[0], from_json(row[1]), row[2])

    async def list_policies(self, tenant_id: str) -> list[PolicyRecord]:
        rows = await self._read(lambda c: c.execute(Q["list_policies"], {"tenant_id": tenant_id}).fetchall())
        return [PolicyRecord(r[0], from_json(r[1]), r[2]) for r in rows]

    async def delete_policy(self, tenant_id: str, name: str) -> bool:
        args = {"tenant_id": tenant_id, "name": name}
        return await self._write(lambda c: c.execute(Q["delete_policy"], args).rowcount == 1)

    # ---- jobs -----------------------------------------------------------------------------

    async def create_job(
        self,
        job: NewJob,
        *,
        claim_for: str | None,
        lease: float,
        idempotency_ttl: float,
        filtered: FilterOutcome | None = None,
    ) -> tuple[Job, bool]:
        now = job.created_at
        start = initial_state(job, filtered, now=now, claim_for=claim_for, lease=lease)
        inbound = None if start.inbound is None else to_json(start.inbound)
        outbound = None if start.outbound is None else to_json(start.outbound)
        args = {
            "id": job.id,
            "tenant_id": job.tenant_id,
            "status": start.status.value,
            "mode": job.mode.value,
            "policy": job.policy,
            "input_text": start.input_text,
            "output_text": start.output_text,
            "inbound": inbound,
            "outbound": outbound,
            "webhook_url": job.webhook_url,
            "secret_enc": job.secret_enc,
            "signing_key_enc": job.signing_key_enc,
            "metadata": to_json(job.metadata),
            "now": now,
            "expires_at": job.expires_at,
            "finished_at": start.finished_at,
            "run_at": start.run_at,
            "lease_owner": start.lease_owner,
            "error_code": start.error_code,
            "error_message": start.error_message,
            "idem_key": job.idem_key,
            "idem_hash": job.idem_hash,
        }
        deliveries = filtered.deliveries if filtered is not None else ()
        created = start.job(job, now=now)

        def op(c: sqlite3.Connection) -> tuple[Job, bool]:
            if job.idem_key is not None:
                row = c.execute(
                    Q["find_idem"], {"tenant_id": job.tenant_id, "idem_key": job.idem_key}
                ).fetchone()
                if row is not None:
                    if row[13] >= now - idempotency_ttl:
                        return row_to_job(row), False
                    c.execute(Q["forget_idem"], {"id": row[0]})
            c.execute(Q["insert_job"], args)
            for d in deliveries:
                c.execute(Q["insert_delivery"], _delivery_args(d, job.id, now, claim_for, lease))
            return created, True

        texts = (start.input_text, start.output_text, inbound, outbound)
        size = sum(len(t or "") for t in texts) + sum(len(d.body) for d in deliveries)
        return await self._write(op, long=size > _LONG_WRITE_CHARS)

    async def get_job(self, tenant_id: str, job_id: str) -> Job | None:
        def op(c: sqlite3.Connection) -> Job | None:
            row = c.execute(Q["get_job"], {"id": job_id, "tenant_id": tenant_id}).fetchone()
            return None if row is None else _with_summaries(c, [row])[0]

        return await self._read(op)

    async def list_jobs(
        self, tenant_id: str, *, status: JobStatus | None, limit: int, before_id: str | None
    ) -> list[Job]:
        args: dict[str, Any] = {"tenant_id": tenant_id, "limit": limit, "before": before_id or "~"}
        if status is not None:
            args["status"] = status.value
        query = Q["list_jobs_status"] if status is not None else Q["list_jobs"]

        def op(c: sqlite3.Connection) -> list[Job]:
            return _with_summaries(c, c.execute(query, args).fetchall())

        return await self._read(op)

    async def list_attempts(self, tenant_id: str, job_id: str) -> list[Attempt]:
        args = {"tenant_id": tenant_id, "job_id": job_id}
        rows = await self._read(lambda c: c.execute(Q["list_attempts"], args).fetchall())
        return [row_to_attempt(r) for r in rows]

    # ---- transitions ----------------------------------------------------------------------

    @staticmethod
    def _expire_op(
        c: sqlite3.Connection, job_id: str, status: JobStatus, *, now: float, tenant_id: str | None = None
    ) -> bool:
        """`status` -> expired (the sweeper, or a request that finds the job overdue)."""
        return SqliteStore._transition_op(
            c,
            job_id,
            (status, JobStatus.EXPIRED),
            now=now,
            owner=None,
            changes=expiry_changes(status),
            deliveries=(),
            claim_for=None,
            lease=0.0,
            tenant_id=tenant_id,
        )

    @staticmethod
    def _transition_op(
        c: sqlite3.Connection,
        job_id: str,
        path: Sequence[JobStatus],
        *,
        now: float,
        owner: str | None,
        changes: JobChanges,
        deliveries: Sequence[NewDelivery],
        claim_for: str | None,
        lease: float,
        tenant_id: str | None = None,
        extra_where: str = "",
    ) -> bool:
        target = path[-1]
        sets = ["status = :target", "updated_at = :now", "status_since = :now"]
        args: dict[str, Any] = {"id": job_id, "old": path[0].value, "target": target.value, "now": now}
        if target in TERMINAL:
            sets.append("finished_at = :now")
        if target in RUNNABLE:
            sets += ["run_at = :run_at", "lease_owner = :claim_for"]
            args["run_at"] = now + lease if claim_for else now
            args["claim_for"] = claim_for
        else:
            sets += ["run_at = NULL", "lease_owner = NULL"]
        for column in ("input_text", "output_text", "error_code", "error_message"):
            value = getattr(changes, column)
            if value is not None:
                sets.append(f"{column} = :{column}")
                args[column] = value
        for column in ("inbound", "outbound"):
            value = getattr(changes, column)
            if value is not None:
                sets.append(f"{column} = :{column}")
                args[column] = to_json(value)
        if changes.clear_input:
            sets.append("input_text = NULL")
        if changes.clear_output:
            sets.append("output_text = NULL")
        where = "id = :id AND status = :old"
        if owner is not None:
            where += " AND lease_owner = :owner"
            args["owner"] = owner
        if tenant_id is not None:
            where += " AND tenant_id = :tenant_id"
            args["tenant_id"] = tenant_id
        where += extra_where
        cur = c.execute(f"UPDATE jobs SET {', '.join(sets)} WHERE {where}", args)
        if cur.rowcount != 1:
            return False
        if target in STOPS_DELIVERY:
            c.execute(Q["cancel_pending_deliveries"], {"job_id": job_id})
        for d in deliveries:
            c.execute(Q["insert_delivery"], _delivery_args(d, job_id, now, claim_for, lease))
        return True

    async def transition(
        self,
        job_id: str,
        path: Sequence[JobStatus],
        *,
        now: float,
        owner: str | None = None,
        changes: JobChanges = JobChanges(),  # noqa: B008
        deliveries: Sequence[NewDelivery] = (),
        claim_for: str | None = None,
        lease: float = 0.0,
    ) -> bool:
        check_path(path)
        return await self._write(
            lambda c: self._transition_op(
                c,
                job_id,
                path,
                now=now,
                owner=owner,
                changes=changes,
                deliveries=deliveries,
                claim_for=claim_for,
                lease=lease,
            ),
            long=_text_size(changes, deliveries) > _LONG_WRITE_CHARS,
        )

    async def submit_response(
        self,
        tenant_id: str,
        job_id: str,
        output_text: str,
        *,
        now: float,
        claim_for: str | None,
        lease: float,
    ) -> CasResult:
        path = (JobStatus.AWAITING_RESPONSE, JobStatus.PROCESSING_OUTBOUND)

        def op(c: sqlite3.Connection) -> CasResult:
            ok = self._transition_op(
                c,
                job_id,
                path,
                now=now,
                owner=None,
                changes=JobChanges(output_text=output_text),
                deliveries=(),
                claim_for=claim_for,
                lease=lease,
                tenant_id=tenant_id,
                extra_where=" AND expires_at > :now",
            )
            if ok:  # the answer makes the `job.awaiting_response` notice moot: stop its retries
                c.execute(Q["cancel_pending_notice"], {"job_id": job_id, "event": _NOTICE})
            row = c.execute(Q["get_job"], {"id": job_id, "tenant_id": tenant_id}).fetchone()
            if not ok and row is not None and JobStatus(row[2]) not in TERMINAL and row[15] <= now:
                # Past expires_at but not swept yet: the 409 says job_expired, so the job says it
                # too from now on (as a cancel that finds it overdue does), not at the next sweep.
                self._expire_op(c, job_id, JobStatus(row[2]), now=now, tenant_id=tenant_id)
                row = c.execute(Q["get_job"], {"id": job_id, "tenant_id": tenant_id}).fetchone()
            return CasResult(ok, None if row is None else _with_summaries(c, [row])[0])

        return await self._write(op, long=len(output_text) > _LONG_WRITE_CHARS)

    async def cancel_job(self, tenant_id: str, job_id: str, *, now: float) -> CasResult:
        def op(c: sqlite3.Connection) -> CasResult:
            row = c.execute(Q["get_job"], {"id": job_id, "tenant_id": tenant_id}).fetchone()
            if row is None:
                return CasResult(False, None)
            status = JobStatus(row[2])
            ok = False
            if status not in TERMINAL and row[15] <= now:
                # Past expires_at but not swept yet: it is expired, not cancellable (409 job_expired),
                # the same answer POST /response gives.
                self._expire_op(c, job_id, status, now=now, tenant_id=tenant_id)
            elif status not in TERMINAL:
                ok = self._transition_op(
                    c,
                    job_id,
                    (status, JobStatus.CANCELLED),
                    now=now,
                    owner=None,
                    changes=JobChanges(error_code="cancelled", error_message="cancelled by the API"),
                    deliveries=(),
                    claim_for=None,
                    lease=0.0,
                    tenant_id=tenant_id,
                )
            row = c.execute(Q["get_job"], {"id": job_id, "tenant_id": tenant_id}).fetchone()
            return CasResult(ok, _with_summaries(c, [row])[0])

        return await self._write(op)

    # ---- workers --------------------------------------------------------------------------

    async def claim_jobs(self, owner: str, *, now: float, lease: float, limit: int) -> list[Job]:
        args = {"owner": owner, "now": now, "until": now + lease, "limit": limit}
        rows = await self._write(lambda c: c.execute(Q["claim_jobs"], args).fetchall())
        return [row_to_job(r) for r in rows]

    async def claim_deliveries(self, owner: str, *, now: float, lease: float, limit: int) -> list[Delivery]:
        args = {"owner": owner, "now": now, "until": now + lease, "limit": limit}

        def op(c: sqlite3.Connection) -> list[Delivery]:
            claimed = [r[0] for r in c.execute(Q["claim_deliveries"], args).fetchall()]
            if not claimed:
                return []
            marks = ",".join("?" * len(claimed))
            rows = c.execute(
                f"SELECT {_DELIVERY_COLS} FROM deliveries d JOIN jobs j ON j.id = d.job_id"
                f" WHERE d.id IN ({marks})",
                claimed,
            ).fetchall()
            return [row_to_delivery(r) for r in rows]

        return await self._write(op)

    async def renew_leases(
        self, owner: str, job_ids: Sequence[str], delivery_ids: Sequence[str], *, until: float
    ) -> None:
        def op(c: sqlite3.Connection) -> None:
            for job_id in job_ids:
                c.execute(
                    "UPDATE jobs SET run_at = ? WHERE id = ? AND lease_owner = ? AND run_at IS NOT NULL",
                    (until, job_id, owner),
                )
            for delivery_id in delivery_ids:
                c.execute(
                    "UPDATE deliveries SET due_at = ? WHERE id = ? AND lease_owner = ? AND state = 'pending'",
                    (until, delivery_id, owner),
                )

        if job_ids or delivery_ids:
            await self._write(op)

    async def release_leases(
        self, owner: str, job_ids: Sequence[str], delivery_ids: Sequence[str], *, now: float
    ) -> None:
        def op(c: sqlite3.Connection) -> None:
            for job_id in job_ids:
                c.execute(
                    "UPDATE jobs SET run_at = ?, lease_owner = NULL"
                    " WHERE id = ? AND lease_owner = ? AND run_at IS NOT NULL",
                    (now, job_id, owner),
                )
            for delivery_id in delivery_ids:
                c.execute(
                    "UPDATE deliveries SET due_at = ?, lease_owner = NULL"
                    " WHERE id = ? AND lease_owner = ? AND state = 'pending'",
                    (now, delivery_id, owner),
                )

        if job_ids or delivery_ids:
            await self._write(op)

    async def record_attempt(
        self,
        attempt: Attempt,
        *,
        owner: str,
        state: DeliveryState,
        now: float,
        job_path: Sequence[JobStatus] | None = None,
        job_changes: JobChanges = JobChanges(),  # noqa: B008
    ) -> bool:
        if job_path is not None:
            check_path(job_path)

        def op(c: sqlite3.Connection) -> bool:
            row = c.execute(
                Q["record_attempt_update"],
                {
                    "id": attempt.delivery_id,
                    "owner": owner,
                    "started_at": attempt.started_at,
                    "status_code": attempt.status_code,
                    "error": attempt.error,
                    "state": state.value,
                    "next_attempt_at": attempt.next_attempt_at,
                },
            ).fetchone()
            if row is None:
                return False  # the lease went to another worker; it will send again, same webhook-id
            c.execute(Q["insert_attempt"], _attempt_args(attempt, row[0]))
            if job_path is not None:
                self._transition_op(
                    c,
                    attempt.job_id,
                    job_path,
                    now=now,
                    owner=None,
                    changes=job_changes,
                    deliveries=(),
                    claim_for=None,
                    lease=0.0,
                )
            return True

        return await self._write(op)

    async def drop_overdue_delivery(
        self, delivery_id: str, job_id: str, tenant_id: str, *, owner: str, now: float
    ) -> bool:
        def op(c: sqlite3.Connection) -> bool:
            row = c.execute(Q["job_expiry_state"], {"id": job_id}).fetchone()
            if row is not None and JobStatus(row[0]) not in TERMINAL and row[1] <= now:
                return self._expire_op(c, job_id, JobStatus(row[0]), now=now)
            cur = c.execute(Q["fail_overdue_delivery"], {"id": delivery_id, "owner": owner})
            return cur.rowcount == 1

        return await self._write(op)

    # ---- sweeper and health ---------------------------------------------------------------

    async def expire_due(self, *, now: float, limit: int) -> list[str]:
        def op(c: sqlite3.Connection) -> list[str]:
            expired = []
            for job_id, status in c.execute(Q["due_expiry"], {"now": now, "limit": limit}).fetchall():
                if self._expire_op(c, job_id, JobStatus(status), now=now):
                    expired.append(job_id)
            return expired

        return await self._write(op, long=True)

    async def purge_finished(self, *, before: float, limit: int) -> int:
        def op(c: sqlite3.Connection) -> int:
            victims = [r[0] for r in c.execute(Q["purge_candidates"], {"before": before, "limit": limit})]
            if not victims:
                return 0
            marks = ",".join("?" * len(victims))
            c.execute(f"DELETE FROM delivery_attempts WHERE job_id IN ({marks})", victims)
            c.execute(f"DELETE FROM deliveries WHERE job_id IN ({marks})", victims)
            c.execute(f"DELETE FROM jobs WHERE id IN ({marks})", victims)
            return len(victims)

        return await self._write(op, long=True)

    async def queue_stats(self) -> QueueStats:
        def op(c: sqlite3.Connection) -> QueueStats:
            counts = dict(c.execute(Q["queue_counts"]).fetchall())
            queues = {}
            for name in QUEUES:
                oldest = c.execute(Q["oldest_in_status"], {"status": name}).fetchone()[0]
                queues[name] = QueueStat(depth=int(counts.get(name, 0)), oldest_since=oldest)
            return QueueStats(queues=queues, retrying=int(counts.get("retrying", 0)))

        return await self._read(op)


def _split_sql(script: str) -> list[str]:
    """Split a migration into statements; sqlite3 itself says when one (a trigger too) is complete."""
    statements: list[str] = []
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                statements.append(buf.strip())
            buf = ""
    if buf.strip() and not all(ln.strip().startswith("--") or not ln.strip() for ln in buf.splitlines()):
        raise ValueError(f"incomplete SQL statement at the end of a migration: {buf.strip()[:80]!r}")
    return statements
