#!/usr/bin/env bash
set -euo pipefail
cat > /app/largest.sh <<'SH'
#!/usr/bin/env bash
set -euo pipefail
dir=${1%/}
n=$2
ext=$3
cd "$dir"
find . -type f -name "*.$ext" -printf '%s\t%P\n' | LC_ALL=C sort -t "$(printf '\t')" -k1,1nr -k2,2 | head -n "$n"
SH
chmod +x /app/largest.sh
