#!/usr/bin/env bash
# Verifier for geode/markdown-toc.
# The exit code is ignored: only /logs/verifier/reward.txt counts ("1" = every check passed).
set -u
REWARD_DIR=/logs/verifier
mkdir -p "$REWARD_DIR"
# Never trust anything left behind in the verifier folder.
rm -f "$REWARD_DIR/reward.txt" "$REWARD_DIR/reward.json" "$REWARD_DIR/ctrf.json"
echo 0 > "$REWARD_DIR/reward.txt"
PASSED=0
FAILED=0
RESULTS=""
WORK=$(mktemp -d /tmp/geode-verify.XXXXXX)
cd /app 2>/dev/null || true

# check "name" command [args...]: runs the command in a subshell, records PASS/FAIL.
check() {
  local name=$1
  shift
  if ( "$@" ) </dev/null >"$WORK/check.out" 2>&1; then
    echo "PASS: $name"
    PASSED=$((PASSED + 1))
    RESULTS+="passed"$'\t'"$name"$'\n'
  else
    echo "FAIL: $name"
    head -n 20 "$WORK/check.out" | sed 's/^/    /'
    FAILED=$((FAILED + 1))
    RESULTS+="failed"$'\t'"$name"$'\n'
  fi
}

# same_output EXPECTED_FILE ACTUAL_FILE: exact comparison with a diff on failure.
same_output() {
  if cmp -s "$1" "$2"; then return 0; fi
  echo "--- expected vs actual (diff):"
  diff "$1" "$2" | head -n 15
  return 1
}

cat > "$WORK/doc1.md" <<'GEODE_EOF'
# Title

Intro text. # not a heading (not at line start)
<!-- toc -->
- [stale](#stale)
<!-- /toc -->

## Overview ##
#NoSpace is not a heading
 ## leading space is not a heading
## Learn C# fast
###   Spaced   title   
### Step 1: install
~~~
## fenced with tildes
```
still inside the tilde fence
```
~~~
### Step 1: install
#### Ünïcode & émoji ✓ test
## FAQ
### What's new?
```python
# comment
~~~
## still in the backtick fence
```
##### Level five
## overview
###### six
## FAQ
<!-- toc -->
second marker pair is left alone
<!-- /toc -->
GEODE_EOF
cat > "$WORK/doc2.md" <<'GEODE_EOF'
no markers here

## A heading
GEODE_EOF
cat > "$WORK/exp_toc1.txt" <<'GEODE_EOF'
- [Overview](#overview)
- [Learn C# fast](#learn-c-fast)
  - [Spaced   title](#spaced---title)
  - [Step 1: install](#step-1-install)
  - [Step 1: install](#step-1-install-1)
    - [Ünïcode & émoji ✓ test](#ncode--moji--test)
- [FAQ](#faq)
  - [What's new?](#whats-new)
- [overview](#overview-1)
- [FAQ](#faq-1)
GEODE_EOF
cat > "$WORK/up1.md" <<'GEODE_EOF'
# Title

Intro text. # not a heading (not at line start)
<!-- toc -->
- [Overview](#overview)
- [Learn C# fast](#learn-c-fast)
  - [Spaced   title](#spaced---title)
  - [Step 1: install](#step-1-install)
  - [Step 1: install](#step-1-install-1)
    - [Ünïcode & émoji ✓ test](#ncode--moji--test)
- [FAQ](#faq)
  - [What's new?](#whats-new)
- [overview](#overview-1)
- [FAQ](#faq-1)
<!-- /toc -->

## Overview ##
#NoSpace is not a heading
 ## leading space is not a heading
## Learn C# fast
###   Spaced   title   
### Step 1: install
~~~
## fenced with tildes
```
still inside the tilde fence
```
~~~
### Step 1: install
#### Ünïcode & émoji ✓ test
## FAQ
### What's new?
```python
# comment
~~~
## still in the backtick fence
```
##### Level five
## overview
###### six
## FAQ
<!-- toc -->
second marker pair is left alone
<!-- /toc -->
GEODE_EOF
cat > "$WORK/exp_guide.txt" <<'GEODE_EOF'
- [Getting started](#getting-started)
  - [Install (Linux & macOS)](#install-linux--macos)
  - [Install](#install)
- [Usage](#usage)
    - [`--verbose` flag](#--verbose-flag)
- [Usage](#usage-1)
GEODE_EOF
t_exec() { test -x /app/mdtoc; }
t_guide() { timeout 20 /app/mdtoc /app/GUIDE.md > "$WORK/out_guide.txt" && same_output "$WORK/exp_guide.txt" "$WORK/out_guide.txt"; }
t_toc1() { timeout 20 /app/mdtoc "$WORK/doc1.md" > "$WORK/out1.txt" && same_output "$WORK/exp_toc1.txt" "$WORK/out1.txt"; }
t_update() {
  cp "$WORK/doc1.md" "$WORK/work1.md"
  timeout 20 /app/mdtoc --update "$WORK/work1.md" >/dev/null && same_output "$WORK/up1.md" "$WORK/work1.md"
}
t_nomarker() {
  cp "$WORK/doc2.md" "$WORK/work2.md"
  timeout 20 /app/mdtoc --update "$WORK/work2.md" >/dev/null && same_output "$WORK/doc2.md" "$WORK/work2.md"
}
check "/app/mdtoc exists and is executable" t_exec
check "TOC of /app/GUIDE.md" t_guide
check "TOC of a hidden document (fences, duplicates, slugs)" t_toc1
check "--update replaces only the first marker block" t_update
check "--update leaves a file without markers untouched" t_nomarker

# ---------------------------------------------------------------- summary and reward
echo "$PASSED passed, $FAILED failed"
printf '%s' "$RESULTS" | python3 -c '
import json, sys
tests = []
for line in sys.stdin.read().splitlines():
    if "\t" in line:
        status, name = line.split("\t", 1)
        tests.append({"name": name, "status": status, "duration": 0})
passed = sum(t["status"] == "passed" for t in tests)
report = {"results": {"tool": {"name": "geode-checks"},
          "summary": {"tests": len(tests), "passed": passed, "failed": len(tests) - passed,
                      "pending": 0, "skipped": 0, "other": 0},
          "tests": tests}}
print(json.dumps(report, indent=2))
' > "$REWARD_DIR/ctrf.json" 2>/dev/null || rm -f "$REWARD_DIR/ctrf.json"
rm -rf "$WORK"
if [ "$FAILED" -eq 0 ] && [ "$PASSED" -gt 0 ]; then
  echo 1 > "$REWARD_DIR/reward.txt"
else
  echo 0 > "$REWARD_DIR/reward.txt"
fi
