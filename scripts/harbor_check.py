#!/usr/bin/env python3
"""Validate GEODE files with Harbor's own pydantic models (harbor 0.25 from PyPI).

Usage: harbor_check.py PACK_DIR [JOBS_DIR]

- every `task.toml` below PACK_DIR with `harbor.models.task.config.TaskConfig`;
- every `agent/trajectory.json` below JOBS_DIR (if given) with
  `harbor.models.trajectories.trajectory.Trajectory`.

Harbor's result models (`TrialResult`, `JobResult`) need Python 3.12+ and are not checked here
(see issue 16). Prints what it validated; exits 1 naming each file Harbor rejects.
"""

import json
import pathlib
import sys
import tomllib

from harbor.models.task.config import TaskConfig
from harbor.models.trajectories.trajectory import Trajectory


def check(paths, load, model):
    bad = []
    for path in paths:
        try:
            model.model_validate(load(path))
        except Exception as e:  # pydantic's ValidationError, or a parse error
            bad.append(f"{path}: {str(e).splitlines()[0:3]}")
    return bad


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    pack = pathlib.Path(sys.argv[1])
    tasks = sorted(pack.glob("*/task.toml"))
    if not tasks:
        sys.exit(f"{pack}: no task.toml found")
    bad = check(tasks, lambda p: tomllib.loads(p.read_text()), TaskConfig)
    print(f"harbor TaskConfig: {len(tasks) - len(bad)} of {len(tasks)} task.toml valid")
    if len(sys.argv) == 3:
        trajectories = sorted(pathlib.Path(sys.argv[2]).glob("**/agent/trajectory.json"))
        if not trajectories:
            sys.exit(f"{sys.argv[2]}: no agent/trajectory.json found")
        more = check(trajectories, lambda p: json.loads(p.read_text()), Trajectory)
        print(
            f"harbor Trajectory: {len(trajectories) - len(more)} of {len(trajectories)} "
            "trajectory.json valid"
        )
        bad += more
    for line in bad:
        print(f"REJECTED {line}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
