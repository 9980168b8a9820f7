"""The benchmark runner: `python -m minitc.benchmarks` (also `minitc bench`).

    python -m minitc.benchmarks --suite cpu-core [--threads 1,2] [--repeats N] [--budget S]
                         [--workloads matmul-512,...] [--target "llvm -mcpu=znver2"]
                         [--json out.json] [--plot out.png] [--wait-quiet S] [--no-machine] [--quiet]

Runs each workload of a suite (suites.py) as minitc (`tc.build(tensor, target)`, the operator's
default schedule for the target: the host's CPU, or with --target any `llvm ...` target whose
code the host can run, such as AVX2 code on an AVX-512 machine), numpy and torch (CPU) in one
process, for each thread count (minitc's pool, torch's intra-op threads and numpy's BLAS via
threadpoolctl are all set to it). Before timing,
the minitc result is checked against numpy; a kernel that fails to build, fails to run or
gives a wrong result becomes an error row and is not timed. Timing (timing.py): warm-up, then
interleaved rounds of samples, median and interquartile spread. At start the machine is
measured with minitc-generated kernels (machine.py): peak FMA GFLOP/s, STREAM-triad GB/s and
the thread pool's launch overhead, so "% of peak" is relative to this machine.

On a shared machine, other processes' CPU use is measured for every row (`background_cpus`)
and rows it affected are flagged; `--wait-quiet S` waits up to S seconds before each row for
the other processes to go quiet.

Modules: suites.py (Workload, suites), timing.py (timing, thread control), machine.py
(peaks), runner.py (build, check, time, records), report.py (every suite's table, JSON), plots.py
(every suite's chart), suite_commands.py (every suite of the command: workloads, runner,
options), cli.py (a command per suite, with only its options). The other suites (tuning, GPU,
models, zoo, tlm-eval, runner-scaling) have their own modules and record formats;
`python -m minitc.benchmarks --help` lists them.

JSON (`--json FILE`): a list of records, one per workload and thread count; every record is
self-contained (it repeats the machine and run description), so files from several runs or
machines can be concatenated and filtered without losing context:

    {
      "suite": "cpu-core", "workload": "matmul-1024", "description": "matmul 1024x1024 @ ...",
      "kind": "compute" | "memory",
      "target": "llvm -mcpu=znver2 -num-cores=2",   # what minitc's kernel was built for
      "target_description": {"cpu": "znver2", "vector_bits": 256, "preferred_vector_bits": 256,
                             "full_rate_512": false, "vector_registers": 16, "num_cores": 2,
                             "caches": {"l1d": 32768, "l2": 524288, "l3": 16777216}},
      "host": {"cpu": "AMD EPYC", "llvm_cpu": "znver4"},   # the CPU it ran on
      "threads": 2,
      "minitc_ms": 31.2 | null,        # median ms per call; null: error, or not available
      "numpy_ms": 29.0 | null, "torch_ms": 30.1 | null,
      "best_library": "numpy" | "torch" | null,
      "ratio": 0.93 | null,            # best library ms / minitc ms  (> 1: minitc is faster)
      "gflops": 68.8 | null,           # minitc's rate; "gbps" instead for kind "memory"
      "peak_pct": 32.1 | null,         # minitc's rate / the machine's peak at this thread count
      "flops": 2147483648,             # work per call; "bytes" instead for kind "memory"
      "compile_s": 0.41 | null,        # wall time of tc.build (schedule, lower, LLVM)
      "spread_pct": {"minitc": 1.2, "numpy": 0.8, "torch": 2.0},  # IQR / median, in %
      "background_cpus": 0.03 | null,  # CPUs other processes used while this row was timed
      "error": null | "wrong result: ..." | "build failed: ..." | "run failed: ...",
      "notes": [],                     # library problems (torch failed / disagrees)
      "machine": null | {              # null with --no-machine; peaks of the host's AVX2 kernels
        "cpu": "AMD EPYC", "llvm_cpu": "znver2", "cpus": 2,
        "seconds": 0.9,                # time the measurement took
        "background_cpus": 0.02,       # CPUs other processes used meanwhile (>= 0.25: suspect)
        "peaks": [{"threads": 1, "fma_gflops": 107.3, "fma_gflops_median": 107.0,
                   "triad_gbps": 21.2, "triad_gbps_median": 21.0,
                   "launch_overhead_us": 0.0, "fork_join_us": 0.0}, ...]
      },
      "run": {"date": "2026-...T...+00:00", "command": "python -m minitc.benchmarks --suite ...",
              "suite": "cpu-core", "threads": [1, 2], "repeats": 10, "wait_quiet_s": 0.0,
              "versions": {"python": ..., "minitc": ..., "numpy": ..., "numpy_blas": ...,
                           "torch": ..., "llvmlite": ..., "llvm": ...}}
    }

Results meant to be kept go to experiments/results/ (see its README).
"""
