"""CPU per query and per turn of two Mnemo trees, side by side on one PostgreSQL server.

Issue 27's figure ("`mnemo bench scale` and `mnemo bench memory --n 10000 --test-postgres`:
no figure worse by more than 10% than before the change, in one run side by side with the
old commit") measured in CPU time, not wall time, so that a loaded 2-core VM does not
drown it: for each query, this process's CPU (`time.process_time`, every thread) plus the
CPU of the PostgreSQL backends serving this database (`/proc/<pid>/schedstat`, on-CPU ns,
read before and after, outside the client's window); for a fleet run (`bench scale`'s
work), metered from outside the tree's own code (`FleetMeter`, around the tree's
`fleet.push` and `fleet.wait_delivered`): warm-up turns in new chats, a wait until idle,
an idle window, the push, a wait until idle again; the bot processes' CPU (every thread)
plus the whole server's (its postmaster's own and reaped children's ticks, and the live
backends'), per turn; the fakes (this worker) apart.

Usage (the driver needs a tree with `core.bench.fakes.postgres`; each tree runs its own
code in a subprocess with `PYTHONPATH=<tree>` and the shared venv):

    PYTHONPATH=/work/wt/seam python docs/notes/seam_cpu.py memory \\
        --tree old=/work/wt/old-a8f8595 --tree new=/work/wt/seam --n 10000 --rounds 5
    PYTHONPATH=/tmp/main python docs/notes/seam_cpu.py scale --tree old=/tmp/old \\
        --tree seam=/tmp/seam --tree main=/tmp/main --rounds 8 --chats 30 --messages 5 \\
        --warm 8 --idle 2 --progress run.jsonl > run.json
    python docs/notes/seam_cpu.py table run.jsonl --key cpu_ms_per_turn --key turns_per_s

Two or more trees; each round runs them in a rotated order. The summary gives, per figure,
each tree's median over rounds of the per-query median CPU and, for each tree after the
first, the median and spread (min-max, IQR) over rounds of its per-round ratio to the first.
`--progress` writes each tree-round as a JSON line; `table` reads it (whole rounds) or the JSON.
A notes script, not product code.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
MODES = ["hybrid", "knn", "bm25", "jaccard"]
FIRST = "first hybrid query after a start, fresh processes"
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")

# -- server CPU, read from /proc --------------------------------------------------------


def _stat_fields(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/stat").read_text()
    return raw[raw.rindex(")") + 2 :].split()  # fields from 3 (state) on


class Backends:
    """The backends of one database under one postmaster: their on-CPU ns, summed."""

    def __init__(self, postmaster: int, database: str) -> None:
        self.postmaster = postmaster
        self.marker = f" {database} "
        self.kind: dict[int, bool] = {}  # pid -> is one of our backends

    def _ours(self) -> list[int]:
        found = []
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            if pid not in self.kind:
                try:
                    parent = int(_stat_fields(pid)[1])
                    line = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                except (OSError, ValueError, IndexError):
                    continue
                ours = parent == self.postmaster and self.marker in line.decode(errors="replace")
                self.kind[pid] = ours and "autovacuum" not in line.decode(errors="replace")
            if self.kind[pid]:
                found.append(pid)
        return found

    def cpu_ns(self) -> dict[int, int]:
        seen = {}
        for pid in self._ours():
            try:
                seen[pid] = int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
            except (OSError, ValueError):
                continue
        return seen


def server_cpu_s(postmaster: int) -> float:
    """The whole server's CPU so far: the postmaster, its reaped children, its live ones."""
    fields = _stat_fields(postmaster)
    total = sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime stime cutime cstime
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                child = _stat_fields(int(name))
            except (OSError, ValueError):
                continue
            if int(child[1]) == postmaster:
                total += int(child[11]) + int(child[12])
    return total * TICK_S


# -- the worker: runs inside one tree ------------------------------------------------------


class CachedDocuments:
    """The real embedder, with document vectors read from (and added to) an .npz file."""

    def __init__(self, inner: Any, path: Path) -> None:
        import numpy as np

        self.inner = inner
        self.path = path
        self.vectors: dict[str, Any] = {}
        if path.exists():
            data = np.load(path)
            self.vectors = dict(zip(data["texts"].tolist(), data["vectors"], strict=True))
        self.added = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def embed(self, texts: list[str]) -> list[Any]:
        missing = [text for text in dict.fromkeys(texts) if text not in self.vectors]
        if missing:
            self.vectors.update(zip(missing, self.inner.embed(missing), strict=True))
            self.added = True
        return [list(map(float, self.vectors[text])) for text in texts]

    def save(self) -> None:
        import numpy as np

        if self.added:
            texts = list(self.vectors)
            vectors = np.array([self.vectors[t] for t in texts], dtype=np.float32)
            np.savez(self.path, texts=np.array(texts), vectors=vectors)


def _open(url: str) -> Any:
    from memory.bench.cli import _bench_storage

    return _bench_storage(Path(tempfile.gettempdir()), url)


def worker_fill(args: argparse.Namespace) -> dict[str, Any]:
    from memory.bench.cli import _bench_chats, _fill, synthetic_memory
    from memory.embeddings import load_embedder
    from memory.stores import memory_store

    storage = _open(args.url)
    embedder = CachedDocuments(load_embedder("", "int8"), Path(args.vectors))
    chats = _bench_chats(storage)
    memories = memory_store(storage, embedder)
    embedder.embed([synthetic_memory(random.Random(7))])  # the cache is read before timing
    server = server_cpu_s(args.postmaster) if args.postmaster else 0.0
    began, cpu = time.perf_counter(), time.process_time()
    _fill(memories, embedder, chats, args.n, random.Random(7))
    seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    server = server_cpu_s(args.postmaster) - server if args.postmaster else 0.0
    embedder.save()
    storage.close()
    return {
        "ingest_s": round(seconds, 1),
        "per_s": round(args.n / seconds),
        "client_cpu_s": round(cpu, 1),
        "server_cpu_s": round(server, 1),
    }


class Meter:
    """Per call: this process's CPU, the database's backends' CPU, wall; in ms."""

    def __init__(self, backends: Backends) -> None:
        self.backends = backends
        self.rows: dict[str, list[tuple[float, float, float]]] = {}

    def run(self, figure: str, call: Any) -> Any:
        before = self.backends.cpu_ns()
        cpu, wall = time.process_time(), time.perf_counter()
        result = call()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        after = self.backends.cpu_ns()
        server_ns = sum(after[pid] - before.get(pid, 0) for pid in after)
        self.rows.setdefault(figure, []).append((cpu * 1e3, server_ns / 1e6, wall * 1e3))
        return result

    def summary(self) -> dict[str, dict[str, float]]:
        out = {}
        for figure, rows in self.rows.items():
            client = [r[0] for r in rows]
            server = [r[1] for r in rows]
            total = [r[0] + r[1] for r in rows]
            walls = sorted(r[2] for r in rows)
            out[figure] = {
                "n": len(rows),
                "cpu_ms_p50": statistics.median(total),
                "cpu_ms_mean": statistics.fmean(total),
                "client_ms_p50": statistics.median(client),
                "server_ms_p50": statistics.median(server),
                "client_ms_mean": statistics.fmean(client),
                "server_ms_mean": statistics.fmean(server),
                "wall_ms_p50": walls[len(walls) // 2],
                "wall_ms_p95": walls[max(0, int(len(walls) * 0.95) - 1)],
            }
        return out


def worker_measure(args: argparse.Namespace) -> dict[str, Any]:
    from memory.bench.cli import _bench_chats, _known_lookup, _rank_once, synthetic_memory
    from memory.bench.cli import synthetic_query as query_of
    from memory.embeddings import load_embedder
    from memory.stores import memory_store

    meter = Meter(Backends(args.postmaster, args.database))
    rng = random.Random(args.seed)
    embedder = load_embedder("", "int8")
    embedder.embed_query("warm the model up")  # the ONNX session is not what is measured
    storage = meter.run("(open the storage)", lambda: _open(args.url))
    chat_id, _ = _bench_chats(storage)
    memories = memory_store(storage, embedder)
    meter.run("first hybrid query after a start", lambda: _rank_once(
        memories, chat_id, "hybrid", query_of(rng)))  # fmt: skip
    for mode in args.modes.split(","):
        for _ in range(args.warm):
            _rank_once(memories, chat_id, mode, query_of(rng))
        for _ in range(args.queries):
            asked = query_of(rng)
            meter.run(mode, lambda asked=asked, mode=mode: _rank_once(
                memories, chat_id, mode, asked))  # fmt: skip
    if args.first_stage:
        _first_stage_figures(meter, memories, chat_id, rng, args)
    for _ in range(args.queries // 2 if args.extras else 0):
        memories.add(chat_id, synthetic_memory(rng), "EVENT", source="bench")
        asked = query_of(rng)
        meter.run("hybrid, just after a new memory", lambda asked=asked: _rank_once(
            memories, chat_id, "hybrid", asked))  # fmt: skip
    for _ in range(args.queries if args.extras else 0):
        asked = query_of(rng)
        meter.run("(known-memory lookup, full text)", lambda asked=asked: _known_lookup(
            memories, chat_id, asked))  # fmt: skip
    for _ in range(args.queries):
        asked = query_of(rng)
        meter.run("(query embedding alone)", lambda asked=asked: embedder.embed_query(asked))
    storage.close()
    return meter.summary()


def worker_first(args: argparse.Namespace) -> dict[str, Any]:
    """One fresh process, one hybrid query: the first query after a start, alone."""
    from memory.bench.cli import _bench_chats, _rank_once
    from memory.bench.cli import synthetic_query as query_of
    from memory.embeddings import load_embedder
    from memory.stores import memory_store

    meter = Meter(Backends(args.postmaster, args.database))
    embedder = load_embedder("", "int8")
    embedder.embed_query("warm the model up")
    storage = _open(args.url)
    chat_id, _ = _bench_chats(storage)
    memories = memory_store(storage, embedder)
    asked = query_of(random.Random(args.seed))
    meter.run(FIRST, lambda: _rank_once(memories, chat_id, "hybrid", asked))
    storage.close()
    return meter.summary()


def _first_stage_figures(
    meter: Meter, memories: Any, chat_id: int, rng: random.Random, args: argparse.Namespace
) -> None:
    """Each mode without the second stage (`memory.second_stage`, later than the seam): the
    work a tree from before it does, so the seam's own cost shows on a newer tree."""
    import inspect

    from memory.bench.cli import synthetic_query as query_of
    from memory.retrieval import rank_memories

    extra: dict[str, Any] = {}
    if "stage" in inspect.signature(rank_memories).parameters:  # else: first stage only
        from memory.second_stage import Stage  # (an editable install may serve this module

        #                                        to an older tree too: ask the signature)
        extra["stage"] = Stage(frozenset())
    for mode in MODES:
        for number in range(args.warm + args.queries):
            asked = query_of(rng)

            def rank(asked: str = asked, mode: str = mode) -> Any:
                return rank_memories(memories, chat_id, asked, 10, mode=mode, **extra)

            if number < args.warm:
                rank()
            else:
                meter.run(f"{mode}, first stage only", rank)


def _children(parent: int) -> list[int]:
    """Every live descendant of `parent` (the fleet's bot processes, for the worker)."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                parents[int(name)] = int(_stat_fields(int(name))[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = [], [parent]
    while frontier:
        here = frontier.pop()
        kids = [pid for pid, up in parents.items() if up == here]
        found.extend(kids)
        frontier.extend(kids)
    return found


def threads_cpu_ns(pids: list[int]) -> int:
    """On-CPU ns of every live thread of `pids` (/proc/PID/task/TID/schedstat): ns
    resolution, but a thread that ended is no longer counted (used over short windows)."""
    total = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            except (OSError, ValueError):
                continue
    return total


def ticks_s(pids: list[int]) -> float:
    """User + system CPU of `pids` so far, every thread that ever ran (/proc/PID/stat)."""
    total = 0
    for pid in pids:
        try:
            fields = _stat_fields(pid)
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total * TICK_S


WARM_CHAT = 90_000  # warm-up chats: ids apart from the bench's, texts its tally ignores


class FleetMeter:
    """The fleet's CPU measured from outside the tree's own code: the bot processes (the
    worker's descendants), the fakes and proxy (the worker itself, reported apart), the
    PostgreSQL server (whole, and this database's backends).

    Before the bench's push: `warm` warm-up messages (one per new chat; their first-turn
    costs: lazy imports, the embedder, the pool's connections), then an idle window (each
    part's CPU per second doing nothing), then the measured push. "all" figures count from
    before the warm-up (what the bench's own meter sees, first turns included), the others
    from after the idle window (the steady state)."""

    def __init__(self, postmaster: int, database: str, idle_s: float, warm: int) -> None:
        self.postmaster = postmaster
        self.backends = Backends(postmaster, database) if database else None
        self.idle_s = idle_s
        self.warm = warm
        self.figures: dict[str, float] = {}
        self.start: dict[str, float] = {}
        self.all_start: dict[str, float] = {}
        self.bots: list[int] = []

    def _server_ns(self) -> int:
        if not self.postmaster:
            return 0
        return threads_cpu_ns([self.postmaster, *_children(self.postmaster)])

    def _sample(self) -> dict[str, float]:
        return {
            "bots_s": ticks_s(self.bots),
            "fakes_s": time.process_time(),
            "server_s": server_cpu_s(self.postmaster) if self.postmaster else 0.0,
            "db_ns": sum(self.backends.cpu_ns().values()) if self.backends else 0,
            "wall": time.perf_counter(),
        }

    def _warm_up(self, telegram: Any) -> None:
        from core.bench.chaos import user

        chats = [WARM_CHAT + n for n in range(self.warm)]
        for chat_id in chats:
            chat = {"id": chat_id, "type": "private", "first_name": f"Warm {chat_id}"}
            telegram.push_message(chat, user(chat_id, f"Warm {chat_id}"), "warm-up: hello")

        def answered(tg: Any) -> bool:
            return len({m["chat"]["id"] for m in list(tg.delivered)} & set(chats)) >= self.warm

        telegram.wait_for(answered, 300)

    def _settle(self) -> float:
        """Wait until the bots and the server are idle (under 2% of a core over 0.5 s: the
        work a turn leaves for after its reply is done), at most 20 s; the seconds waited."""
        began = time.perf_counter()

        def pids() -> list[int]:
            server = [self.postmaster, *_children(self.postmaster)] if self.postmaster else []
            return [*self.bots, *server]

        before = threads_cpu_ns(pids())
        while time.perf_counter() - began < 20:
            time.sleep(0.5)
            now = threads_cpu_ns(pids())
            if now - before < 10_000_000:
                break
            before = now
        return time.perf_counter() - began

    def before_push(self, telegram: Any) -> None:
        self.bots = _children(os.getpid())
        self.all_start = self._sample()
        self._warm_up(telegram)
        self.figures["warm_settle_s"] = self._settle()
        bots_ns, server_ns = threads_cpu_ns(self.bots), self._server_ns()
        fakes = time.process_time()
        time.sleep(self.idle_s)
        self.figures.update({
            "bots_idle_ms_per_s": (threads_cpu_ns(self.bots) - bots_ns) / 1e6 / self.idle_s,
            "server_idle_ms_per_s": (self._server_ns() - server_ns) / 1e6 / self.idle_s,
            "fakes_idle_ms_per_s": (time.process_time() - fakes) * 1e3 / self.idle_s,
        })  # fmt: skip
        self.start = self._sample()

    def after_delivered(self) -> None:
        delivered = time.perf_counter()
        self.figures["settle_s"] = self._settle()
        end = self._sample()
        self.figures.update({
            "seconds": delivered - self.start["wall"],
            "measured_s": end["wall"] - self.start["wall"],
            "bots_s": end["bots_s"] - self.start["bots_s"],
            "fakes_s": end["fakes_s"] - self.start["fakes_s"],
            "server_s": end["server_s"] - self.start["server_s"],
            "db_s": (end["db_ns"] - self.start["db_ns"]) / 1e9,
            "all_bots_s": end["bots_s"] - self.all_start["bots_s"],
            "all_server_s": end["server_s"] - self.all_start["server_s"],
        })  # fmt: skip


def worker_scale(args: argparse.Namespace) -> dict[str, Any]:
    import core.bench.fleet as fleet

    if args.url:
        _open(args.url).close()  # migrated before the run: its CPU is not a turn's
    meter = FleetMeter(args.postmaster, args.database if args.url else "", args.idle, args.warm)
    push, wait = fleet.push, fleet.wait_delivered

    def metered_push(*a: Any, **k: Any) -> Any:
        meter.before_push(a[0])
        return push(*a, **k)

    def metered_wait(*a: Any, **k: Any) -> Any:
        done = wait(*a, **k)
        meter.after_delivered()
        return done

    fleet.push, fleet.wait_delivered = metered_push, metered_wait  # type: ignore[attr-defined]
    result = fleet.webhook_fleet_run(
        args.processes, args.chats, args.messages, args.delay, 600.0,
        storage_url=args.url, max_messages_per_second=1000.0,
    )  # fmt: skip
    return _scale_figures(result, meter.figures, bool(args.url), args.warm)


def _scale_figures(
    result: dict[str, Any], m: dict[str, float], pg: bool, warm: int
) -> dict[str, Any]:
    """Per turn, in CPU ms: bots, server (whole; this database's backends), the fakes apart;
    each raw and net of its idle rate over the run's seconds; "all": from before the
    warm-up, its turns counted (first turns' costs included, as in the bench's meter)."""
    turns = max(1, int(result["answered"]))
    all_ms = (m["all_bots_s"] + (m["all_server_s"] if pg else 0.0)) * 1000 / (turns + warm)

    def per_turn(seconds: float) -> float:
        return round(seconds * 1000 / turns, 3)

    bots = per_turn(m["bots_s"])
    server = per_turn(m["server_s"]) if pg else 0.0
    bots_net = per_turn(m["bots_s"] - m["bots_idle_ms_per_s"] * m["measured_s"] / 1000)
    server_net = (
        per_turn(m["server_s"] - m["server_idle_ms_per_s"] * m["measured_s"] / 1000) if pg else 0.0
    )
    return {
        "turns_per_s": round(turns / m["seconds"], 3),
        "seconds": round(m["seconds"], 2),
        "whole": result["whole"],
        "answered": result["answered"],
        "all_cpu_ms_per_turn": round(all_ms, 3),
        "cpu_ms_per_turn": round(bots + server, 3),
        "cpu_net_ms_per_turn": round(bots_net + server_net, 3),
        "bots_cpu_ms_per_turn": bots,
        "bots_net_ms_per_turn": bots_net,
        "server_cpu_ms_per_turn": server,
        "server_net_ms_per_turn": server_net,
        "db_backends_ms_per_turn": per_turn(m["db_s"]) if pg else 0.0,
        "fakes_cpu_ms_per_turn": per_turn(m["fakes_s"]),
        # the tree's own meter: bots only, warm-up and idle window included, real turns
        "bench_cpu_ms_per_turn": result["cpu_ms_per_turn"],
        "bench_turns_per_s": result["turns_per_s"],
        "idle": {k: round(v, 3) for k, v in m.items() if k.endswith(("_per_s", "settle_s"))},
        "load": _load(),
    }


# -- the driver -------------------------------------------------------------------------


def _run_worker(tree: Path, command: str, *extra: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, str(HERE), command, *extra],
        env=env, cwd=tree, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{command} in {tree} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def _rounds(trees: dict[str, Path], rounds: int, run: Any) -> dict[str, list[Any]]:
    results: dict[str, list[Any]] = {name: [] for name in trees}
    names = list(trees)
    for number in range(rounds):  # each round in another order: the first tree not always first
        shift = number % len(names)
        order = names[shift:] + names[:shift]
        for name in order:
            load = _load()
            began = time.perf_counter()
            results[name].append(run(name, trees[name]))
            print(f"round {number + 1} {name}: {time.perf_counter() - began:.0f} s, load {load}",
                  file=sys.stderr, flush=True)  # fmt: skip
    return results


def _compare(results: dict[str, list[dict[str, Any]]], keys: list[str]) -> dict[str, Any]:
    """Per figure and key: each tree's per-round values and their median; for each tree after
    the first, the median and spread (min-max) of its ratio to the first, round by round."""
    base, *others = list(results)
    table: dict[str, Any] = {}
    for figure in results[base][0]:
        for key in keys:
            if key not in results[base][0][figure]:
                continue
            values = {name: [r[figure][key] for r in results[name]] for name in results}
            row: dict[str, Any] = {name: [round(v, 3) for v in vs] for name, vs in values.items()}
            row.update({"median_" + name: round(statistics.median(vs), 3)
                        for name, vs in values.items()})  # fmt: skip
            for name in others:
                ratios = [y / x for x, y in zip(values[base], values[name], strict=True) if x]
                if ratios:
                    row[f"ratio_{name}"] = [
                        round(statistics.median(ratios), 3), round(min(ratios), 3),
                        round(max(ratios), 3),
                    ]  # fmt: skip
                    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
                    row[f"iqr_{name}"] = [round(quartiles[0], 3), round(quartiles[-1], 3)]
            table[f"{figure} | {key}"] = row
    return table


def _server() -> Any:
    from core.bench.fakes.postgres import PostgresServer

    return PostgresServer().start()


def drive_memory(args: argparse.Namespace, trees: dict[str, Path]) -> dict[str, Any]:
    server = _server()
    try:
        assert server._process is not None
        postmaster = str(server._process.pid)
        urls = {name: server.create_database(f"t_{name}") for name in trees}
        rounds_seen: dict[str, int] = {}
        fills = {}
        for name, tree in trees.items():
            fills[name] = _run_worker(
                tree, "fill", "--url", urls[name], "--n", str(args.n),
                "--vectors", args.vectors, "--postmaster", postmaster,
            )  # fmt: skip
            print(f"filled {name}: {fills[name]}", file=sys.stderr, flush=True)
        _vacuum_analyze(list(urls.values()))

        def run(name: str, tree: Path) -> dict[str, Any]:
            figures = _run_worker(
                tree, "measure", "--url", urls[name], "--postmaster", postmaster,
                "--database", f"t_{name}", "--queries", str(args.queries),
                "--warm", str(args.warm), "--seed", str(args.seed),
                *(["--first-stage"] if args.first_stage else []),
                "--modes", args.modes, *([] if args.extras else ["--no-extras"]),
            )  # fmt: skip
            where = ["--url", urls[name], "--postmaster", postmaster, "--database", f"t_{name}"]
            firsts = [
                _run_worker(tree, "first", *where, "--seed", str(args.seed + sample))[FIRST]
                for sample in range(args.first_samples)
            ]
            if firsts:  # per round: the median of its fresh processes' single queries
                figures[FIRST] = {key: statistics.median(f[key] for f in firsts)
                                  for key in firsts[0]}  # fmt: skip
            _progress(args, rounds_seen, name, figures)
            return figures

        results = _rounds(trees, args.rounds, run)
    finally:
        server.stop()
    keys = ["cpu_ms_p50", "cpu_ms_mean", "client_ms_p50", "server_ms_p50", "wall_ms_p50"]
    return {"fills": fills, "compare": _compare(results, keys), "raw": results}


def _vacuum_analyze(urls: list[str]) -> None:
    import psycopg

    for url in urls:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")


def _progress(
    args: argparse.Namespace, rounds_seen: dict[str, int], name: str, figures: dict[str, Any]
) -> None:
    """Count the round of tree `name`; with `--progress`, append its figures as a JSON line."""
    rounds_seen[name] = rounds_seen.get(name, 0) + 1
    if args.progress:
        with Path(args.progress).open("a") as out:
            line = {"round": rounds_seen[name], "tree": name, "figures": figures}
            out.write(json.dumps(line) + "\n")


SCALE_KEYS = [
    "all_cpu_ms_per_turn", "cpu_ms_per_turn", "cpu_net_ms_per_turn", "bots_cpu_ms_per_turn",
    "bots_net_ms_per_turn", "server_cpu_ms_per_turn", "server_net_ms_per_turn",
    "db_backends_ms_per_turn", "fakes_cpu_ms_per_turn", "bench_cpu_ms_per_turn",
    "turns_per_s", "bench_turns_per_s", "seconds",
]  # fmt: skip


def drive_scale(args: argparse.Namespace, trees: dict[str, Path]) -> dict[str, Any]:
    """Each round, each tree (in a rotated order) runs every configuration of `--configs`
    (`engine:processes`), each on a fresh database (SQLite: a new temporary directory)."""
    server = _server()
    numbers = iter(range(1000))
    configs = [(e, int(n)) for e, n in (c.split(":") for c in args.configs.split(","))]
    rounds_seen: dict[str, int] = {}
    try:
        assert server._process is not None
        postmaster = str(server._process.pid)

        def run(name: str, tree: Path) -> dict[str, Any]:
            figures = {}
            for engine, processes in configs:
                database = f"s_{next(numbers)}" if engine != "sqlite" else ""
                url = server.create_database(database) if database else ""
                figures[f"{engine} x{processes}"] = _run_worker(
                    tree, "scale-worker", "--url", url, "--postmaster", postmaster,
                    "--database", database, "--idle", str(args.idle), "--warm", str(args.warm),
                    "--processes", str(processes), "--chats", str(args.chats),
                    "--messages", str(args.messages), "--delay", str(args.delay),
                )  # fmt: skip
            _progress(args, rounds_seen, name, figures)
            return figures

        results = _rounds(trees, args.rounds, run)
    finally:
        server.stop()
    return {"compare": _compare(results, SCALE_KEYS), "raw": results}


def _raw(path: Path) -> dict[str, list[Any]]:
    """A driver's raw results: its JSON, or a `--progress` file's lines (whole rounds only)."""
    text = path.read_text()
    try:
        whole_json = json.loads(text)
    except json.JSONDecodeError:
        whole_json = {}
    if "raw" not in whole_json:
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
        raw: dict[str, list[Any]] = {}
        for line in lines:
            raw.setdefault(line["tree"], []).append(line["figures"])
        whole = min(len(v) for v in raw.values())
        return {name: runs[:whole] for name, runs in raw.items()}
    return dict(whole_json["raw"])


def table(path: Path, keys: list[str]) -> str:
    """A Markdown table of a driver's JSON: per figure and key, each tree's median and each
    later tree's ratio to the first (median, min-max over rounds)."""
    raw = _raw(path)
    compare, names = _compare(raw, keys), list(raw)
    head = ["figure", *(f"{n} (median)" for n in names), *(f"{n} / {names[0]}" for n in names[1:])]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, row in compare.items():
        cells = [label.replace(" | ", ", "), *(f"{row['median_' + n]:.2f}" for n in names)]
        for name in names[1:]:
            mid, low, high = row.get(f"ratio_{name}", [0, 0, 0])
            q1, q3 = row.get(f"iqr_{name}", [0, 0])
            cells.append(f"**{mid:.2f}** ({low:.2f}–{high:.2f}; IQR {q1:.2f}–{q3:.2f})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    memory = sub.add_parser("memory")
    scale = sub.add_parser("scale")
    for driver in (memory, scale):
        driver.add_argument("--tree", action="append", required=True, help="name=path, twice")
        driver.add_argument("--rounds", type=int, default=5)
    memory.add_argument("--n", type=int, default=10_000)
    memory.add_argument("--progress", default="", help="a JSON line per tree and round")
    memory.add_argument("--queries", type=int, default=100)
    memory.add_argument("--warm", type=int, default=10)
    memory.add_argument("--seed", type=int, default=11)
    memory.add_argument("--vectors", default="/tmp/seam_cpu_vectors.npz")
    memory.add_argument("--first-stage", action="store_true", help="also without stage two")
    memory.add_argument("--first-samples", type=int, default=0, help="fresh processes a round")
    memory.add_argument("--modes", default=",".join(MODES), help="ranking modes, comma-separated")
    memory.add_argument("--no-extras", dest="extras", action="store_false",
                        help="without the after-a-new-memory and lookup figures")  # fmt: skip
    for driver in (scale,):
        driver.add_argument("--chats", type=int, default=50)
        driver.add_argument("--messages", type=int, default=6)
        driver.add_argument("--delay", type=float, default=0.2)
        driver.add_argument("--configs", default="sqlite:1,postgresql:1,postgresql:2",
                            help="engine:processes, comma-separated")  # fmt: skip
        driver.add_argument("--idle", type=float, default=4.0, help="idle seconds before a push")
        driver.add_argument("--warm", type=int, default=10, help="warm-up messages (new chats)")
        driver.add_argument("--progress", default="", help="a JSON line per tree and round")
    fill = sub.add_parser("fill")
    fill.add_argument("--url", required=True)
    fill.add_argument("--n", type=int, required=True)
    fill.add_argument("--vectors", required=True)
    fill.add_argument("--postmaster", type=int, default=0)
    measure = sub.add_parser("measure")
    first = sub.add_parser("first")
    worker = sub.add_parser("scale-worker")
    for part in (measure, first, worker):
        part.add_argument("--url", default="")
        part.add_argument("--postmaster", type=int, required=True)
    for part in (measure, first):
        part.add_argument("--database", required=True)
        part.add_argument("--seed", type=int, default=11)
    measure.add_argument("--queries", type=int, default=100)
    measure.add_argument("--warm", type=int, default=10)
    measure.add_argument("--first-stage", action="store_true")
    measure.add_argument("--modes", default=",".join(MODES))
    measure.add_argument("--no-extras", dest="extras", action="store_false")
    worker.add_argument("--processes", type=int, default=1)
    worker.add_argument("--chats", type=int, default=50)
    worker.add_argument("--messages", type=int, default=6)
    worker.add_argument("--delay", type=float, default=0.2)
    worker.add_argument("--database", default="")
    worker.add_argument("--idle", type=float, default=4.0)
    worker.add_argument("--warm", type=int, default=10)
    report = sub.add_parser("table")
    report.add_argument("path", type=Path)
    report.add_argument("--key", action="append", default=[])
    args = parser.parse_args(sys.argv[1:2] + sys.argv[2:])
    if args.command == "table":
        print(table(args.path, args.key or ["cpu_ms_p50"]))
        return
    workers = {
        "fill": worker_fill, "measure": worker_measure, "first": worker_first,
        "scale-worker": worker_scale,
    }  # fmt: skip
    if args.command in workers:
        print(json.dumps(workers[args.command](args)))
        return
    trees = dict(
        (name, Path(path).resolve()) for name, path in (t.split("=", 1) for t in args.tree)
    )
    drive = drive_memory if args.command == "memory" else drive_scale
    print(json.dumps(drive(args, trees), indent=1))


if __name__ == "__main__":
    main()
