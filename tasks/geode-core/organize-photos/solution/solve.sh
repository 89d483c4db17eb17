#!/usr/bin/env bash
set -euo pipefail
cat > /app/organize.sh <<'SH'
#!/usr/bin/env bash
set -uo pipefail
export LC_ALL=C
dry=0
if [ "${1:-}" = "-n" ]; then dry=1; shift; fi
dir=${1%/}
[ -n "$dir" ] || dir=/
declare -A taken=()
re='^(IMG|VID)_([0-9]{4})([0-9]{2})([0-9]{2})_([0-9]{2})([0-9]{2})([0-9]{2})\.([A-Za-z0-9]+)$'
while IFS= read -r -d '' path; do
  name=${path##*/}
  [[ $name =~ $re ]] || continue
  Y=${BASH_REMATCH[2]} m=${BASH_REMATCH[3]} d=${BASH_REMATCH[4]}
  H=${BASH_REMATCH[5]} M=${BASH_REMATCH[6]} S=${BASH_REMATCH[7]} ext=${BASH_REMATCH[8],,}
  case $ext in jpg|png|mp4) ;; jpeg) ext=jpg ;; *) continue ;; esac
  (( 10#$H <= 23 && 10#$M <= 59 && 10#$S <= 59 )) || continue
  [ "$(date -d "$Y-$m-$d" +%Y%m%d 2>/dev/null)" = "$Y$m$d" ] || continue
  base="$Y/$m/$Y-$m-$d"_"$H-$M-$S"
  new="$base.$ext"
  n=0
  while [ -e "$dir/$new" ] || [ -n "${taken[$new]:-}" ]; do
    n=$((n + 1))
    new="${base}_$n.$ext"
  done
  taken[$new]=1
  echo "$name -> $new"
  if [ $dry -eq 0 ]; then
    mkdir -p "$dir/$Y/$m"
    mv -n -- "$path" "$dir/$new"
  fi
done < <(find "$dir" -mindepth 1 -maxdepth 1 -type f -print0 | sort -z)
exit 0
SH
chmod +x /app/organize.sh
