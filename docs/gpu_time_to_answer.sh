#!/usr/bin/env bash
# Issue 25 on a GPU: the stopping rule, one probe per run, and a cold vs warm compile cache, side by side.
#
#   docs/gpu_time_to_answer.sh OUT [DEVICES]     DEVICES: gpu:1 (default) on a GPU machine, cpu to rehearse
#
# Every step writes its results under a work folder; after each step the folder is packed into
# OUT/results.tgz and one line (rc, wall seconds) goes to OUT/steps.txt, so a step killed by a
# time limit keeps what came before. Environment: PY (python, default python3), STD (the profile
# of the standard-size step: standard; smoke to rehearse on a small CPU), ACCELBENCH_CACHE_DIR
# (the compile cache's root; default a fresh folder under /tmp), STEPS (the steps to run, default
# all: smoke-cold smoke-warm std-cold std-warm check), LIMIT_PCT (each step's time limit in % of its own).
set -u
OUT=${1:?usage: $0 OUT [DEVICES]}
DEV=${2:-gpu:1}
PY=${PY:-python3}
STD=${STD:-standard}
STEPS=" ${STEPS:-smoke-cold smoke-warm std-cold std-warm check} "
W=$(mktemp -d /tmp/accelbench-gpu2-XXXX)
export ACCELBENCH_CACHE_DIR=${ACCELBENCH_CACHE_DIR:-$W/cache}
export KERAS_BACKEND=jax PYTHONUNBUFFERED=1
mkdir -p "$OUT"

pack() { tar -czf "$OUT/results.tgz" -C "$W" --exclude cache . ; }
step() {  # step NAME LIMIT_S ARGS...: one accelbench command, its log, its rc and wall time
    local name=$1 limit=$2 t0 rc
    shift 2
    [[ $STEPS == *" $name "* ]] || return 0
    limit=$((limit * ${LIMIT_PCT:-100} / 100))  # LIMIT_PCT: every step's limit scaled (a short device call)
    t0=$(date +%s%N)
    timeout "$limit" "$PY" -m bench "$@" >"$W/$name.log" 2>&1
    rc=$?
    echo "$name rc=$rc wall_ms=$((($(date +%s%N) - t0) / 1000000))" | tee -a "$OUT/steps.txt"
    pack
}

{ nvidia-smi -L 2>&1 | head -2; "$PY" -c 'import jax, keras; print("jax", jax.__version__, "keras", keras.__version__, jax.devices())'; } >>"$OUT/steps.txt" 2>&1
SMOKE=(run --profile smoke --devices "$DEV" --backend jax --workloads mlp,cnn --modes train,infer
       --precisions fp32,mixed_bfloat16 --no-report)
# 1-2: the smoke matrix with an empty cache, then again with it warm (step times side by side)
step smoke-cold 160 "${SMOKE[@]}" --results-dir "$W/smoke-cold"
step smoke-warm 110 "${SMOKE[@]}" --results-dir "$W/smoke-warm"
# 3-4: a standard-size ResNet-50 bf16 training case, cold then warm: the share of its wall time in rounds
BIG=(run --profile "$STD" --devices "$DEV" --backend jax --workloads cnn --modes train --precisions mixed_bfloat16 --no-report)
step std-cold 120 "${BIG[@]}" --results-dir "$W/std-cold"
step std-warm 90 "${BIG[@]}" --results-dir "$W/std-warm"
# 5: the one-GPU check, on the cache the steps above warmed
step check 90 devices --check --json
echo "done" >>"$OUT/steps.txt"
