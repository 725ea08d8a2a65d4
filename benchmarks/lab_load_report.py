"""The figures of benchmarks/lab_load.py from what it observed, and their text. Pure functions: no
server, no database (lab_load.py reads the rows and hands them over).

Definitions (also printed with the figures):
- a step post's latency: one POST /api/runs/<id>/steps/ exchange answered 2xx, from the request to
  the answer's headers, in the SDK's process; a retried post counts each answer apart.
- a lost step: logged by a client and not stored (SDK runs: the steps the loop logged; Cohort runs:
  the step lines the trainer wrote to its event log, or the configured steps where the log could not be
  watched); a duplicate: a second StepMetric row for one (run, attempt, step).
- a notice's delay: its arrival at a viewer minus its step's `StepMetric.created_at` (stamped as the
  server starts storing the step, before its rollouts and the commit): what a viewer waits once the
  server has the step. A lost notice: a step stored after a viewer of its run connected that the viewer
  never got, grace included (on a throwaway stack every step is: the runs wait for the viewers).
- the worker's ingest lag: `StepMetric.created_at` minus the moment the trainer wrote the step's line
  to events.jsonl (benchmarks/lab_load_clients.py `EventWatcher`): the supervisor's polling plus the
  ingest up to the row.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from benchmarks.lab_load_clients import path_kind

DEFINITIONS = {
    "stored": "StepMetric and Rollout rows stored from the release of the SDK runs to the last StepMetric row",
    "step_post_ms": "POST /api/runs/<id>/steps/ answered 2xx: request to the answer's headers, in the SDK's "
                    "process; each exchange apart (a retry is another)",
    "answers": "5xx: failures (503 apart); 503 and 429: backpressure the clients wait out; no answer: status 0",
    "lost_steps": "logged by a client (SDK loop; Cohort trainer's event log) and not stored; duplicates: a second "
                  "row for one (run, attempt, step)",
    "notices": "delay: arrival at a viewer minus the step's StepMetric.created_at; lost: a step stored after a "
               "viewer of its run connected that the viewer never got, grace included",
    "ingest_lag_ms": "StepMetric.created_at minus the moment the trainer wrote the step's line to events.jsonl",
    "pages_ms": "a logged-in client reloading /runs/<id>/ and /runs/ one at a time while the load ran",
}


def percentile(values: list[float], p: float) -> float | None:
    """Nearest rank (the smallest value with at least p% of the values at or below it).

    >>> percentile([1, 2, 3, 4], 50), percentile([1, 2, 3, 4], 95), percentile([], 50)
    (2, 4, None)
    """
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def spread_ms(seconds: list[float], ps: tuple[int, ...] = (50, 95)) -> dict[str, Any]:
    """count, the percentiles and max of durations in seconds, in ms (0.1 ms)."""
    figures: dict[str, Any] = {"count": len(seconds)}
    for p in ps:
        value = percentile(seconds, p)
        figures[f"p{p}"] = None if value is None else round(value * 1e3, 1)
    figures["max"] = round(max(seconds) * 1e3, 1) if seconds else None
    return figures


def answers(requests: list[dict[str, Any]], pages: list[tuple[str, int, float]]) -> dict[str, Any]:
    """Every exchange's status: 5xx other than 503 by status and path (failures), 429 and 503 by path
    (backpressure the clients wait out), 0 (no answer)."""
    statuses = [(r["status"], f"{r['method']} {path_kind(r['path'])}") for r in requests]
    statuses += [(status, f"GET {kind}") for kind, status, _ in pages]
    failures = Counter(f"{s} {where}" for s, where in statuses if s >= 500 and s != 503)
    return {"requests": len(statuses), "5xx": dict(failures),
            "429": dict(Counter(where for s, where in statuses if s == 429)),
            "503": dict(Counter(where for s, where in statuses if s == 503)),
            "no_answer": dict(Counter(where for s, where in statuses if s == 0))}


def step_posts(requests: list[dict[str, Any]]) -> dict[str, Any]:
    posts = [r for r in requests if r["method"] == "POST" and r["path"].endswith("/steps/")]
    ok = [r["seconds"] for r in posts if 200 <= r["status"] < 300]
    return {**spread_ms(ok, (50, 95, 99)), "attempts": len(posts),
            "steps_per_post": round(sum(r["steps"] for r in posts) / len(posts), 2) if posts else None}


def run_accounting(run: dict[str, Any]) -> dict[str, Any]:
    """A run's logged and stored steps (and rollouts, for SDK runs): lost and duplicated."""
    keys = [(a, s) for a, s, _, _ in run["rows"]]
    stored = {s for _, s in keys}
    logged = run["logged"]
    figures = {"kind": run["kind"], "state": run["state"], "logged": len(logged), "stored": len(stored),
               "lost": len(logged - stored), "duplicates": len(keys) - len(set(keys))}
    if run.get("logged_rollouts") is not None:
        figures.update(rollouts_logged=run["logged_rollouts"], rollouts_stored=sum(run["rollouts"].values()))
    return figures


def summarize(seen: dict[str, Any]) -> dict[str, Any]:
    """The report (JSON-ready) from what lab_load.py observed; see the module's docstring."""
    runs, start = seen["runs"], seen["released_at"]
    requests = [r for child in seen["sdk"] for r in child["requests"]]
    created = {run_id: {seq: at for _, _, seq, at in run["rows"]} for run_id, run in runs.items()}
    in_window = [(run_id, a, s, at) for run_id, run in runs.items() for a, s, _, at in run["rows"] if at >= start]
    end = max((at for *_, at in in_window), default=start)
    window = max(end - start, 1e-9)
    stored: dict[str, Any] = {"window_s": round(end - start, 2)}
    for kind in ("sdk", "cohort", "all"):
        rows = [r for r in in_window if kind == "all" or runs[r[0]]["kind"] == kind]
        rollouts = sum(runs[run_id]["rollouts"].get((a, s), 0) for run_id, a, s, _ in rows)
        stored[kind] = {"steps": len(rows), "rollouts": rollouts, "steps_per_s": round(len(rows) / window, 1),
                        "rollouts_per_s": round(rollouts / window, 1)}
    by_run = {run_id: run_accounting(run) for run_id, run in runs.items()}
    delays, missing = [], Counter()
    for viewer in seen["viewers"]:
        for seq, (_, at) in viewer["arrived"].items():
            if seq in created[viewer["run"]]:
                delays.append(at - created[viewer["run"]][seq])
        due = {seq for seq, at in created[viewer["run"]].items() if at >= viewer["connected_at"]}
        missing[viewer["run"]] += len(due - set(viewer["arrived"]))
    lags = [created_at - seen["written"][run_id][step] for run_id in seen["written"]
            for _, step, _, created_at in runs[run_id]["rows"] if step in seen["written"][run_id]]
    pages = {kind: {**spread_ms([s for k, st, s in seen["pages"] if k == kind and st == 200]),
                    "errors": sum(1 for k, st, _ in seen["pages"] if k == kind and st != 200)}
             for kind in ("/runs/<id>/", "/runs/")}
    report = {
        "settings": seen["settings"], "server": seen["server"], "machine": seen["machine"], "stored": stored,
        "step_post_ms": step_posts(requests), "answers": answers(requests, seen["pages"]),
        "lost_steps": {"lost": sum(r["lost"] for r in by_run.values()),
                       "duplicates": sum(r["duplicates"] for r in by_run.values()), "by_run": by_run},
        "notices": {"viewers": len(seen["viewers"]), "viewed_runs": sorted({v["run"] for v in seen["viewers"]}),
                    "received": sum(len(v["arrived"]) for v in seen["viewers"]), "lost": sum(missing.values()),
                    "lost_by_run": dict(missing), "grace_s": seen["grace_s"], "delay_ms": spread_ms(delays)},
        "ingest_lag_ms": spread_ms(lags) if seen["written"] else None,
        "pages_ms": pages, "definitions": DEFINITIONS,
    }
    report["failures"] = failures(report)
    return report


def failures(report: dict[str, Any]) -> list[str]:
    """Why the run failed: a 5xx other than 503, no answer, a lost or duplicated step or rollout, a
    Cohort run that did not succeed."""
    why = [f"{n} x {what}" for what, n in report["answers"]["5xx"].items()]
    why += [f"{n} x no answer to {what}" for what, n in report["answers"]["no_answer"].items()]
    for run_id, run in report["lost_steps"]["by_run"].items():
        if run["lost"] or run["duplicates"]:
            why.append(f"run {run_id}: {run['lost']} steps lost, {run['duplicates']} stored twice")
        if run.get("rollouts_logged", 0) != run.get("rollouts_stored", 0):
            why.append(f"run {run_id}: {run['rollouts_logged']} rollouts logged, {run['rollouts_stored']} stored")
        if run["kind"] == "cohort" and run["state"] != "succeeded":
            why.append(f"Cohort run {run_id} ended {run['state']}")
    return why


def _ms(figures: dict[str, Any], ps: tuple[int, ...] = (50, 95)) -> str:
    if not figures["count"]:
        return "none"
    return "  ".join(f"p{p} {figures[f'p{p}']:.1f}" for p in ps) + f"  max {figures['max']:.1f} ms"


def _counts(by_where: dict[str, int]) -> str:
    return ", ".join(f"{n} {where}" for where, n in sorted(by_where.items())) or "none"


def text(report: dict[str, Any]) -> str:
    s, stored, posts, ans = report["settings"], report["stored"], report["step_post_ms"], report["answers"]
    lost, notices, lag = report["lost_steps"], report["notices"], report["ingest_lag_ms"]
    sdk_runs = [r for r in lost["by_run"].values() if r["kind"] == "sdk"]
    cohort_runs = {i: r for i, r in lost["by_run"].items() if r["kind"] == "cohort"}
    lines = [
        f"Lab load: {s['runs']} SDK runs x {s['steps']} steps x {s['rollouts']} rollouts (groups of {s['group']}), "
        f"{s['cohort_runs']} Cohort runs (toy, {s['cohort_steps']} steps), {s['viewers']} viewers; "
        f"{report['server']}; {report['machine']}",
        f"stored        {stored['all']['steps']:,} steps, {stored['all']['rollouts']:,} rollouts in {stored['window_s']} s "
        f"(from the release to the last row): {stored['all']['steps_per_s']} steps/s, "
        f"{stored['all']['rollouts_per_s']:,} rollouts/s  [SDK {stored['sdk']['steps']:,} steps / "
        f"{stored['sdk']['rollouts']:,} rollouts; Cohort {stored['cohort']['steps']} / {stored['cohort']['rollouts']:,}]",
        f"step posts    {posts['count']} answered 2xx of {posts['attempts']} (mean {posts['steps_per_post']} steps a post): "
        f"{_ms(posts, (50, 95, 99))}  (request -> answer's headers, each exchange)",
        f"answers       {ans['requests']:,} requests; 5xx: {_counts(ans['5xx'])}; 503: {_counts(ans['503'])}; "
        f"429: {_counts(ans['429'])}; no answer: {_counts(ans['no_answer'])}",
        f"lost steps    {lost['lost']} lost, {lost['duplicates']} stored twice  [{len(sdk_runs)} SDK runs: "
        f"{sum(r['logged'] for r in sdk_runs):,} steps logged, {sum(r['stored'] for r in sdk_runs):,} stored, "
        f"{sum(r['rollouts_stored'] for r in sdk_runs):,} of {sum(r['rollouts_logged'] for r in sdk_runs):,} rollouts"
        + "".join(f"; Cohort run {i} {r['state']}: {r['logged']} written, {r['stored']} stored"
                  for i, r in cohort_runs.items()) + "]",
        f"notices       {notices['viewers']} viewers on {len(notices['viewed_runs'])} runs: {notices['received']:,} "
        f"received, {notices['lost']} lost (grace {notices['grace_s']} s); delay {_ms(notices['delay_ms'])}  "
        "(arrival - StepMetric.created_at)",
        "ingest lag    " + ("n/a (no Cohort run, or its event log not readable here)" if not lag else
                            f"{lag['count']} steps: {_ms(lag)}  (StepMetric.created_at - the step's line in events.jsonl)"),
        "pages         " + "; ".join(f"{kind} {f['count']} loads: {_ms(f)}, {f['errors']} errors"
                                     for kind, f in report["pages_ms"].items()),
        "verdict       " + ("OK: no 5xx, no lost step" if not report["failures"]
                            else "FAILED: " + "; ".join(report["failures"])),
    ]
    return "\n".join(lines)
