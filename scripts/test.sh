#!/usr/bin/env bash
# Every test: installs what the tests need (Debian's docker-registry; the end-to-end tier also
# installs etcd and builds a kube-apiserver), checks formatting and lints, runs unit and
# integration tests against a real registry, the local demo, then the end-to-end tier on a
# real kube-apiserver, and again on Kubernetes 1.32 where KUBEBUILDER_ASSETS names its binaries
# (or ../shared/kube-1.32 holds them: unpacked into the e2e cache)
# (the scenarios marked `# kube: … 1.32`; said plainly when skipped). Set PINHOOK_SKIP_E2E=1 to
# stop before the end-to-end tiers.
# The Helm chart's checks (scripts/chart-check.sh) run after the cargo tests; their count is in
# the total.
# A short coverage-guided fuzzing pass (scripts/fuzz.sh, PINHOOK_FUZZ_SECONDS per target,
# default 5; 0 skips it) runs after the demo; its targets count in the total.
# The image tier (tests/image/check.sh) builds pinhook's OCI image offline (scripts/image.sh) from
# the dev-profile binary the cargo tests built (PINHOOK_IMAGE_BINARY overrides it), twice for
# reproducibility, and pushes it to a real registry; its checks count in the total.
# Before the end-to-end tier, `tests/e2e/readme.sh --check`: the scenario list of
# tests/e2e/README.md matches the scenario files (tier e2e-readme, run even with
# PINHOOK_SKIP_E2E=1).
#
# Every tier runs, in this order, even when one before it failed: deps, fmt, clippy, cargo-test,
# chart, demo, fuzz, image, e2e-readme, e2e, e2e-1.32. A tier that fails without a failure of its own in the
# total (fmt, clippy, demo, e2e-readme, deps, or a tier that stops before printing its count)
# counts as 1 failed.
# Before them, `tier seconds: deps 12, fmt 1, clippy 270, ... (total 3400)`: each tier's wall time.
# The last three lines: the harness's self-tests (the harness_selftest module of
# tests/integration), which test the test harness, not pinhook:
# `harness self-tests: N passed, M failed`; the tiers that failed:
# `failed tiers: clippy e2e` (or `failed tiers: none`); and the total, always last:
# `total: N passed, M failed` (pinhook's cargo tests, the chart's checks, the fuzz targets and
# the e2e scenarios, plus 1 per tier that failed without a count). Exit 1 when a tier failed.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '==> %s %s (disk free: %s)\n' "$(date -u +%H:%M:%S)" "$*" "$(df -h --output=avail . | tail -n1 | tr -d ' ')"; }
# A fresh build, not an incremental one: incremental state doubles the target directory (CI's
# disk ran out linking test binaries) and buys nothing on a fresh clone.
export CARGO_INCREMENTAL=0
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

passed=0
failed=0
harness_passed=0
harness_failed=0
failed_tiers=()
# Each tier's wall time, "NAME SECONDS" (from the end of the tier before it to its tier_done),
# printed as `tier seconds: ...` before the last three lines.
tier_times=()
tier_start=$SECONDS
# tier_done NAME EXIT_CODE [PASSED FAILED]: add a tier's counts to the total; a tier that exited
# non-zero with no failure counted counts as 1 failed
tier_done() {
    local name=$1 rc=$2 p=${3:-0} f=${4:-0}
    tier_times+=("$name $((SECONDS - tier_start))")
    tier_start=$SECONDS
    if ((rc != 0 && f == 0)); then f=1; fi
    passed=$((passed + p))
    failed=$((failed + f))
    if ((rc != 0 || f > 0)); then
        failed_tiers+=("$name")
        log "tier $name FAILED (exit $rc, $f failed)"
    fi
}
# counts PREFIX FILE: "N M" from FILE's last line when it is `PREFIXN passed, M failed`, else "0 0"
counts() {
    tail -n1 "$2" | awk -v prefix="$1" '
        index($0, prefix) == 1 {
            rest = substr($0, length(prefix) + 1)
            if (rest ~ /^[0-9]+ passed, [0-9]+ failed$/) { split(rest, w, " "); print w[1] + 0, w[3] + 0; found = 1 }
        }
        END { if (!found) print 0, 0 }'
}
# short_of_disk: less than 8 GB free where the builds go.
short_of_disk() { (($(df --output=avail -k "${CARGO_TARGET_DIR:-target}" | tail -n1) < 8 * 1024 * 1024)); }

log "installing test dependencies"
rc=0
scripts/install-test-deps.sh || rc=$?
# The 1.32 tier's binaries, the envtest way (KUBEBUILDER_ASSETS): given, or unpacked once from
# ../shared/kube-1.32 beside this checkout (checked against its SHA256SUMS) into the e2e cache.
if [[ -z ${KUBEBUILDER_ASSETS:-} && -x ../shared/kube-1.32/install.sh ]]; then
    assets=${PINHOOK_E2E_CACHE:-/var/cache/pinhook-e2e}/kube-1.32
    if ../shared/kube-1.32/install.sh "$assets" >/dev/null; then
        export KUBEBUILDER_ASSETS=$assets
    else
        log "../shared/kube-1.32/install.sh $assets failed"
        rc=1
    fi
fi
tier_done deps "$rc"

log "cargo fmt --check"
rc=0
cargo fmt --all -- --check || rc=$?
tier_done fmt "$rc"

log "cargo clippy"
rc=0
cargo clippy --all-targets --quiet -- -D warnings || rc=$?
tier_done clippy "$rc"

log "unit and integration tests"
rc=0
cargo test --no-fail-fast 2>&1 | tee "$out/cargo.log" || rc=$?
# Each binary's `test result: ok. 372 passed; 0 failed; ...` counts every test it ran; the
# harness's self-tests run in the integration binary, one `test harness_selftest::NAME ... ok`
# (or `... FAILED`) line each, and are taken out of that count.
read -r cargo_passed cargo_failed harness_passed harness_failed < <(awk '
    /^test harness_selftest::.* \.\.\. ok$/ { hp++ }
    /^test harness_selftest::.* \.\.\. FAILED$/ { hf++ }
    /^test result:/ { p += $4; f += $6 }
    END { print p - hp, f - hf, hp + 0, hf + 0 }' "$out/cargo.log")
tier_done cargo-test "$rc" "$cargo_passed" "$cargo_failed"
if [[ -d ${CARGO_TARGET_DIR:-target} ]] && short_of_disk; then
    # The integration test binary (tests/integration, about 110 MB) is not run again in this run.
    log "less than 8 GB free: removing the integration test binary"
    find "${CARGO_TARGET_DIR:-target}/debug/deps" -maxdepth 1 -type f -name 'integration-*' ! -name '*.*' -delete
fi

log "the Helm chart (scripts/chart-check.sh: lint, renders, schemas, the kustomize base)"
rc=0
scripts/chart-check.sh | tee "$out/chart.log" || rc=$?
# its last line: `chart: N passed, M failed`
read -r chart_passed chart_failed < <(counts 'chart: ' "$out/chart.log")
tier_done chart "$rc" "$chart_passed" "$chart_failed"

log "the local demo (scripts/demo.sh), as README's first command runs it"
rc=0
scripts/demo.sh || rc=$?
tier_done demo "$rc"

fuzz_seconds=${PINHOOK_FUZZ_SECONDS:-5}
if ((fuzz_seconds > 0)); then
    log "fuzzing, ${fuzz_seconds} s per target (scripts/fuzz.sh)"
    rc=0
    scripts/fuzz.sh "$fuzz_seconds" | tee "$out/fuzz.log" || rc=$?
    # its last line: `fuzz: N passed, M failed`
    read -r fuzz_passed fuzz_failed < <(counts 'fuzz: ' "$out/fuzz.log")
    tier_done fuzz "$rc" "$fuzz_passed" "$fuzz_failed"
    # The fuzz binaries (about 1 GB) are not needed again in this run; on a machine short of
    # disk (CI's), give the space to the end-to-end tier's kube build.
    if [[ -d ${CARGO_TARGET_DIR:-target} ]] && short_of_disk; then
        log "less than 8 GB free: removing fuzz/target"
        rm -rf fuzz/target
    fi
fi

log "pinhook's image (scripts/image.sh, offline; tests/image/check.sh)"
rc=0
# From the dev-profile binary the cargo tests built: the image's files, layout, reproducibility and
# push are the same for any binary, and a release build would be this run's longest step
# (docs/image.md gives its cost). `scripts/image.sh` without --binary builds the release image.
# The end-to-end tier's node-chart scenarios install an image of the same binary.
target_dir=${CARGO_TARGET_DIR:-target}
[[ $target_dir == /* ]] || target_dir=$PWD/$target_dir
export PINHOOK_IMAGE_BINARY=${PINHOOK_IMAGE_BINARY:-$target_dir/debug/pinhook}
tests/image/check.sh | tee "$out/image.log" || rc=$?
# its last line: `image: N passed, M failed`
read -r image_passed image_failed < <(counts 'image: ' "$out/image.log")
tier_done image "$rc" "$image_passed" "$image_failed"

log "the end-to-end tier's scenario list in tests/e2e/README.md (tests/e2e/readme.sh --check)"
rc=0
tests/e2e/readme.sh --check || rc=$?
tier_done e2e-readme "$rc"

if [[ "${PINHOOK_SKIP_E2E:-0}" != 1 ]]; then
    log "end-to-end tier"
    rc=0
    bash tests/e2e/run.sh | tee "$out/e2e.log" || rc=$?
    # its last line: `N passed, M failed`
    read -r e2e_passed e2e_failed < <(counts '' "$out/e2e.log")
    tier_done e2e "$rc" "$e2e_passed" "$e2e_failed"

    # The modern tier (issue 47): the scenarios whose header says `# kube: … 1.32`, on a 1.32
    # control plane whose binaries KUBEBUILDER_ASSETS names (as envtest takes them; set after the
    # deps tier from ../shared/kube-1.32 when not given), with the binaries the tier above built;
    # its availability scenarios with the 1.20 node joining it (tests/e2e/README.md).
    if [[ -x ${KUBEBUILDER_ASSETS:-}/kube-apiserver && -x ${KUBEBUILDER_ASSETS:-}/kube-controller-manager ]]; then
        log "end-to-end tier on Kubernetes 1.32 ($KUBEBUILDER_ASSETS)"
        rc=0
        E2E_KUBE=1.32 E2E_SKIP_BUILD=1 bash tests/e2e/run.sh | tee "$out/e2e-1.32.log" || rc=$?
        read -r e2e_passed e2e_failed < <(counts '' "$out/e2e-1.32.log")
        tier_done e2e-1.32 "$rc" "$e2e_passed" "$e2e_failed"
    else
        log "end-to-end tier on Kubernetes 1.32: skipped (KUBEBUILDER_ASSETS does not name a directory with kube-apiserver and kube-controller-manager; ../shared/kube-1.32/install.sh DIR unpacks them)"
    fi
fi

if ((${#failed_tiers[@]} == 0)); then log "all tests passed"; else log "failed tiers: ${failed_tiers[*]}"; fi
times_line=$(IFS=,; echo "${tier_times[*]}")
echo "tier seconds: ${times_line//,/, } (total $SECONDS)"
echo "harness self-tests: $harness_passed passed, $harness_failed failed"
echo "failed tiers: ${failed_tiers[*]:-none}"
echo "total: $passed passed, $failed failed"
((${#failed_tiers[@]} == 0)) || exit 1
