#!/usr/bin/env bash
# Coverage-guided fuzzing (cargo fuzz / libFuzzer) of every parser pinhook runs on outside input.
#
#   scripts/fuzz.sh [seconds-per-target] [target...]
#
# Installs cargo-fuzz if missing, builds every target in fuzz/ (its own cargo workspace), then
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
#
# The machine has only a stable toolchain: cargo fuzz passes nightly-only flags
# (-Zsanitizer, -Cllvm-args coverage options under -Z), so RUSTC_BOOTSTRAP=1 is set for it.
set -uo pipefail
cd "$(dirname "$0")/.."
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
if ! cargo fuzz --version >/dev/null 2>&1; then
    log "installing cargo-fuzz"
    cargo install cargo-fuzz --locked || {
        echo "fuzz: 0 passed, 1 failed"
        exit 1
    }
fi

mapfile -t all < <(cd fuzz && cargo fuzz list 2>/dev/null)
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
build_args=(--sanitizer "$sanitizer")
[[ -n "${PINHOOK_FUZZ_JOBS:-}" ]] && export CARGO_BUILD_JOBS=$PINHOOK_FUZZ_JOBS
log "building ${#targets[@]} fuzz targets (sanitizer: $sanitizer)"
build_start=$SECONDS
if ! (cd fuzz && nice -n 5 cargo fuzz build "${build_args[@]}" 2>&1 | tail -n 20); then
    echo "fuzz: build failed"
    echo "fuzz: 0 passed, ${#targets[@]} failed"
    exit 1
fi
log "built in $((SECONDS - build_start)) s"

bin_dir=$root/fuzz/target/x86_64-unknown-linux-gnu/release
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
