#!/bin/bash
# run_with_retries.sh: the field guide's job wrapper made real (guide sec. 2.5, claim C15).
#
#   slurm/run_with_retries.sh [--tries 3] [--delay 2] [--data DIR]... [--checkpoints DIR]...
#                             [--verify sha256|size] [--log FILE] -- srun [SRUN ARGS...] COMMAND...
#
# Runs the command after `--` (normally srun) up to --tries times, stopping at the first
# success: the guide's `retry=0; while retry < 3: srun ...`, so 3 by default. Between a
# failed try and the next it runs the repair step, `python -m hpcbench repair`:
#   * each --data folder: every shard is checked against its manifest.json and a bad one is
#     copied back from the manifest's source copy (hpcbench/data/resilience.py);
#   * each --checkpoints root: torn checkpoints (a save killed half-way, no valid manifest)
#     are removed, so a training that resumes from its newest valid checkpoint never
#     loads half a file.
# then waits --delay seconds (default 2) and tries again. Nothing is repaired without
# --data/--checkpoints. A failed repair is logged and the next try runs anyway: it is
# the try, not the repair, that says whether the job can run.
#
# Every attempt is logged, to stderr and appended to the log file (default
# run_with_retries-<job id or pid>.log in the working directory), one line each:
#   run_with_retries: attempt=2/3 start=2026-11-29T10:15:00.123Z end=2026-11-29T10:15:41.456Z
#     seconds=41.333 rc=0 nodes=n[1-2] job=17 host=n1
# (one line in the file; `nodes` is the allocation's SLURM_JOB_NODELIST, or `-` when srun makes
# its own allocation). After a failed srun, the nodes' states from sinfo are logged too.
#
# The command sees HPCBENCH_ATTEMPT (1, 2, ...) and HPCBENCH_MAX_TRIES in its environment.
# The repair step runs $HPCBENCH_PYTHON, else the venv next to this script (../.venv), else python3.
#
# Exit status: the last try's (0 as soon as one succeeds). SIGTERM/SIGINT (scancel, Ctrl-C) are
# passed on to the running try and end the loop without another try: exit 128 + signal.
#
# In a job script (sbatch -N2 ...), e.g.:
#   slurm/run_with_retries.sh --data "$DATA" --checkpoints "$CKPT" -- \
#       srun --kill-on-bad-exit=1 python -m torch.distributed.run ... train.py --resume
set -euo pipefail

usage() {
    sed -n '4,5p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

tries=3
delay=2
verify=sha256
log_file=""
repair_args=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --tries) tries="${2:?--tries needs a number}"; shift 2 ;;
        --delay) delay="${2:?--delay needs seconds}"; shift 2 ;;
        --data) repair_args+=(--data "${2:?--data needs a folder}"); shift 2 ;;
        --checkpoints) repair_args+=(--checkpoints "${2:?--checkpoints needs a folder}"); shift 2 ;;
        --verify) verify="${2:?--verify needs sha256 or size}"; shift 2 ;;
        --log) log_file="${2:?--log needs a file}"; shift 2 ;;
        --) shift; break ;;
        -h|--help) usage ;;
        *) echo "run_with_retries: unknown option $1 (the command goes after --)" >&2; usage ;;
    esac
done
[[ $# -gt 0 ]] || { echo "run_with_retries: no command after --" >&2; usage; }
[[ "$tries" =~ ^[1-9][0-9]*$ ]] || { echo "run_with_retries: --tries $tries: a whole number >= 1" >&2; exit 2; }
[[ "$delay" =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "run_with_retries: --delay $delay: seconds >= 0" >&2; exit 2; }
[[ "$verify" == sha256 || "$verify" == size ]] || { echo "run_with_retries: --verify sha256 or size" >&2; exit 2; }
log_file="${log_file:-run_with_retries-${SLURM_JOB_ID:-$$}.log}"
# Checked now: under set -e a log that cannot be written would end the loop at its first line.
if ! : >>"$log_file"; then echo "run_with_retries: cannot write the log $log_file" >&2; exit 2; fi

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${HPCBENCH_PYTHON:-}"
if [[ -z "$python" ]]; then
    if [[ -x "$here/../.venv/bin/python" ]]; then python="$here/../.venv/bin/python"; else python=python3; fi
fi

say() {  # one line to stderr and to the log file
    echo "run_with_retries: $*" >&2
    echo "run_with_retries: $*" >>"$log_file"
}

stamp() {  # UTC time with milliseconds, without forking date(1)
    local now="$EPOCHREALTIME" secs frac
    frac="${now#*[.,]}"
    TZ=UTC printf -v secs '%(%Y-%m-%dT%H:%M:%S)T' "${now%[.,]*}"
    printf '%s.%sZ' "$secs" "${frac:0:3}"
}

micros() { local now="$EPOCHREALTIME"; echo "${now%[.,]*}${now#*[.,]}"; }

child=""
stop_signal=""
# shellcheck disable=SC2317  # called from the traps below
forward() {  # pass SIGTERM/SIGINT to the running try; no further try after it
    stop_signal="$1"
    if [[ -n "$child" ]]; then kill "-$1" "$child" 2>/dev/null || true; fi
}
trap 'forward TERM' TERM
trap 'forward INT' INT

export HPCBENCH_MAX_TRIES="$tries"
rc=0
for ((attempt = 1; attempt <= tries; attempt++)); do
    export HPCBENCH_ATTEMPT="$attempt"
    start="$(stamp)"
    t0="$(micros)"
    # In the background so that a trapped signal is handled while the try runs.
    "$@" &
    child=$!
    rc=0
    wait "$child" || rc=$?
    while kill -0 "$child" 2>/dev/null; do  # wait returned early for a trapped signal
        rc=0
        wait "$child" || rc=$?
    done
    child=""
    t1="$(micros)"
    elapsed=$((t1 - t0))
    printf -v seconds '%d.%03d' $((elapsed / 1000000)) $(((elapsed % 1000000) / 1000))
    say "attempt=$attempt/$tries start=$start end=$(stamp) seconds=$seconds rc=$rc" \
        "nodes=${SLURM_JOB_NODELIST:--} job=${SLURM_JOB_ID:--} host=$(hostname -s 2>/dev/null || echo -)"
    if [[ -n "$stop_signal" ]]; then
        say "stopped by SIG$stop_signal after attempt $attempt; no further try"
        [[ "$stop_signal" == TERM ]] && exit 143
        exit 130
    fi
    if [[ $rc -eq 0 ]]; then
        [[ $attempt -gt 1 ]] && say "succeeded at attempt $attempt of $tries"
        exit 0
    fi
    if [[ $attempt -eq $tries ]]; then
        break
    fi
    # Node states say why srun failed (a node down, draining); only asked when SLURM is involved.
    if [[ ( "$(basename "$1")" == srun || -n "${SLURM_JOB_ID:-}" ) ]] && command -v sinfo >/dev/null 2>&1; then
        states="$(timeout 5 sinfo -h -N -o '%N=%t' 2>/dev/null | sort -u | tr '\n' ' ' || true)"
        say "after attempt $attempt: node states ${states:-unknown (sinfo did not answer)}"
    fi
    if [[ ${#repair_args[@]} -gt 0 ]]; then
        repair_rc=0
        repair_out="$("$python" -m hpcbench repair --verify "$verify" "${repair_args[@]}" 2>&1)" \
            || repair_rc=$?
        while IFS= read -r line; do say "$line"; done <<<"$repair_out"
        if [[ $repair_rc -ne 0 ]]; then
            say "repair step exited $repair_rc; trying again anyway"
        fi
    fi
    sleep "$delay"
done
say "giving up: $tries attempt(s) failed, the last with exit status $rc"
exit "$rc"
