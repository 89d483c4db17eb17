#!/usr/bin/env python3
"""Figures of the daily CLI: `geode --version` start time, the REPL's first prompt (in a
pseudo-terminal, until `geode> ` is printed) and its greeting (printed above the prompt once
the session is set up, nothing typed), the time from a streamed reply's first text byte
leaving a loopback Anthropic peer to its glyph on the REPL's terminal, `geode exec --model nop`
wall time, and the serve daemon's RSS at rest.

    python3 scripts/measure_daily_cli.py target/release/geode [--runs 50]

Medians are printed; each run uses a fresh GEODE_HOME and the `nop` model or the loopback peer
(no network)."""

import argparse
import json
import os
import pty
import select
import signal
import socket
import statistics
import subprocess
import tempfile
import threading
import time

MARK = "Glyphmark"


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
    """Until `geode> ` is printed, and until the session's greeting is (above the prompt,
    with nothing typed)."""
    times, greetings = [], []
    for _ in range(runs):
        home = tempfile.mkdtemp()
        t0 = time.perf_counter()
        pid, fd = pty.fork()
        if pid == 0:
            os.chdir(home)
            os.execve(exe, [exe, "--local"], env_for(home))
        at, seen = read_until(fd, b"geode> ")
        times.append((at - t0) * 1e3)
        at, _ = read_until(fd, b"/help for commands", seen)
        greetings.append((at - t0) * 1e3)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return times, greetings


def read_until(fd, needle, seen=b"", timeout=10):
    """Terminal output until `needle` shows; the time it showed."""
    while needle not in seen:
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            raise SystemExit(f"no {needle!r} after {timeout} s: {seen!r}")
        seen += os.read(fd, 4096)
    return time.perf_counter(), seen


def sse(*events):
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events).encode()


def anthropic_peer(sent_at):
    """A loopback Messages API peer: the reply's start, a pause, then the first text delta
    (its send time appended to `sent_at`), then the rest."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def serve():
        while True:
            conn, _ = listener.accept()
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, body = data.split(b"\r\n\r\n", 1)
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            while len(body) < length:
                body += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"connection: close\r\n\r\n")
            conn.sendall(sse(
                {"type": "message_start", "message": {"id": "m", "type": "message",
                 "role": "assistant", "content": [], "model": "claude-sonnet-5",
                 "usage": {"input_tokens": 10, "output_tokens": 1}}},
                {"type": "content_block_start", "index": 0,
                 "content_block": {"type": "text", "text": ""}}))
            time.sleep(0.2)
            chunk = sse({"type": "content_block_delta", "index": 0,
                         "delta": {"type": "text_delta", "text": MARK + " arrives. "}})
            sent_at.append(time.perf_counter())
            conn.sendall(chunk)
            time.sleep(0.2)
            conn.sendall(sse(
                {"type": "content_block_delta", "index": 0,
                 "delta": {"type": "text_delta", "text": "The rest follows."}},
                {"type": "content_block_stop", "index": 0},
                {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                 "usage": {"output_tokens": 9}},
                {"type": "message_stop"}))
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}"


def first_glyph_ms(exe, runs):
    """From the peer sending the first text byte to that text on the REPL's terminal."""
    sent_at = []
    url = anthropic_peer(sent_at)
    times = []
    for _ in range(runs):
        home = tempfile.mkdtemp()
        env = env_for(home)
        env.update(GEODE_MODEL="anthropic:claude-sonnet-5", ANTHROPIC_BASE_URL=url,
                   ANTHROPIC_API_KEY="sk-ant-bench-0123456789", HOME=home)
        pid, fd = pty.fork()
        if pid == 0:
            os.chdir(home)
            os.execve(exe, [exe, "--local"], env)
        read_until(fd, b"geode> ")
        before = len(sent_at)
        os.write(fd, b"say something\r")
        shown, seen = read_until(fd, MARK.encode())
        if len(sent_at) != before + 1:
            raise SystemExit(f"the peer sent no first chunk: {seen!r}")
        times.append((shown - sent_at[-1]) * 1e3)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return times


def exec_nop_ms(exe, runs):
    times = []
    for _ in range(runs):
        home = tempfile.mkdtemp()
        t0 = time.perf_counter()
        subprocess.run([exe, "exec", "--model", "nop", "hello"], cwd=home, env=env_for(home),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append((time.perf_counter() - t0) * 1e3)
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
    p, greeting = first_prompt_ms(exe, max(5, args.runs // 2))
    print(f"geode --version: median {statistics.median(v):.1f} ms over {len(v)} runs")
    print(f"REPL first prompt: median {statistics.median(p):.1f} ms over {len(p)} runs")
    print(f"REPL greeting (nothing typed): median {statistics.median(greeting):.1f} ms "
          f"over {len(greeting)} runs")
    g = first_glyph_ms(exe, max(10, args.runs // 5))
    print(f"first streamed byte to glyph: median {statistics.median(g):.1f} ms "
          f"over {len(g)} runs")
    n = exec_nop_ms(exe, max(10, args.runs // 5))
    print(f"geode exec --model nop: median {statistics.median(n):.1f} ms over {len(n)} runs")
    print(f"daemon RSS at rest: {daemon_rss_mb(exe):.1f} MB")


if __name__ == "__main__":
    main()
