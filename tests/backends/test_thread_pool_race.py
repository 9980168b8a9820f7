"""The thread pool never runs a task with another job's task function or closure (issue 55).

The driver below launches jobs of three tasks, alternating between two task functions that
write `tag ^ 1` and `tag ^ 2` into out[t]; each job's closure is on the stack of a fresh call,
at the same address as the last job's (as kernel entries called one after another from Python
are). A worker that ran the last job's task with its closure pointer on a task of the new job
writes the wrong mark, which the driver counts. `force_interleaving` makes a worker read the
claim word of every job while the launcher has closed it (new generation) but not yet written
the new fields: before the fix the worker then took the old fields and claimed a task of the
new job with them, as workers delayed by preemption sometimes did on their own.
"""

import ctypes

import llvmlite.binding as llvm
import pytest

from minitc.backends.llvm.runtime import ensure_runtime
from minitc.backends.llvm.thread_pool_ir import thread_pool_module

TASK = """
define internal void @task_{name}(ptr %c, i64 %t, i64 %n) {{
  call void @task_work()
  %tag = load volatile i64, ptr %c
  %p = getelementptr i64, ptr %c, i64 1
  %out = load volatile ptr, ptr %p
  %v = xor i64 %tag, {mark}
  %slot = getelementptr i64, ptr %out, i64 %t
  store volatile i64 %v, ptr %slot
  ret void
}}
"""

DRIVER = (
    TASK.format(name="a", mark=1)
    + TASK.format(name="b", mark=2)
    + """
@work_iters = global i64 0

define internal void @task_work() noinline {
entry:
  %k = load volatile i64, ptr @work_iters
  %none = icmp eq i64 %k, 0
  br i1 %none, label %done, label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %loop]
  call void @llvm.x86.sse2.pause()
  %i1 = add i64 %i, 1
  %more = icmp ult i64 %i1, %k
  br i1 %more, label %loop, label %done
done:
  ret void
}

; one job of 3 tasks; returns how many of them did not write this job's mark
define internal i64 @launch_one(i64 %i, ptr %out) noinline {
entry:
  %c = alloca [2 x i64], align 8
  %tag = shl i64 %i, 2
  store volatile i64 %tag, ptr %c
  %p = getelementptr i64, ptr %c, i64 1
  store volatile ptr %out, ptr %p
  %parity = and i64 %i, 1
  %isb = icmp ne i64 %parity, 0
  %task = select i1 %isb, ptr @task_b, ptr @task_a
  %mark = select i1 %isb, i64 2, i64 1
  call void @minitc_parallel_launch(ptr %task, ptr %c, i64 3)
  %want = xor i64 %tag, %mark
  br label %check
check:
  %t = phi i64 [0, %entry], [%t1, %check]
  %err = phi i64 [0, %entry], [%err1, %check]
  %slot = getelementptr i64, ptr %out, i64 %t
  %got = load volatile i64, ptr %slot
  store volatile i64 -1, ptr %slot
  %bad = icmp ne i64 %got, %want
  %badi = zext i1 %bad to i64
  %err1 = add i64 %err, %badi
  %t1 = add i64 %t, 1
  %more = icmp ult i64 %t1, 3
  br i1 %more, label %check, label %exit
exit:
  ret i64 %err1
}

define i64 @stress(i64 %iters, ptr %out) {
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %loop]
  %e = phi i64 [0, %entry], [%e1, %loop]
  %x = call i64 @launch_one(i64 %i, ptr %out)
  %e1 = add i64 %e, %x
  %i1 = add i64 %i, 1
  %more = icmp ult i64 %i1, %iters
  br i1 %more, label %loop, label %exit
exit:
  ret i64 %e1
}
"""
)

pytestmark = pytest.mark.skipif(
    not llvm.get_process_triple().startswith("x86_64"), reason="the driver's spin hint is x86's pause"
)


def _engine(ir_text: str):
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    mod = llvm.parse_assembly(ir_text)
    mod.triple = llvm.get_process_triple()
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, llvm.Target.from_triple(mod.triple).create_target_machine(opt=2))
    engine.finalize_object()
    return engine


def _wrong_marks(engine, launches: int, task_pauses: int) -> int:
    address = engine.get_function_address
    ctypes.c_int64.from_address(engine.get_global_value_address("work_iters")).value = task_pauses
    out = (ctypes.c_int64 * 8)(*([-1] * 8))
    stress = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)(address("stress"))
    return stress(launches, ctypes.addressof(out))


# Engines stay referenced: their pools' worker threads sleep in their code for good.
_KEEP = []


def test_worker_meeting_every_publication_never_mixes_jobs():
    """Before the fix, 59 of 60 jobs had a task run with the last job's function (Intel Xeon
    Sapphire Rapids class, KVM, 2 cores); the first job has no last job."""
    engine = _engine(str(thread_pool_module("x86_64", force_interleaving=True)) + DRIVER)  # it declares pause
    _KEEP.append(engine)
    ctypes.CFUNCTYPE(None, ctypes.c_int64)(engine.get_function_address("minitc_rt_set_num_threads"))(2)
    assert _wrong_marks(engine, launches=150, task_pauses=1000) == 0


def test_process_pool_never_mixes_jobs():
    """The process's own pool (registered minitc_parallel_launch), back-to-back launches."""
    ensure_runtime()
    declarations = "declare void @minitc_parallel_launch(ptr, ptr, i64)\ndeclare void @llvm.x86.sse2.pause()\n"
    engine = _engine(declarations + DRIVER)
    _KEEP.append(engine)
    assert _wrong_marks(engine, launches=100_000, task_pauses=0) == 0
