#!/usr/bin/env bash
# Verifier for geode/xterm-echo: the terminal's shell wrote the exact line.
# The exit code is ignored: only /logs/verifier/reward.txt counts.
set -u
mkdir -p /logs/verifier
rm -f /logs/verifier/reward.txt /logs/verifier/reward.json
if [ "$(cat /app/answer.txt 2>/dev/null)" = "geode-desktop-ok" ]; then
  echo "PASS: /app/answer.txt holds geode-desktop-ok"
  echo 1 > /logs/verifier/reward.txt
else
  echo "FAIL: /app/answer.txt is $(head -c 200 /app/answer.txt 2>/dev/null || echo missing)"
  echo 0 > /logs/verifier/reward.txt
fi
