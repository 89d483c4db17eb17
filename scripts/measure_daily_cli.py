#!/usr/bin/env python3
"""Start-up figures of the daily CLI: `geode --version` start time, the REPL's first prompt (in a
pseudo-terminal, until `geode> ` is printed) and the serve daemon's RSS at rest.

    python3 scripts/measure_daily_cli.py target/release/geode [--runs 50]

Medians are printed; each run uses a fresh GEODE_HOME and the `nop` model (no network)."""

import argparse
import os
import pty
import select
import signal
import statistics
import subprocess
import tempfile
import time


def env_for(home):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEODE_")}
    env.update(GEODE_HOME=home, GEODE_MODEL="nop")
    return env


def version_ms(exe, runs):
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([exe, "--version"], stdout=subprocess.DEVNULL, check=True)
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def first_prompt_ms(exe, runs):
    times = []
    for _ in range(runs):
        home = tempfile.mkdtemp()
        t0 = time.perf_counter()
        pid, fd = pty.fork()
        if pid == 0:
            os.chdir(home)
            os.execve(exe, [exe, "--local"], env_for(home))
        seen = b""
        while b"geode> " not in seen:
            ready, _, _ = select.select([fd], [], [], 10)
            if not ready:
                raise SystemExit(f"no prompt after 10 s: {seen!r}")
            seen += os.read(fd, 4096)
        times.append((time.perf_counter() - t0) * 1e3)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return times


def daemon_rss_mb(exe, settle_s=3.0):
    home = tempfile.mkdtemp()
    proc = subprocess.Popen([exe, "serve"], cwd=home, env=env_for(home),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(settle_s)
        with open(f"/proc/{proc.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        raise SystemExit("no VmRSS line")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("geode")
    ap.add_argument("--runs", type=int, default=50)
    args = ap.parse_args()
    exe = os.path.abspath(args.geode)
    v = version_ms(exe, args.runs)
    p = first_prompt_ms(exe, max(5, args.runs // 2))
    print(f"geode --version: median {statistics.median(v):.1f} ms over {len(v)} runs")
    print(f"REPL first prompt: median {statistics.median(p):.1f} ms over {len(p)} runs")
    print(f"daemon RSS at rest: {daemon_rss_mb(exe):.1f} MB")


if __name__ == "__main__":
    main()
