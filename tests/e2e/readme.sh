#!/usr/bin/env bash
# shellcheck disable=SC2016 # (the backticks are markdown's)
# Writes the scenario list of tests/e2e/README.md, between its `<!-- BEGIN scenario list` and
# `<!-- END scenario list -->` lines, from the headers of tests/e2e/scenarios/*.sh (title, proves,
# default, needs; in run order: see lib.sh). Run it after adding or changing a scenario.
#
# Usage: tests/e2e/readme.sh [--check]
#   --check  write nothing; exit 1, showing the difference, when the README's list is not what
#            readme.sh would write (scripts/test.sh runs this before the end-to-end tier)
set -euo pipefail
E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=tests/e2e/lib.sh
source "$E2E_DIR/lib.sh"
README="$E2E_DIR/README.md"
BEGIN='<!-- BEGIN scenario list: tests/e2e/readme.sh writes it from the headers of scenarios/*.sh -->'
END='<!-- END scenario list -->'

check=0
case ${1:-} in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

# the list, as markdown
list() {
  local name f all=0 default=0 modern=0 title needs kube extra
  while IFS= read -r name; do
    all=$((all + 1))
    f="$E2E_DIR/scenarios/$name.sh"
    [[ $(scenario_field "$f" default) == no ]] && continue
    kube=$(scenario_field "$f" kube)
    [[ " $kube " == *" 1.32 "* ]] && modern=$((modern + 1))
    [[ -n $kube && " $kube " != *" 1.20 "* ]] || default=$((default + 1))
  done < <(scenarios_in_order)
  printf '%s scenarios, in the order a run takes them; `run.sh` with no argument runs %s of them\n' "$all" "$default"
  printf 'and its last line is then `%s passed, 0 failed` when all pass; `E2E_KUBE=1.32 run.sh` runs\n' "$default"
  printf 'the %s marked *Also on 1.32* or *On 1.32 only* on the Kubernetes 1.32 control plane.\n\n' "$modern"
  while IFS= read -r name; do
    f="$E2E_DIR/scenarios/$name.sh"
    title=$(scenario_field "$f" title)
    needs=$(scenario_field "$f" needs)
    kube=$(scenario_field "$f" kube)
    extra=""
    [[ $(scenario_field "$f" default) != no ]] || extra+=" *Only when named.*"
    [[ -z $needs ]] || extra+=" *Set-up: ${needs}.*"
    if [[ " $kube " == *" 1.32 "* ]]; then
      if [[ " $kube " == *" 1.20 "* ]]; then extra+=" *Also on 1.32.*"; else extra+=" *On 1.32 only.*"; fi
    fi
    printf -- '- **`%s`**: %s.%s\n' "$name" "$title" "$extra"
    scenario_field "$f" proves | sed 's/^/  /'
  done < <(scenarios_in_order)
}

[[ $(grep -cxF "$BEGIN" "$README") == 1 && $(grep -cxF "$END" "$README") == 1 ]] || {
  echo "readme.sh: $README needs exactly one line '$BEGIN' and one '$END'" >&2
  exit 2
}
new=$(mktemp)
trap 'rm -f "$new"' EXIT
{
  sed -n "1,/^$(sed 's/[][\.*^$/]/\\&/g' <<<"$BEGIN")\$/p" "$README"
  list
  sed -n "/^$(sed 's/[][\.*^$/]/\\&/g' <<<"$END")\$/,\$p" "$README"
} >"$new"
if ((check)); then
  if diff -u "$README" "$new" >&2; then
    echo "tests/e2e/README.md: the scenario list matches scenarios/*.sh"
  else
    echo "tests/e2e/README.md: the scenario list differs from scenarios/*.sh (above); run tests/e2e/readme.sh" >&2
    exit 1
  fi
elif cmp -s "$README" "$new"; then
  echo "tests/e2e/README.md: the scenario list is current"
else
  cat "$new" >"$README"
  echo "tests/e2e/README.md: scenario list written"
fi
