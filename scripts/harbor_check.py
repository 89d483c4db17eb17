#!/usr/bin/env python3
"""Validate GEODE files with Harbor's own pydantic models (harbor 0.25 from PyPI).

Usage: harbor_check.py PACK_DIR [JOBS_DIR [--view]]

- every `task.toml` below PACK_DIR with `harbor.models.task.config.TaskConfig`;
- below JOBS_DIR (if given), each run folder's `config.json` with `JobConfig`, `lock.json` with
  `JobLock` and `result.json` with `JobResult`; each trial's `result.json` with `TrialResult` and
  its `lock.json` with `TrialLock` (which Harbor 0.26's viewer requires); every
  `agent/trajectory.json` with `Trajectory`.

With --view, `harbor view JOBS_DIR` is started on a free loopback port and its API is asked for
every run, its trials with their rewards, and each trial's trajectory; each must match the files.

Harbor's job and trial models need Python 3.12+; on an older Python they are reported as not
checked, and only `TaskConfig` and `Trajectory` are. Prints what it validated; exits 1 naming
each file Harbor rejects.
"""

import json
import pathlib
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request

from harbor.models.task.config import TaskConfig
from harbor.models.trajectories.trajectory import Trajectory

try:
    from harbor.models.job.config import JobConfig
    from harbor.models.job.lock import JobLock, TrialLock
    from harbor.models.job.result import JobResult
    from harbor.models.trial.result import TrialResult
except Exception as e:  # typing.override and friends: Python 3.12+
    JOB_MODELS = f"not checked ({type(e).__name__}: {e})"
else:
    JOB_MODELS = None


def read_json(path):
    return json.loads(path.read_text())


def check(label, paths, load, model, bad):
    rejected = 0
    for path in paths:
        try:
            model.model_validate(load(path))
        except Exception as e:  # pydantic's ValidationError, or a parse error
            rejected += 1
            bad.append(f"{path}: {str(e).splitlines()[0:4]}")
    print(f"harbor {label}: {len(paths) - rejected} of {len(paths)} valid")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_view(jobs, runs, bad):
    """What `harbor view` shows of each run: its trials, their rewards, their trajectories."""
    harbor = pathlib.Path(sys.executable).parent / "harbor"
    port = free_port()
    server = subprocess.Popen(
        [harbor, "view", jobs, "--port", str(port), "--no-build", "--jobs"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}/api"

    def get(path):
        with urllib.request.urlopen(base + path, timeout=10) as r:
            return json.load(r)

    try:
        for _ in range(300):
            try:
                get("/health")
                break
            except OSError:
                time.sleep(0.1)
        listed = {j["name"]: j for j in get("/jobs?page_size=100")["items"]}
        shown = trajectories = 0
        for run in runs:
            job = listed.get(run.name)
            trials = sorted(run.glob("*/result.json"))
            if job is None or job["n_completed_trials"] != len(trials):
                bad.append(f"harbor view: run {run.name}: {job}")
                continue
            items = get(f"/jobs/{run.name}/trials?page_size=100")["items"]
            by_name = {t["name"]: t for t in items}
            for trial in trials:
                name = trial.parent.name
                want = (json.loads(trial.read_text())["verifier_result"]["rewards"] or {}).get(
                    "reward"
                )
                got = by_name.get(name, {}).get("reward", "missing")
                if got != want:
                    bad.append(f"harbor view: {run.name}/{name}: reward {got}, file {want}")
                shown += 1
                if (trial.parent / "agent/trajectory.json").is_file():
                    steps = get(f"/jobs/{run.name}/trials/{name}/trajectory").get("steps")
                    if not steps:
                        bad.append(f"harbor view: {run.name}/{name}: no trajectory steps")
                    trajectories += 1
        print(
            f"harbor view: {len(runs)} runs, {shown} trials with their rewards, "
            f"{trajectories} trajectories shown"
        )
    finally:
        server.terminate()
        server.wait(timeout=10)


def main():
    view = "--view" in sys.argv[1:]
    args = [a for a in sys.argv[1:] if a != "--view"]
    if len(args) not in (1, 2) or (view and len(args) != 2):
        sys.exit(__doc__)
    bad = []
    pack = pathlib.Path(args[0])
    tasks = sorted(pack.glob("*/task.toml"))
    if not tasks:
        sys.exit(f"{pack}: no task.toml found")
    check("TaskConfig", tasks, lambda p: tomllib.loads(p.read_text()), TaskConfig, bad)
    if len(args) == 2:
        jobs = pathlib.Path(args[1])
        trajectories = sorted(jobs.glob("**/agent/trajectory.json"))
        if not trajectories:
            sys.exit(f"{jobs}: no agent/trajectory.json found")
        check("Trajectory", trajectories, read_json, Trajectory, bad)
        runs = sorted(p.parent for p in jobs.glob("*/lock.json"))
        if not runs:
            sys.exit(f"{jobs}: no run folder (with lock.json) found")
        if JOB_MODELS:
            print(f"harbor JobConfig, JobLock, JobResult, TrialResult, TrialLock: {JOB_MODELS}")
        else:
            check("JobConfig", [r / "config.json" for r in runs], read_json, JobConfig, bad)
            check("JobLock", [r / "lock.json" for r in runs], read_json, JobLock, bad)
            check("JobResult", [r / "result.json" for r in runs], read_json, JobResult, bad)
            trials = sorted(t for r in runs for t in r.glob("*/result.json"))
            check("TrialResult", trials, read_json, TrialResult, bad)
            locks = [t.parent / "lock.json" for t in trials]
            check("TrialLock", locks, read_json, TrialLock, bad)
            if view:
                check_view(jobs, runs, bad)
    for line in bad:
        print(f"REJECTED {line}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
