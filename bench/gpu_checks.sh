#!/usr/bin/env bash
# Where raysim's processes land on a GPU, for a GPU machine (about 8 minutes on one H100). raysim must be importable
# there: on a GPU machine without network, install the GPU toolkit's bundle first, `bash .gpu/install.sh`, which puts
# it in /tmp/site (this script sources /tmp/site/env.sh when it exists). `.gpu/` is not part of the repository: on a
# CPU machine, `bash ../shared/gpu/pack.sh` from the checkout's root writes it (git ignores it; carry it to the GPU
# machine with the checkout; ../shared/gpu/README.md).
#   features  sgpt, one worker holding the GPU: the driver ("python ... raysim") never appears on the GPU; the
#             worker (ray::ClientWorker) appears once, running the cached-feature pass (ClientWorker.model_setup)
#             before round 1, and no other raysim process
#   cpu       fedvpt, 2 workers and no GPU reserved: no raysim process appears on the GPU (Ray 2.60 hides GPUs
#             from zero-GPU workers only with RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1, which raysim sets)
#   quarter   sgpt, 4 workers x 0.25 GPU: the first worker's feature pass in its fractional bundle
#   cohorts   bench/cohort.py on the GPU: cohorts of 10 against one client at a time
# Each run's log and its GPU processes, sampled every 0.5 s (t_s,pid,used_mib,command), go to $OUT; the summary
# lists the processes seen on the GPU per run.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/gpu-checks}
mkdir -p "$OUT"
[ -f /tmp/site/env.sh ] && source /tmp/site/env.sh
export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1

sample() {  # CSV: the GPU's processes every 0.5 s until killed
  local start=$SECONDS
  echo "t_s,pid,used_mib,command" > "$1"
  while true; do
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
      while IFS=', ' read -r pid used; do
        [ -n "$pid" ] && echo "$((SECONDS - start)),$pid,$used,$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-90)"
      done >> "$1"
    sleep 0.5
  done
}

check() {  # NAME COMMAND...: run it while sampling, then list who was on the GPU
  local name=$1; shift
  sample "$OUT/$name-gpu.csv" & local sampler=$!
  timeout -k 10 240 "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
  echo "== $name: exit $rc: $*"
  tail -n +2 "$OUT/$name-gpu.csv" | awk -F, '{if (!($2 in seen)) first[$2] = $1; seen[$2] = $4; last[$2] = $1;
    if ($3 + 0 > peak[$2] + 0) peak[$2] = $3}
    END {for (p in seen) printf "   pid %s: %s MiB peak, seen %s-%s s: %s\n", p, peak[p], first[p], last[p], seen[p]}'
}

RUN=(raysim run --clients 100 --rounds 3 --tracking-uri "sqlite:///$OUT/mlflow.db" --no-progress)
check features "${RUN[@]:0:2}" sgpt "${RUN[@]:2}" --gpus-per-client 1 --workers 1
check cpu "${RUN[@]:0:2}" fedvpt "${RUN[@]:2}" --workers 2 --cpus-per-client 1
check quarter "${RUN[@]:0:2}" sgpt "${RUN[@]:2}" --gpus-per-client 0.25 --workers 4
check cohorts python3 bench/cohort.py --settings off,on:10 --raysim-args "--gpus-per-client 0.25 --workers 4"
tail -n 8 "$OUT/cohorts.log"
