#!/usr/bin/env bash
# Checks that includes between mlo's areas point one way (docs/architecture.md, "Dependencies
# point one way"): each area has a layer, and a file may include another area's headers only
# from a lower layer. Prints the include graph between areas (edges with file counts) and every
# edge that goes sideways or up, with the files; exits 1 if there is any.
#
# Usage: scripts/check_layers.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Layer of each area: lower numbers are included by higher ones, never the other way.
declare -A layer=([base]=0 [detail]=0 [nn]=1 [dist]=2 [memory]=2 [core]=3 [data]=4
                  [hypergrad]=4 [io]=4 [run]=5 [problems]=6 [cli]=7 [tools]=8)

files_of() {  # the source and header files of an area
  case "$1" in
    problems) find problems -name '*.h' -o -name '*.cpp' ;;
    tools) find tools -name '*.h' -o -name '*.cpp' ;;
    *) find "include/mlo/$1" "src/$1" \( -name '*.h' -o -name '*.cpp' \) 2>/dev/null ;;
  esac
}

status=0
report=""
for from in "${!layer[@]}"; do
  for to in "${!layer[@]}"; do
    [ "${from}" = "${to}" ] && continue
    case "${to}" in
      problems) pattern='#include "problems/' ;;
      tools) pattern='#include "ablate/\|#include "launch/\|#include "plan/' ;;
      *) pattern="#include <mlo/${to}/" ;;
    esac
    users=$(files_of "${from}" | xargs -r grep -l "${pattern}" || true)
    [ -z "${users}" ] && continue
    count=$(echo "${users}" | wc -l)
    if [ "${layer[${to}]}" -lt "${layer[${from}]}" ]; then
      report+="${from} -> ${to} (${count} files)"$'\n'
    else
      report+="${from} -> ${to} (${count} files): NOT ALLOWED (layer ${layer[${from}]} includes"
      report+=" layer ${layer[${to}]}): $(echo ${users})"$'\n'
      status=1
    fi
  done
done
printf '%s' "${report}" | sort
exit "${status}"
