#!/usr/bin/env bash
# Coverage-guided fuzzing (cargo fuzz / libFuzzer) of every parser pinhook runs on outside input.
#
#   scripts/fuzz.sh [seconds-per-target] [target...]
#
# Builds every target in fuzz/ (its own cargo workspace; cargo-fuzz is installed only for a
# sanitizer or the release profile, see below), then
# runs each target for the given seconds (default 60), one after another, from a scratch corpus
# seeded with fuzz/seeds/<target>/ (the generated corpus goes to fuzz/corpus-generated/<target>/,
# which is git-ignored and kept between runs; fuzz/seeds/ is never written). Prints one line per
# target, `fuzz <target>: <execs> execs, <secs> s, ok|CRASH`, with the crashing input's path
# after a crash, and last `fuzz: N passed, M failed` (N = targets without a crash). Exits
# non-zero when any target crashed or the build failed.
#
# Environment:
#   PINHOOK_FUZZ_SANITIZER  none (default) or address. pinhook is #![forbid(unsafe_code)], so
#                           AddressSanitizer finds little a panic would not, at about half the
#                           speed; `address` works too (the stable toolchain ships its runtime).
#   PINHOOK_FUZZ_RSS_MB     RSS limit per target, MiB (default 1024).
#   PINHOOK_FUZZ_JOBS       cargo build jobs (default: cargo's).
#   PINHOOK_FUZZ_PROFILE    dev (default) or release. dev: `cargo fuzz build --dev` with
#                           fuzz/Cargo.toml's [profile.dev] (opt-level 1, debug assertions and
#                           overflow checks), about half the build of release, which cargo fuzz
#                           builds at opt-level 3 in one codegen unit per crate; the targets run
#                           about as fast (docs/testing.md). release for long campaigns.
#
# The machine has only a stable toolchain: cargo fuzz passes nightly-only flags
# (-Zsanitizer, -Cllvm-args coverage options under -Z), so RUSTC_BOOTSTRAP=1 is set for it.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD

secs=${1:-60}
shift $(($# > 0 ? 1 : 0))
if ! [[ "$secs" =~ ^[0-9]+$ ]] || ((secs < 1)); then
    echo "usage: scripts/fuzz.sh [seconds-per-target] [target...]" >&2
    exit 2
fi
sanitizer=${PINHOOK_FUZZ_SANITIZER:-none}
rss_mb=${PINHOOK_FUZZ_RSS_MB:-1024}
log() { printf '==> %s %s\n' "$(date -u +%H:%M:%S)" "$*"; }

# Longest input per target: a little above the largest seed of its kind (AdmissionReviews and
# manifests are a few KiB), far below anything that would make one run slow.
max_len_of() {
    case "$1" in
        admission_review | check_manifests | mirror_objects) echo 16384 ;;
        image_reference | keyring_match | apiserver_timeout | www_authenticate) echo 1024 ;;
        *) echo 8192 ;;
    esac
}

export PATH="$HOME/.cargo/bin:$PATH"
profile=${PINHOOK_FUZZ_PROFILE:-dev}
case $profile in
    dev) profile_dir=debug ;;
    release) profile_dir=release ;;
    *)
        echo "PINHOOK_FUZZ_PROFILE must be dev or release, not '$profile'" >&2
        echo "fuzz: 0 passed, 1 failed"
        exit 2
        ;;
esac
# The default build (no sanitizer, dev) is `cargo fuzz build --dev` done by cargo itself, with
# exactly the flags cargo-fuzz 0.13 passes for it (cargo finds its build fresh and the other
# way round): no cargo-fuzz to install, which costs a fresh machine about 4 minutes. A sanitizer
# or the release profile goes through cargo fuzz, installed when missing.
CARGO_FUZZ_DEV_RUSTFLAGS=" -Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing \
-Cllvm-args=-simplifycfg-branch-fold-threshold=0 -Cllvm-args=-sanitizer-coverage-stack-depth \
-Cdebug-assertions"
direct=0
[[ $sanitizer == none && $profile == dev && -z ${RUSTFLAGS:-} ]] && direct=1
if ((!direct)) && ! cargo fuzz --version >/dev/null 2>&1; then
    log "installing cargo-fuzz"
    cargo install cargo-fuzz --locked || {
        echo "fuzz: 0 passed, 1 failed"
        exit 1
    }
fi

# every [[bin]] of fuzz/Cargo.toml (what `cargo fuzz list` prints)
mapfile -t all < <(awk '/^\[\[bin\]\]/ { bin = 1; next } /^\[/ { bin = 0 }
    bin && $1 == "name" { gsub(/"/, "", $3); print $3 }' fuzz/Cargo.toml)
targets=("$@")
((${#targets[@]})) || targets=("${all[@]}")
if ((${#targets[@]} == 0)); then
    echo "fuzz: no targets found in fuzz/Cargo.toml" >&2
    echo "fuzz: 0 passed, 1 failed"
    exit 1
fi

export RUSTC_BOOTSTRAP=1
# The instrumented build has flags of its own: keep it apart from the main build, whatever
# CARGO_TARGET_DIR the caller set (the binaries are looked for there).
export CARGO_TARGET_DIR="$root/fuzz/target"
[[ -n "${PINHOOK_FUZZ_JOBS:-}" ]] && export CARGO_BUILD_JOBS=$PINHOOK_FUZZ_JOBS
log "building ${#targets[@]} fuzz targets (sanitizer: $sanitizer, profile: $profile)"
build_start=$SECONDS
if ((direct)); then
    build=(env "RUSTFLAGS=$CARGO_FUZZ_DEV_RUSTFLAGS" cargo build --manifest-path Cargo.toml
        --target x86_64-unknown-linux-gnu --bins)
else
    build=(cargo fuzz build --sanitizer "$sanitizer")
    [[ $profile == dev ]] && build+=(--dev)
fi
if ! (cd fuzz && nice -n 5 "${build[@]}" 2>&1 | tail -n 20); then
    echo "fuzz: build failed"
    echo "fuzz: 0 passed, ${#targets[@]} failed"
    exit 1
fi
log "built in $((SECONDS - build_start)) s"

bin_dir=$root/fuzz/target/x86_64-unknown-linux-gnu/$profile_dir
logs=$root/fuzz/corpus-generated/logs
mkdir -p "$logs"
passed=0
failed=0
for target in "${targets[@]}"; do
    bin=$bin_dir/$target
    corpus=$root/fuzz/corpus-generated/$target
    artifacts=$root/fuzz/artifacts/$target
    mkdir -p "$corpus" "$artifacts"
    if [[ -d fuzz/seeds/$target ]]; then
        cp -n fuzz/seeds/"$target"/* "$corpus"/ 2>/dev/null || true
    fi
    if [[ ! -x "$bin" ]]; then
        echo "fuzz $target: 0 execs, 0 s, CRASH (no binary at $bin)"
        failed=$((failed + 1))
        continue
    fi
    start=$SECONDS
    # -max_total_time bounds the run; `timeout` only guards against a wedged process.
    timeout -k 10 $((secs * 2 + 60)) "$bin" \
        -max_total_time="$secs" -rss_limit_mb="$rss_mb" -max_len="$(max_len_of "$target")" \
        -timeout=10 -print_final_stats=1 -artifact_prefix="$artifacts/" \
        "$corpus" >"$logs/$target.log" 2>&1
    status=$?
    elapsed=$((SECONDS - start))
    execs=$(awk '/^stat::number_of_executed_units:/ { n = $2 } END { print n + 0 }' "$logs/$target.log")
    rate=$(awk '/^stat::average_exec_per_sec:/ { n = $2 } END { print n + 0 }' "$logs/$target.log")
    if ((status == 0)); then
        echo "fuzz $target: $execs execs, $elapsed s, ok"
        echo "    $rate execs/s, corpus $(find "$corpus" -type f | wc -l) inputs"
        passed=$((passed + 1))
    else
        # A crash is reported before the final stats; count what libFuzzer printed last.
        if ((execs == 0)); then
            execs=$(grep -oE '^#[0-9]+' "$logs/$target.log" | tail -n 1 | tr -d '#')
            execs=${execs:-0}
        fi
        echo "fuzz $target: $execs execs, $elapsed s, CRASH (exit $status)"
        input=$(grep -oE '(Test unit written to|written to) [^ ]+' "$logs/$target.log" | tail -n 1 | awk '{ print $NF }')
        echo "    crashing input: ${input:-none written (see $logs/$target.log)}"
        grep -m 3 -E "panicked at|ERROR: libFuzzer|==ERROR|SUMMARY" "$logs/$target.log" | sed 's/^/    /'
        echo "    log: $logs/$target.log"
        failed=$((failed + 1))
    fi
done
echo "fuzz: $passed passed, $failed failed"
((failed == 0))
