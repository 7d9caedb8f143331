#!/usr/bin/env bash
# The container layout of docker-compose.yml on one machine, for `scjepa bench serve`:
# the service, redis-server and the load generator (with its prober) each in a CPU
# cgroup of its own (equal shares, as containers get), optionally with a 2-process CPU
# hog in a fourth group (another tenant of the host). Runs nice 0 and nice 10 of the
# inference thread, REPS times each, and writes one JSON per run.
#
#   sudo docs/notebook/bench/cgroups.sh ARTIFACT OUTDIR [REPS]      # cgroup v1 cpu controller
#
# Needs root and a cgroup v1 `cpu` hierarchy at /sys/fs/cgroup/cpu (what the machine of
# docs/notebook/benchmarks.md has); on cgroup v2 set CG=/sys/fs/cgroup and enable +cpu in
# cgroup.subtree_control first. Run inside the repository's virtual environment.
set -euo pipefail
ARTIFACT=${1:?artifact directory}
OUT=${2:?output directory}
REPS=${3:-2}
CG=${CG:-/sys/fs/cgroup/cpu}
mkdir -p "$OUT"
for g in svc redis client foreign; do mkdir -p "$CG/scjepa-$g"; done

# move uvicorn and redis-server into their groups as soon as the benchmark starts them
# (writing a pid to cgroup.procs moves all of its threads)
watch() {
  while true; do
    for p in $(pgrep -f 'uvicorn service.main' || true); do
      echo "$p" >"$CG/scjepa-svc/cgroup.procs" 2>/dev/null || true
    done
    for p in $(pgrep -x redis-server || true); do
      echo "$p" >"$CG/scjepa-redis/cgroup.procs" 2>/dev/null || true
    done
    sleep 0.05
  done
}
watch &
WATCH=$!
HOG=""
cleanup() {
  kill "$WATCH" 2>/dev/null || true
  [ -n "$HOG" ] && kill -- "-$HOG" 2>/dev/null || true
}
trap cleanup EXIT

for rep in $(seq 1 "$REPS"); do
  for cond in quiet hog; do
    for nice in 0 10; do
      HOG=""
      if [ "$cond" = hog ]; then
        setsid bash -c "echo \$\$ >$CG/scjepa-foreign/cgroup.procs;
          for i in 1 2; do (while :; do :; done) & done; wait" &
        HOG=$!
        sleep 1
      fi
      echo "== $cond nice $nice rep $rep, load $(cut -d' ' -f1-3 /proc/loadavg)"
      (
        echo "$BASHPID" >"$CG/scjepa-client/cgroup.procs"
        exec scjepa bench serve --artifact "$ARTIFACT" --threads 1 --risk-seconds 20 \
          --service-env "SCJEPA_INFER_NICE=$nice" \
          --json "$OUT/serve-cg-$cond-nice$nice-$rep.json"
      )
      if [ -n "$HOG" ]; then
        kill -- "-$HOG" 2>/dev/null || true
        wait "$HOG" 2>/dev/null || true
      fi
    done
  done
done
