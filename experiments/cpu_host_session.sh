#!/bin/bash
# Issue 41's measurements on a second CPU (the GPU machine's Intel Emerald Rapids host), on 2
# pinned cores:
#
#     bash experiments/cpu_host_session.sh [STEPS]     # default: all of them, in this order
#
# The steps' limits add up to about 14 minutes, over one device call's 10: run them in two calls,
# `describe,cpu-core,cpu-core-avx2,gemm-sweep,conv-masked` then `models,lm-measure`.
#
# Steps (comma-separated):
#   describe    python -m minitc.target (the measured description) and --record: the host's
#               facts and calibration, a fixture for tests/fixtures/hosts
#   cpu-core    the cpu-core suite at 2 threads, native target
#   cpu-core-avx2  the same with AVX2 code ("llvm -mcpu=x86-64-v3")
#   models      the models suite at 2 threads, templates only (ResNet-50, MobileNet-V2, BERT-base,
#               GPT-2 against eager, Inductor and ONNX Runtime where installed)
#   gemm-sweep  one parameter at a time around the GEMM template's analytical point on
#               matmul-1024, dense-bert-ffn and bmm-bert (experiments/gemm_sweep.py): where the
#               model and the measurement disagree on this CPU
#   conv-masked  the direct convolution's 14- and 7-lane rows as one masked load against the
#               power-of-two pieces, A/B in one process (experiments/conv_masked_loads.py); llvm-mca
#               predicted 71% -> 92% of the FMA peak for ResNet's 3x3 at 56x56 on an Intel server
#   lm-measure  measurements for lm/data (minitc lm measure, LM_PER_WORKLOAD programs a workload),
#               as a new shard in $OUT/lm-data
# Results: each step writes $OUT/NAME.log (and its JSON); $OUT/summary.log has each step's last
# lines, so a run cut short keeps what it finished. CPUS (default 0,1) pins the cores.
set -u
OUT=${OUT:-/tmp/cpu-session}
CPUS=${CPUS:-0,1}
STEPS=",${1:-describe,cpu-core,cpu-core-avx2,models,gemm-sweep,conv-masked,lm-measure},"
mkdir -p "$OUT"
: >"$OUT/summary.log"
export PYTHONUNBUFFERED=1 XDG_CACHE_HOME=$OUT/cache
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | grep -v WARNING
lscpu | grep -E "Model name|Flags" | cut -c1-200 >>"$OUT/summary.log"
want() { [[ $STEPS == *",$1,"* ]]; }
step() {  # step SECONDS NAME COMMAND...: run pinned with a time limit, log to $OUT/NAME.log
    local limit=$1 name=$2
    shift 2
    local start=$SECONDS
    timeout "$limit" taskset -c "$CPUS" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "== $name: exit $rc in $((SECONDS - start)) s"
    { echo "---- $name: exit $rc in $((SECONDS - start)) s"; tail -n 30 "$OUT/$name.log"; } >>"$OUT/summary.log"
}
B="python3 -m minitc.benchmarks --threads 2 --wait-quiet 5"
want describe && step 60 describe bash -c "python3 -m minitc.target && python3 -m minitc.target --record $OUT/host.json"
want cpu-core && step 90 cpu-core $B --suite cpu-core --json "$OUT/cpu-core-native.json"
want cpu-core-avx2 && step 90 cpu-core-avx2 $B --suite cpu-core --target "llvm -mcpu=x86-64-v3" --json "$OUT/cpu-core-avx2.json"
want models && step 300 models $B --suite models --json "$OUT/models.json"
want gemm-sweep && step 150 gemm-sweep python3 experiments/gemm_sweep.py --json "$OUT/gemm-sweep.json"
want conv-masked && step 60 conv-masked python3 experiments/conv_masked_loads.py --json "$OUT/conv-masked.json"
want lm-measure && step 120 lm-measure python3 -m minitc lm measure --target "llvm -num-cores=2" \
    --per-workload "${LM_PER_WORKLOAD:-4}" --db "$OUT/lm.db" --dataset "$OUT/lm-data"
echo "results in $OUT"
