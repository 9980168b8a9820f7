"""Conversions to bfloat16 that LLVM's x86 backend calls as library functions where the
target has no AVX-512 BF16 (`__truncsfbf2`, `__truncdfbf2`: it legalises bfloat compares,
selects and arithmetic through them), and that this process's libgcc may not have (GCC 12's
lacks them): a jitted call to a missing one jumps to address 0. jit.py adds this module to
the engine once, so every kernel's calls resolve. Integer code only, so that compiling it
needs no bfloat legalisation itself: round to nearest even on the bits, NaN kept quiet; a
double is first rounded to odd as a float (then one rounding in all)."""

IR = r"""
define bfloat @__truncsfbf2(float %x) {
  %bits = bitcast float %x to i32
  %hi = lshr i32 %bits, 16
  %odd = and i32 %hi, 1
  %bias = add i32 %odd, 32767
  %sum = add i32 %bits, %bias
  %rounded = lshr i32 %sum, 16
  %quiet = or i32 %hi, 64
  %nan = fcmp uno float %x, %x
  %top = select i1 %nan, i32 %quiet, i32 %rounded
  %h = trunc i32 %top to i16
  %r = bitcast i16 %h to bfloat
  ret bfloat %r
}

define bfloat @__truncdfbf2(double %x) {
  %t = fptrunc double %x to float
  %back = fpext float %t to double
  %inexact = fcmp une double %back, %x
  %bits = bitcast float %t to i32
  %low = and i32 %bits, 1
  %even = icmp eq i32 %low, 0
  %abs_t = call double @llvm.fabs.f64(double %back)
  %abs_x = call double @llvm.fabs.f64(double %x)
  %above = fcmp ogt double %abs_t, %abs_x
  %step = select i1 %above, i32 -1, i32 1
  %oddbits = add i32 %bits, %step
  %fix = and i1 %inexact, %even
  %chosen = select i1 %fix, i32 %oddbits, i32 %bits
  %f = bitcast i32 %chosen to float
  %r = call bfloat @__truncsfbf2(float %f)
  ret bfloat %r
}

declare double @llvm.fabs.f64(double)
"""

SYMBOLS = ("__truncsfbf2", "__truncdfbf2")
LIBRARIES = ("libgcc_s.so.1",)  # __truncsfhf2, __extendhfsf2, __truncdfhf2: float16 without F16C
