#!/bin/bash
# Everything of the GPU issue that needs a GPU, in one run of under ten minutes on an H100:
# the CUDA tests of the new parts, the gpu-core suite (templates only: matmul, conv, dense + GELU
# and softmax against torch and Triton), the reductions probe (layer_norm and row sums too) and
# tlm-eval on the GPU (the GPU model against evolutionary search, one run per workload so that a
# timeout loses one). Results go to $OUT (default /tmp/gpu-session). The GEMM probe, which also
# times other tile settings, is left out for time: python3 experiments/gpu_gemm_probe.py.
#
#     bash experiments/gpu_session.sh [EVAL_WORKLOADS]     # default: dense-bert-ffn,conv-resnet
#
# SKIP_TESTS=1 leaves the tests out; REDUCTIONS=1 adds the reductions probe.
#
# On a GPU machine without network, with the machine's own torch and CuPy: put the lark wheel
# in .whl/ first (pip download lark); it is installed to /tmp/site, minitc with --no-deps.
set -u
OUT=${OUT:-/tmp/gpu-session}
mkdir -p "$OUT/r"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v WARNING
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
step() {  # step SECONDS NAME COMMAND...: run with a time limit, log to $OUT/r/NAME.log
    local limit=$1 name=$2
    shift 2
    local start=$SECONDS
    timeout "$limit" "$@" >"$OUT/r/$name.log" 2>&1
    echo "== $name: exit $? in $((SECONDS - start)) s"
}
[ -z "${SKIP_TESTS:-}" ] && step 60 tests python3 -m pytest -q -m cuda tests/test_gpu_reductions.py tests/test_gpu_gemm.py tests/test_cuda_runtime.py
step 110 gpu-core python3 -m minitc.benchmarks --suite gpu-core --json "$OUT/r/gpu-core.json"
[ -n "${REDUCTIONS:-}" ] && step 40 reductions python3 experiments/gpu_reductions_probe.py
IFS=, read -ra EVAL <<<"${1:-dense-bert-ffn,conv-resnet}"
for w in "${EVAL[@]}"; do
    step 150 "tlm-eval-$w" python3 -m minitc.benchmarks --suite tlm-eval --target cuda --workloads "$w" \
        --tlm-k 1,16 --evo-trials 64,256 --json "$OUT/r/tlm-eval-gpu-$w.json"
done
tar czf "$OUT/results.tgz" -C "$OUT" r
for f in "$OUT"/r/*.log; do echo "---- $(basename "$f")"; tail -n 14 "$f"; done
