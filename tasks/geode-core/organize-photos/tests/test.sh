#!/usr/bin/env bash
# Verifier for geode/organize-photos.
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

mkh() {
  local H=$1
  rm -rf "$H"; mkdir -p "$H/2024/03" "$H/sub"
  printf 'c1' > "$H/IMG_20240301_101500.jpg"
  printf 'c2' > "$H/IMG_20240301_101500.JPG"
  printf 'c3' > "$H/IMG_20240301_101500.jpeg"
  printf 'c4' > "$H/IMG_20240302_080000.png"
  printf 'old' > "$H/2024/03/2024-03-02_08-00-00.png"
  printf 'c5' > "$H/VID_20231231_235959.Mp4"
  printf 'c6' > "$H/IMG_20240229_120000.PNG"
  printf 'c7' > "$H/IMG_20230229_120000.jpg"
  printf 'c8' > "$H/IMG_20241332_000000.jpg"
  printf 'c9' > "$H/IMG_2024031_101500.jpg"
  printf 'c10' > "$H/img_20240301_101500.jpg"
  printf 'c11' > "$H/IMG_20240301_101500.jpg.bak"
  printf 'c12' > "$H/IMG_20240301_246000.jpg"
  printf 'c13' > "$H/IMG_20240301_101500.gif"
  printf 'c14' > "$H/sub/IMG_20240101_000000.jpg"
  printf 'c15' > "$H/VID_20240101_000000.mp4"
  printf 'c16' > "$H/IMG 20240101 000000.jpg"
  mkdir -p "$H/IMG_20240105_000000.jpg"
}
cat > "$WORK/expected_out.txt" <<'GEODE_EOF'
IMG_20240229_120000.PNG -> 2024/02/2024-02-29_12-00-00.png
IMG_20240301_101500.JPG -> 2024/03/2024-03-01_10-15-00.jpg
IMG_20240301_101500.jpeg -> 2024/03/2024-03-01_10-15-00_1.jpg
IMG_20240301_101500.jpg -> 2024/03/2024-03-01_10-15-00_2.jpg
IMG_20240302_080000.png -> 2024/03/2024-03-02_08-00-00_1.png
VID_20231231_235959.Mp4 -> 2023/12/2023-12-31_23-59-59.mp4
VID_20240101_000000.mp4 -> 2024/01/2024-01-01_00-00-00.mp4
GEODE_EOF
cat > "$WORK/expected_tree.txt" <<'GEODE_EOF'
2023/12/2023-12-31_23-59-59.mp4=c5
2024/01/2024-01-01_00-00-00.mp4=c15
2024/02/2024-02-29_12-00-00.png=c6
2024/03/2024-03-01_10-15-00.jpg=c2
2024/03/2024-03-01_10-15-00_1.jpg=c3
2024/03/2024-03-01_10-15-00_2.jpg=c1
2024/03/2024-03-02_08-00-00.png=old
2024/03/2024-03-02_08-00-00_1.png=c4
IMG 20240101 000000.jpg=c16
IMG_20230229_120000.jpg=c7
IMG_20240301_101500.gif=c13
IMG_20240301_101500.jpg.bak=c11
IMG_20240301_246000.jpg=c12
IMG_2024031_101500.jpg=c9
IMG_20241332_000000.jpg=c8
img_20240301_101500.jpg=c10
sub/IMG_20240101_000000.jpg=c14
GEODE_EOF
snapshot() { (cd "$1" && find . -type f -printf '%P=' -exec cat {} \; -printf '\n' | LC_ALL=C sort); }
mkh "$WORK/h"
snapshot "$WORK/h" > "$WORK/tree_before.txt"
(cd "$WORK/h" && find . -type d | LC_ALL=C sort) > "$WORK/dirs_before.txt"
t_exec() { [ -x /app/organize.sh ]; }
t_example() {
  rm -rf "$WORK/cam" && cp -r /app/camera "$WORK/cam" 2>/dev/null || return 1
  printf 'IMG_20240301_101500.JPG -> 2024/03/2024-03-01_10-15-00.jpg\nIMG_20240301_101500.jpg -> 2024/03/2024-03-01_10-15-00_1.jpg\nVID_20231231_235959.MP4 -> 2023/12/2023-12-31_23-59-59.mp4\n' > "$WORK/w0"
  timeout 20 /app/organize.sh "$WORK/cam" > "$WORK/g0" && same_output "$WORK/w0" "$WORK/g0"
}
t_dry() {
  timeout 20 /app/organize.sh -n "$WORK/h" > "$WORK/dry.txt" || return 1
  same_output "$WORK/expected_out.txt" "$WORK/dry.txt" || return 1
  snapshot "$WORK/h" > "$WORK/tree_dry.txt"
  same_output "$WORK/tree_before.txt" "$WORK/tree_dry.txt" || { echo "dry run changed the tree"; return 1; }
  (cd "$WORK/h" && find . -type d | LC_ALL=C sort) > "$WORK/dirs_dry.txt"
  cmp -s "$WORK/dirs_before.txt" "$WORK/dirs_dry.txt" || { echo "dry run created directories"; return 1; }
}
t_real_out() { timeout 20 /app/organize.sh "$WORK/h/" > "$WORK/real.txt" && same_output "$WORK/expected_out.txt" "$WORK/real.txt"; }
t_real_tree() { snapshot "$WORK/h" > "$WORK/tree_after.txt"; same_output "$WORK/expected_tree.txt" "$WORK/tree_after.txt"; }
t_dir_untouched() { [ -d "$WORK/h/IMG_20240105_000000.jpg" ]; }
t_rerun() { timeout 20 /app/organize.sh "$WORK/h" > "$WORK/again.txt" && [ ! -s "$WORK/again.txt" ]; }
check "/app/organize.sh is executable" t_exec
check "example /app/camera (on a copy)" t_example
check "dry run prints the plan and changes nothing" t_dry
check "real run output (collisions, validation, order)" t_real_out
check "resulting tree and file contents" t_real_tree
check "directories with camera-like names are left alone" t_dir_untouched
check "second run has nothing to move" t_rerun

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
