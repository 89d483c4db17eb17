#!/usr/bin/env bash
set -euo pipefail
cat > /app/verify.sh <<'SH'
#!/usr/bin/env bash
set -uo pipefail
manifest=$1
dir=${2%/}
[ -z "$dir" ] && dir=/
if [ ! -r "$manifest" ] || [ -d "$manifest" ]; then
  echo "verify.sh: cannot read manifest '$manifest'" >&2
  exit 2
fi
exec python3 - "$manifest" "$dir" <<'PY'
import hashlib, os, re, sys
manifest, root = sys.argv[1], sys.argv[2]
listed = {}
with open(manifest, "rb") as f:
    for raw in f.read().split(b"\n"):
        line = raw.rstrip(b"\r")
        if not line.strip() or line.startswith(b"#"):
            continue
        m = re.fullmatch(rb"([0-9a-f]{64}) [ *](.+)", line)
        if m:
            listed[m.group(2)] = m.group(1).decode()
present = set()
man_real = os.path.realpath(manifest)
for dirpath, dirs, files in os.walk(root.encode()):
    for name in files:
        full = os.path.join(dirpath, name)
        if os.path.islink(full) or not os.path.isfile(full):
            continue
        if os.path.realpath(full) == man_real.encode():
            continue
        present.add(os.path.relpath(full, root.encode()))
results = []
for path in set(listed) | present:
    if path not in listed:
        results.append((path, b"EXTRA"))
    elif path not in present:
        full = os.path.join(root.encode(), path)
        if os.path.isfile(full) and not os.path.islink(full):
            # listed file that exists but was skipped (e.g. the manifest itself)
            status = b"OK" if hashlib.sha256(open(full, "rb").read()).hexdigest() == listed[path] else b"MISMATCH"
            results.append((path, status))
        else:
            results.append((path, b"MISSING"))
    else:
        digest = hashlib.sha256(open(os.path.join(root.encode(), path), "rb").read()).hexdigest()
        results.append((path, b"OK" if digest == listed[path] else b"MISMATCH"))
results.sort()
out = sys.stdout.buffer
for path, status in results:
    out.write(status + b" " + path + b"\n")
sys.exit(0 if all(s == b"OK" for _, s in results) else 1)
PY
SH
chmod +x /app/verify.sh
