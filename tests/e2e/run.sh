#!/usr/bin/env bash
# shellcheck disable=SC2317 # (shellcheck counts functions in the { } block below as unreachable)
# pinhook's end-to-end tier: a real kube-apiserver and kube-controller-manager
# (1.20.2, the workload controllers only) + etcd, a real registry, and the pinhook
# binary, all on 127.0.0.1; pinhook registered through manifests/overlays/local-url;
# scenarios create objects with kubectl (and the controllers create ReplicaSets,
# Pods...) and read back what the apiserver STORED.
#
# Usage: tests/e2e/run.sh [--list] [SCENARIO...]
#   --list            print the scenarios that would run, with their titles, and exit
#   no argument       every scenario but those marked `# default: no` (watch-at-scale)
#   SCENARIO          a file name in scenarios/ without .sh (e.g. `run.sh missing-tag-refused`),
#                     or a prefix or glob of names (`run.sh watch-`, `run.sh '*-pinned'`), which
#                     leaves out the `default: no` ones: those run only when named in full
# Scenarios run in their `# order:`, each in its own fresh namespace. What each proves: its
# file's header, and the list in tests/e2e/README.md (tests/e2e/readme.sh writes it from the
# headers; `readme.sh --check`, which scripts/test.sh runs, fails when it is stale). Adding a
# scenario: a new file in scenarios/ (header and functions: see lib.sh), then readme.sh.
#
# The scenarios that run with the controllers (audit-to-enforce-..., deployment-in-enforce-...,
# rollout-restart-..., controller-pods-..., target-pods-..., audit-with-controllers-...) each run
# the same steps in a twin namespace that no webhook sees (pinhook.dev/ignore=true) and log the
# `counts:` of both.
#
# The node scenarios (`# needs: node`, ordered last) run on a real node: node.sh's containerd,
# kubelet and kube-scheduler, started before the first of them (e2e_setup_node, lib.sh) and
# stopped by the teardown; the scenarios before them never see a scheduler (their Pods stay
# Pending). See tests/e2e/README.md, "The node". The node-chart-* ones (chart-node.sh) install
# charts/pinhook there with pinhook's own image, built by scripts/image.sh from the release binary.
#
# The last line of stdout is always `N passed, M failed` (scenarios that did not
# run because set-up failed count as failed). Exit 0 only when M is 0; exit 2, with no such
# line, for an unknown scenario or a scenario file whose header or functions are wrong.
#
# Kubernetes versions (issue 47): a scenario's header says which it runs on, `# kube: 1.20 1.32`
# (default 1.20 only). E2E_KUBE=1.32 runs the ones marked 1.32 on a 1.32 control plane whose
# kube-apiserver and kube-controller-manager KUBEBUILDER_ASSETS names (envtest's convention;
# ../shared/kube-1.32/install.sh DIR unpacks them). There is no 1.32 node: a `# needs: node`
# scenario marked 1.32 runs the 1.20 node against the 1.32 control plane (node.sh, "The node on
# 1.32"; only the availability scenarios, which measure the control plane). scripts/test.sh runs
# both tiers.
#
# Environment:
#   E2E_KUBE            1.20 (default) or 1.32: which control plane, and which scenarios
#   KUBEBUILDER_ASSETS  with E2E_KUBE=1.32: the directory holding its two binaries
#   E2E_WORK            cluster work dir (default /tmp/pinhook-e2e-run, or
#                       /tmp/pinhook-e2e-run-1.32 with E2E_KUBE=1.32; see cluster.sh);
#                       this script's own files go to $E2E_WORK/run
#   E2E_APISERVER_PORT, E2E_ETCD_PORT, E2E_ETCD_PEER_PORT
#                       default 6443/2379/2380, or free random ports when those are taken
#   PINHOOK_PORT        pinhook's port (default: a free one)
#   E2E_KCM_PORT        the controller manager's /healthz port (default 10252, or a free one)
#   KUBE_APISERVER      use this kube-apiserver binary (skips build-kube-apiserver.sh)
#   KUBE_CONTROLLER_MANAGER
#                       use this kube-controller-manager binary (default: beside the apiserver)
#   E2E_LOOP_WATCH      seconds audit-to-enforce-no-replicaset-loop watches the ReplicaSet count
#                       after `set env` (default 60)
#   E2E_OPERATOR_WATCH  seconds the scenarios with the stand-in Widget operator watch it after the
#                       Widget is created (default 60; custom-resource-pinned-where-operator-reads: 30)
#   HELM_STREAM_SECONDS seconds the helm3-/helm4-chart-lifecycle scenarios stream dry-run creates
#                       through the rotations (default 75)
#   PODS_CACHE_TTL      --cache-ttl of the `target: pods` pinhook (default 16;
#                       target-pods-one-digest-per-revision takes about T + 5 s)
#   E2E_SKIP_BUILD=1    do not run cargo; use PINHOOK_BIN / E2E_REGISTRY_BIN / PROVIDER_BIN (default
#                       target/debug/pinhook, target/debug/examples/e2e_registry and
#                       target/debug/examples/credential_provider; CARGO_TARGET_DIR moves them)
#   PINHOOK_IMAGE_BINARY the pinhook binary the node-chart-* scenarios pack into pinhook's image
#                       (scripts/image.sh --binary); scripts/test.sh sets the dev-profile binary
#                       its image tier packed; default ${CARGO_TARGET_DIR:-target}/release/pinhook,
#                       built here with `cargo build --release --locked --bin pinhook` when absent
#                       (not with E2E_SKIP_BUILD=1)
#   E2E_PINHOOK_IDENTITY serviceaccount (default): pinhook authenticates with a token of
#                       pinhook-system/pinhook (the shipped ClusterRole, manifests/base/rbac.yaml);
#                       admin: with the admin kubeconfig, as kubectl does
#   E2E_KEEP=1          leave pinhook, the registry and the cluster running at the end
#                       (stop them yourself: kill the PIDs printed, cluster.sh stop)
set -euo pipefail

# The whole script is one { ... } block: bash parses it completely before running
# it, and it sources lib.sh, helm.sh, watch.sh and every scenario file before it runs
# anything, so editing these files while a run is in progress cannot derail that run.
{

E2E_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$E2E_DIR/../.." && pwd)"

E2E_KUBE="${E2E_KUBE:-1.20}"
case $E2E_KUBE in
  1.20) export E2E_WORK="${E2E_WORK:-/tmp/pinhook-e2e-run}" ;;
  1.32)
    if [[ ! -x ${KUBEBUILDER_ASSETS:-}/kube-apiserver || ! -x ${KUBEBUILDER_ASSETS:-}/kube-controller-manager ]]; then
      echo "E2E_KUBE=1.32 needs KUBEBUILDER_ASSETS naming a directory with kube-apiserver and" \
        "kube-controller-manager v1.32 (../shared/kube-1.32/install.sh DIR unpacks them)" >&2
      exit 2
    fi
    export KUBE_APISERVER="${KUBE_APISERVER:-$KUBEBUILDER_ASSETS/kube-apiserver}"
    export KUBE_CONTROLLER_MANAGER="${KUBE_CONTROLLER_MANAGER:-$KUBEBUILDER_ASSETS/kube-controller-manager}"
    export E2E_WORK="${E2E_WORK:-/tmp/pinhook-e2e-run-1.32}"
    ;;
  *)
    echo "E2E_KUBE is '$E2E_KUBE': 1.20 or 1.32" >&2
    exit 2
    ;;
esac
RUN="$E2E_WORK/run"

T_START=$(date +%s)
PASSED=0
FAILED=0
FAILED_NAMES=()
SCENARIOS_DONE=0
SELECTED=()
PINHOOK_PID=""
PODS_PINHOOK_PID=""
REGISTRY_PID=""
CLUSTER_STARTED=0
NODE_STARTED=0
NODE_SETUP_FAILED=0

# shellcheck source=tests/e2e/lib.sh
source "$E2E_DIR/lib.sh"
# shellcheck source=tests/e2e/helm.sh
source "$E2E_DIR/helm.sh"
# shellcheck source=tests/e2e/watch.sh
source "$E2E_DIR/watch.sh"
# shellcheck source=tests/e2e/chart-node.sh
source "$E2E_DIR/chart-node.sh"
# shellcheck source=tests/e2e/availability.sh
source "$E2E_DIR/availability.sh"

# --- the scenario files: headers checked, each sourced ------------------------------------------
declare -A TITLE=() DEFAULT=() NEEDS=() KUBE=()
ALL_SCENARIOS=() # every scenario, in run order
problems=()
n_files=0
while IFS= read -r f; do
  name=$(basename "$f" .sh)
  title=$(scenario_field "$f" title)
  order=$(scenario_field "$f" order)
  default=$(scenario_field "$f" default)
  needs=$(scenario_field "$f" needs)
  kube=$(scenario_field "$f" kube)
  [[ $name =~ ^[a-z0-9]+(-[a-z0-9]+)*$ ]] || problems+=("$f: the name is not lowercase words joined by -")
  [[ -n $title && $title != *$'\n'* ]] || problems+=("$f: no one-line '# title:' in its header")
  [[ $order =~ ^[0-9]+$ ]] || problems+=("$f: '# order:' is not a number")
  [[ -n $(scenario_field "$f" proves) ]] || problems+=("$f: no '# proves:' in its header")
  [[ -z $default || $default == no ]] || problems+=("$f: '# default:' is '$default', not 'no'")
  for need in $needs; do
    [[ $need == pods-pinhook || $need == scale-images || $need == node ]] || problems+=("$f: unknown '# needs:' $need")
  done
  for version in $kube; do
    [[ $version == 1.20 || $version == 1.32 ]] || problems+=("$f: unknown '# kube:' $version (1.20, 1.32)")
  done
  [[ " $needs " == *" node "* && " $kube " == *" 1.32 "* && $name != node-availability-* ]] &&
    problems+=("$f: '# kube:' 1.32 for a node scenario that is not an availability one (the node on 1.32 is 1.20's)")
  # shellcheck disable=SC1090 # (each scenario file is checked on its own)
  source "$f"
  declare -F "$(scenario_fn "$name")" >/dev/null || problems+=("$f: defines no $(scenario_fn "$name")")
  TITLE[$name]=$title
  DEFAULT[$name]=${default:-yes}
  NEEDS[$name]=$needs
  KUBE[$name]=${kube:-1.20}
  n_files=$((n_files + 1))
done < <(scenario_files)
((n_files > 0)) || problems+=("no scenario file in $E2E_DIR/scenarios")
# sourced one after the other, two files defining the same function would silently share one
while IFS= read -r dup; do
  problems+=("function $dup is defined twice in lib.sh, helm.sh, watch.sh, chart-node.sh, availability.sh or scenarios/")
done < <(sed -n 's/^\([a-zA-Z_][a-zA-Z0-9_]*\)() *{.*/\1/p' "$E2E_DIR/lib.sh" "$E2E_DIR/helm.sh" \
  "$E2E_DIR/watch.sh" "$E2E_DIR/chart-node.sh" "$E2E_DIR/availability.sh" "$E2E_DIR"/scenarios/*.sh | sort | uniq -d)
if ((${#problems[@]} > 0)); then
  printf 'run.sh: %s\n' "${problems[@]}" >&2
  exit 2
fi
mapfile -t ALL_SCENARIOS < <(scenarios_in_order)

# --- scenario selection ---------------------------------------------------------
LIST=0
if [[ ${1:-} == --list ]]; then
  LIST=1
  shift
fi
select_scenario() { # select_scenario NAME: add NAME to SELECTED once
  local s
  for s in "${SELECTED[@]}"; do [[ $s == "$1" ]] && return 0; done
  SELECTED+=("$1")
}
if (($# > 0)); then
  for arg in "$@"; do
    if [[ -n ${TITLE[$arg]:-} ]]; then
      if [[ " ${KUBE[$arg]} " != *" $E2E_KUBE "* ]]; then
        echo "scenario '$arg' does not run on Kubernetes $E2E_KUBE (its '# kube:' is ${KUBE[$arg]})" >&2
        exit 2
      fi
      select_scenario "$arg"
      continue
    fi
    matched=0
    for s in "${ALL_SCENARIOS[@]}"; do
      # shellcheck disable=SC2053 # (a glob on purpose)
      if [[ ${DEFAULT[$s]} == yes && " ${KUBE[$s]} " == *" $E2E_KUBE "* && ($s == $arg || $s == "$arg"*) ]]; then
        select_scenario "$s"
        matched=1
      fi
    done
    if ((!matched)); then
      echo "unknown scenario '$arg' (known: ${ALL_SCENARIOS[*]}; a prefix or glob leaves out the" \
        "ones marked '# default: no', which run only when named in full)" >&2
      exit 2
    fi
  done
else
  for s in "${ALL_SCENARIOS[@]}"; do
    [[ ${DEFAULT[$s]} == yes && " ${KUBE[$s]} " == *" $E2E_KUBE "* ]] && SELECTED+=("$s")
  done
fi
if ((LIST)); then
  for s in "${SELECTED[@]}"; do printf '%s\t%s\n' "$s" "${TITLE[$s]}"; done
  exit 0
fi
# needed NEED: a selected scenario's header says `# needs: NEED`
needed() {
  local s
  for s in "${SELECTED[@]}"; do [[ " ${NEEDS[$s]} " == *" $1 "* ]] && return 0; done
  return 1
}

# --- cleanup ------------------------------------------------------------------------
cleanup() {
  local rc=$?
  set +e
  trap - EXIT INT TERM
  # everything selected that did not pass counts as failed (also: not run)
  local failed=$((${#SELECTED[@]} - PASSED))
  if ((SCENARIOS_DONE < ${#SELECTED[@]})); then
    log "stopped early (exit $rc): $((${#SELECTED[@]} - SCENARIOS_DONE)) scenario(s) not run"
  fi
  e2e_teardown "$((rc != 0 || failed > 0))"
  log "total $(($(date +%s) - T_START))s"
  if ((${#FAILED_NAMES[@]} > 0)); then
    log "failed: ${FAILED_NAMES[*]}"
    # the failed checks again, each cut to a line (the first 40 of them)
    [[ ! -s $RUN/failures ]] || cut -c1-400 "$RUN/failures" | head -n 40 | sed 's/^/  FAIL /' >&2
  fi
  echo "$PASSED passed, $failed failed"
  ((failed == 0 && rc == 0)) || exit 1
  exit 0
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# --- set-up (lib.sh) -----------------------------------------------------------------
log "run dir $RUN; scenarios: ${SELECTED[*]}"
e2e_setup_build
e2e_setup_cluster
# watch-at-scale needs more images in the registry
if needed scale-images; then export E2E_SCALE_IMAGES="${WATCH_SCALE_IMAGES:-200}"; fi
e2e_setup_registry
e2e_setup_manifests
e2e_setup_identity
e2e_setup_pinhook
if needed pods-pinhook; then e2e_setup_pods_pinhook; fi

# --- the scenarios ---------------------------------------------------------------------
run_scenario() { # run_scenario NAME
  local s=$1 t0 rc=0
  # the node starts before the first scenario that needs it (they order last)
  if [[ " ${NEEDS[$s]} " == *" node "* ]] && ((!NODE_STARTED)); then
    log "starting the node (needs: node)"
    e2e_setup_node || NODE_SETUP_FAILED=1
  fi
  t0=$(date +%s.%N)
  log "=== $s: ${TITLE[$s]}"
  if [[ " ${NEEDS[$s]} " == *" node "* ]] && ((NODE_SETUP_FAILED)); then
    FAILED=$((FAILED + 1))
    FAILED_NAMES+=("$s")
    log "=== $s: FAIL (the node did not start)"
    return 0
  fi
  set +e
  (
    set -eE
    export E2E_SCENARIO=$s
    trap '[[ $BASH_COMMAND == return* ]] || bad "\`$BASH_COMMAND\` exited $? (line $LINENO)" || true' ERR
    "$(scenario_fn "$s")"
  )
  rc=$?
  set -e
  local dt
  dt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
  if ((rc == 0)); then
    PASSED=$((PASSED + 1))
    log "=== $s: PASS (${dt}s)"
  else
    FAILED=$((FAILED + 1))
    FAILED_NAMES+=("$s")
    log "=== $s: FAIL (exit $rc, ${dt}s)"
  fi
}

# A scenario's prepare_NAME runs now, before the first scenario (audit-to-enforce-no-replicaset-loop:
# so that pinhook's 30 s namespace label cache ages while the others run). A failure is logged; the
# scenario itself then fails.
for s in "${SELECTED[@]}"; do
  prepare="prepare_${s//-/_}"
  declare -F "$prepare" >/dev/null || continue
  log "$s: $prepare now, before the first scenario"
  set +e # (as run_scenario: errexit inside the subshell only works outside an || list)
  (set -eE && "$prepare")
  (($? == 0)) || log "$s: $prepare failed ($s will fail)"
  set -e
done
log "set-up done in $(($(date +%s) - T_START))s; running ${#SELECTED[@]} scenario(s)"
T_SCEN=$(date +%s)
for s in "${SELECTED[@]}"; do
  run_scenario "$s"
  SCENARIOS_DONE=$((SCENARIOS_DONE + 1))
done
log "scenarios done in $(($(date +%s) - T_SCEN))s"
exit 0 # cleanup (EXIT trap) prints the summary line last and sets the exit code
}
