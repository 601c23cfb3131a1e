#!/usr/bin/env bash
# Every GPU measurement the open issues ask for, in one run that fits a short device lease
# (about 6 minutes on one H100/H200-class GPU; each step has its own time limit so one that
# hangs cannot eat the others):
#
#   1. kernel constants: the GEMM shape grid (BF16, FP8), causal attention (forward +
#      backward, forward), the HBM copy and the host's eager-operation time, fitted into a
#      calibration (issue 15, item 6: `parastrat bench --kernels --grid`);
#   2. the measured host time per eager operation (a bare `torch.nn.Linear` forward, the same
#      quantity as the model's 13.5 us x86 figure from TE issue #2053) applied to both accuracy
#      tables: the lead on the MoE misses that no published figure could settle;
#   3. activation-memory peaks of Megatron Core's GPTModel against the memory model;
#   4. collectives on this machine's GPUs (one GPU: launch latency and copy bandwidth; more:
#      NVLink).
#
#   ACCEL=h200 OUT=/tmp/gpu bash benchmarks/gpu_session.sh
#
# ACCEL is the accelerator preset whose peaks the rates are divided by (it must be the device
# that runs them: `bench --kernels` refuses a CPU or another kind).  Everything lands in OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
ACCEL=${ACCEL:-h200}
OUT=${OUT:-benchmarks/results/gpu_${ACCEL}}
mkdir -p "$OUT"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" MPLBACKEND=Agg

step() { printf '\n=== %s ===\n' "$*" | tee -a "$OUT/session.log"; }
run() {  # run LIMIT_S CMD...: the command's output into the log, its status noted
    local limit=$1
    shift
    timeout "$limit" "$@" >>"$OUT/session.log" 2>&1
    echo "exit $? after at most ${limit}s: $*" | tee -a "$OUT/session.log"
}

step "device"
run 30 nvidia-smi
run 60 python -c "import torch, parastrat; print(torch.__version__, torch.cuda.get_device_name(0), parastrat.__version__)"

step "1. kernel constants (GEMM grid, attention, copy, host op)"
run 240 python -m parastrat bench --kernels --grid --accelerator "$ACCEL" \
    --precisions bf16,fp8 --fit "$OUT/calibration.json" --format json

step "2. the accuracy tables with this host's measured time per eager operation"
HOST_US=$(python -c "import json,sys; print(round(json.load(open(sys.argv[1]))['kernels']['host_op_s'] * 1e6, 1))" "$OUT/calibration.json" 2>/dev/null)
if [ -n "$HOST_US" ]; then
    CPU=$(python -c "import platform; print('grace' if platform.machine() == 'aarch64' else 'x86')")
    echo "host op: $HOST_US us on $CPU" | tee -a "$OUT/session.log"
    run 120 python benchmarks/planner_accuracy.py --short --host-op-us "$CPU=$HOST_US"
    run 60 python benchmarks/planner_crosscheck.py --no-plans --host-op-us "$CPU=$HOST_US"
else
    echo "no host_op_s measured (step 1 failed): step 2 skipped" | tee -a "$OUT/session.log"
fi

step "3. activation-memory peaks against the memory model"
run 120 python benchmarks/measure_memory_gpu.py --short --out "$OUT/memory.json"

step "4. collectives on this machine's GPUs"
NGPU=$(python -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 1)
run 120 torchrun --nproc-per-node "$NGPU" -m parastrat bench \
    --ops all_reduce,all_gather,all_to_all,broadcast --sizes 1KB:256MB:x4 \
    --output "$OUT/collectives.json"

step "done: $OUT"
ls -l "$OUT" | tee -a "$OUT/session.log"
