#!/bin/bash
# Everything of the GPU issue that needs a GPU, in one run of under ten minutes on an H100.
#
#     bash experiments/gpu_session.sh [STEPS]     # default: all of them, in this order
#
# The steps' time limits add up to about 15 minutes, over one device call's 10: run them in two
# calls, e.g. `tests,gemm-probe,conv-probe,gpu-core,profile` (at most 8 minutes, usually 4),
# then `collect,reductions,tlm-eval`.
#
# Steps (comma-separated):
#   tests       the CUDA tests of the GPU parts (marked cuda, and nvcc/ptxas checks; TESTS
#               names other test files)
#   gemm-probe  the GEMM template's defaults and matmul tile variants against cuBLAS, each with
#               its k-step unrolled, kept a loop, and without double buffering
#               (experiments/gpu_gemm_probe.py)
#   conv-probe  the conv2d template on five ResNet layers: defaults and sampled parameters
#               against cuDNN (experiments/gpu_conv_probe.py)
#   winograd-probe  the Winograd convolution (tc.ops.conv2d_winograd) on the 3x3 stride-1
#               layers: the direct default, Winograd's default and draws, against cuDNN
#   models      whole models on the GPU (issue 42): tc.compile(target="cuda") against eager and
#               Inductor, float32 without TF32, batch MODELS_BATCH (1,8) of MODELS (the suite's
#               four); outputs checked against eager first. Not in the default list: name it
#               (it needs most of one device call)
#   gpu-core    the gpu-core suite, templates only: matmul, conv (direct and Winograd), dense +
#               GELU, softmax against torch and Triton (GPU_CORE_ARGS adds options, e.g.
#               "--workloads conv-resnet50-l3-winograd --tune 64")
#   profile     Nsight Compute on the gpu-core kernels (PROFILE_WORKLOADS: some of them): speed of light, occupancy, launch, memory
#               workload (shared-memory bank conflicts, L1 and L2 traffic)
#   collect     GPU measurements for the dataset (experiments/gpu_collect.py; COLLECT_S seconds)
#   reductions  the reductions probe (layer_norm and row sums too)
#   tlm-eval    the GPU language model (EVAL_LM, default the shipped one) against evolutionary
#               search on EVAL_WORKLOADS (default dense-bert-ffn), one run per workload so that
#               a timeout loses one
#   tlm-compare the model COMPARE_LM on the same workloads against tlm-eval's evolutionary
#               winners (--evo-from), timed side by side with them
# Results: each step writes r/NAME.log (and its JSON or database) under /tmp/gpu-session; after
# every step they are packed again into $OUT/results.tgz and the step's last lines appended to
# $OUT/summary.log, so that a run cut short keeps what it finished, in two files (the device
# tool returns at most 8).
#
# On a GPU machine without network, with the machine's own torch and CuPy: put the lark wheel
# in .whl/ first (pip download lark); it is installed to /tmp/site, minitc with --no-deps.
set -u
OUT=${OUT:-/tmp/gpu-session}
R=/tmp/gpu-session/r
STEPS=",${1:-tests,gemm-probe,conv-probe,winograd-probe,gpu-core,profile,collect,reductions,tlm-eval},"
mkdir -p "$R" "$OUT"
: >"$OUT/summary.log"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v WARNING
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
want() { [[ $STEPS == *",$1,"* ]]; }
step() {  # step SECONDS NAME COMMAND...: run with a time limit, log to $R/NAME.log, pack $R
    local limit=$1 name=$2
    shift 2
    local start=$SECONDS
    timeout "$limit" "$@" >"$R/$name.log" 2>&1
    local rc=$?
    echo "== $name: exit $rc in $((SECONDS - start)) s"
    { echo "---- $name: exit $rc in $((SECONDS - start)) s"; tail -n 40 "$R/$name.log"; } >>"$OUT/summary.log"
    tar czf "$OUT/results.tgz" -C "$(dirname "$R")" r
}
TESTS=${TESTS:-tests/gpu/test_gpu_reductions.py tests/gpu/test_gpu_gemm.py tests/gpu/test_cuda_runtime.py tests/gpu/test_gpu_conv.py \
    tests/gpu/test_gpu_winograd.py tests/gpu/test_gpu_lowering.py tests/gpu/test_gpu_runner.py}
# shellcheck disable=SC2086  # TESTS is a list of files
want tests && step 90 tests python3 -m pytest -q -m cuda $TESTS
want gemm-probe && step 90 gemm-probe python3 experiments/gpu_gemm_probe.py
want conv-probe && step 120 conv-probe python3 experiments/gpu_conv_probe.py --seconds "${CONV_S:-12}" \
    --json "$R/conv-probe.json"
want winograd-probe && step 100 winograd-probe python3 experiments/gpu_conv_probe.py --winograd \
    --seconds "${WINOGRAD_S:-12}" --json "$R/winograd-probe.json"
# shellcheck disable=SC2086  # GPU_CORE_ARGS: more options (--workloads W --tune N)
want models && MINITC_MODELS_SYSTEMS=${MODELS_SYSTEMS:-minitc,eager,inductor} step 420 models python3 -m \
    minitc.benchmarks --suite models --target cuda --batch "${MODELS_BATCH:-1,8}" --threads 16 --no-machine \
    --workloads "${MODELS:-resnet50,mobilenet_v2,bert-base,gpt2}" --json "$R/models-gpu.json"
want gpu-core && step 140 gpu-core python3 -m minitc.benchmarks --suite gpu-core --json "$R/gpu-core.json" ${GPU_CORE_ARGS:-}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
want profile && [ -n "$NCU" ] && step 90 profile "$NCU" --clock-control none --section SpeedOfLight \
    --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis_Tables \
    python3 experiments/gpu_profile.py ${PROFILE_WORKLOADS:-}
want collect && step $((${COLLECT_S:-110} + 30)) collect python3 experiments/gpu_collect.py --db "$R/gpu.db" \
    --seconds "${COLLECT_S:-110}"
want reductions && step 40 reductions python3 experiments/gpu_reductions_probe.py
IFS=, read -ra EVAL <<<"${EVAL_WORKLOADS:-dense-bert-ffn}"
for w in "${EVAL[@]}"; do
    want tlm-eval && step 200 "tlm-eval-$w" python3 -m minitc.benchmarks --suite tlm-eval --target cuda \
        --workloads "$w" --tlm-k 1,16 --evo-trials 64,256 ${EVAL_LM:+--lm "$EVAL_LM"} \
        --json "$R/tlm-eval-gpu-$w.json"
    want tlm-compare && [ -f "$R/tlm-eval-gpu-$w.json" ] && step 90 "tlm-compare-$w" python3 -m \
        minitc.benchmarks --suite tlm-eval --target cuda --workloads "$w" --tlm-k 1,16 --evo-trials 64,256 \
        ${COMPARE_LM:+--lm "$COMPARE_LM"} --evo-from "$R/tlm-eval-gpu-$w.json" \
        --json "$R/tlm-compare-gpu-$w.json"
done
cat "$OUT/summary.log"
