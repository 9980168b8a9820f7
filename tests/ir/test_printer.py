"""The pseudo-Python printer: exact text, precedence, constants, and name deduplication."""

import math

from minitc.expr import Cast, Const, Var, call, cast, compare, const, logical, maximum, minimum, select
from minitc.ir import Allocate, Buffer, For, IfThenElse, Kernel, Load, Seq, Store, seq
from minitc.printer import format_const, format_expr, format_kernel, format_stmt


def matmul_relu_kernel(kinds=("parallel", "serial", "unrolled", "vectorized")):
    """A tiled matmul + relu with a local accumulator and a guarded write-back."""
    A = Buffer("A", (64, 32), "float32")
    B = Buffer("B", (32, 16), "float32")
    C = Buffer("C", (60, 16), "float32")
    CL = Buffer("C_local", (32,), "float32", "local")
    io, j, k = Var("i_o"), Var("j"), Var("k")
    i1, i2, i3 = Var("i_i"), Var("i_i"), Var("i_i")  # three distinct variables, one name
    row = lambda ii: io * 32 + ii  # noqa: E731
    update = Load(CL, (i2,)) + Load(A, (row(i2), k)) * Load(B, (k, j))
    body = For(
        io,
        2,
        kinds[0],
        For(
            j,
            16,
            kinds[1],
            Allocate(
                CL,
                seq(
                    For(i1, 32, kinds[2], Store(CL, (i1,), const(0.0))),
                    For(k, 32, "serial", For(i2, 32, kinds[3], Store(CL, (i2,), update))),
                    For(
                        i3,
                        32,
                        "serial",
                        IfThenElse(row(i3) < 60, Store(C, (row(i3), j), maximum(Load(CL, (i3,)), 0.0))),
                    ),
                ),
            ),
        ),
    )
    return Kernel("matmul_relu", [A, B, C], 2, body)


EXPECTED_MATMUL_RELU = """\
def matmul_relu(A: float32[64, 32], B: float32[32, 16]) -> (C: float32[60, 16]):
    for i_o in parallel(2):
        for j in range(16):
            with alloc("local", float32[32]) as C_local:
                for i_i in unrolled(32):
                    C_local[i_i] = 0.0
                for k in range(32):
                    for i_i_1 in vectorized(32):
                        C_local[i_i_1] = C_local[i_i_1] + A[i_o * 32 + i_i_1, k] * B[k, j]
                for i_i_2 in range(32):
                    if i_o * 32 + i_i_2 < 60:
                        C[i_o * 32 + i_i_2, j] = max(C_local[i_i_2], 0.0)
"""


def test_kernel_exact_text():
    assert format_kernel(matmul_relu_kernel()) == EXPECTED_MATMUL_RELU


def test_printing_is_deterministic_and_structural():
    k1, k2 = matmul_relu_kernel(), matmul_relu_kernel()
    assert format_kernel(k1) == format_kernel(k1) == format_kernel(k2)
    other = matmul_relu_kernel(kinds=("serial", "serial", "unrolled", "vectorized"))
    assert format_kernel(other) != format_kernel(k1)
    assert "for i_o in range(2):" in format_kernel(other)


def test_if_else_alloc_scope_and_outputs():
    X = Buffer("X", (8,), "int32")
    Y = Buffer("Y", (8,), "int32")
    Z = Buffer("Z", (8,), "float64")
    T = Buffer("T", (2, 4), "int32", "global")
    i = Var("i")
    body = Allocate(
        T,
        For(
            i,
            8,
            "serial",
            IfThenElse(
                (i < 4) & compare("ne", Load(X, (i,)), Const(0, "int32")),  # Expr has no __ne__
                Store(Y, (i,), Load(X, (i,)) * Const(3, "int32")),
                Seq((Store(Y, (i,), Const(-1, "int32")), Store(Z, (i,), Const(1.5, "float64")))),
            ),
        ),
    )
    text = format_kernel(Kernel("k", [X, Y, Z], 1, body))
    assert text == (
        "def k(X: int32[8]) -> (Y: int32[8], Z: float64[8]):\n"
        '    with alloc("global", int32[2, 4]) as T:\n'
        "        for i in range(8):\n"
        "            if i < 4 and X[i] != 0:i32:\n"
        "                Y[i] = X[i] * 3:i32\n"
        "            else:\n"
        "                Y[i] = -1:i32\n"
        "                Z[i] = 1.5:f64\n"
    )


def test_local_param_scope_is_printed():
    P = Buffer("P", (4,), "float32", "local")
    i = Var("i")
    text = format_kernel(Kernel("k", [P], 0, For(i, 4, "serial", Store(P, (i,), const(1.0)))))
    assert text.startswith("def k() -> (P: float32[4] @local):")


def test_precedence_minimal_parentheses():
    a, b, c = Var("a"), Var("b"), Var("c")
    assert format_expr(a * (b + c)) == "a * (b + c)"
    assert format_expr(a * b + c) == "a * b + c"
    assert format_expr((a - b) - c) == "a - b - c"
    assert format_expr(a - (b - c)) == "a - (b - c)"
    assert format_expr(a + (b + c)) == "a + (b + c)"  # keeps the tree shape
    assert format_expr((a // 4) % 8) == "a // 4 % 8"
    assert format_expr(a // (b * c)) == "a // (b * c)"
    p, q = a < b, b >= c
    assert format_expr(logical("and", logical("or", p, q), p)) == "(a < b or b >= c) and a < b"
    assert format_expr(logical("or", logical("and", p, q), p)) == "a < b and b >= c or a < b"
    assert format_expr(~p) == "not a < b"
    assert format_expr(~logical("and", p, q)) == "not (a < b and b >= c)"
    assert format_expr(compare("eq", p, q)) == "(a < b) == (b >= c)"


def test_calls_casts_select_and_loads():
    x = Var("x", "float32")
    n = Var("n")
    A = Buffer("A", (4, 4), "float32")
    e = select(n < 3, call("exp", x) / cast(n, "float32"), minimum(Load(A, (n, n + 1)), -1.0))
    assert format_expr(e) == "select(n < 3, exp(x) / float32(n), min(A[n, n + 1], -1.0))"
    assert format_expr(cast(x, "float64") * 2.0) == "float64(x) * 2.0:f64"
    assert format_expr(Cast("int32", n) + Const(1, "int32")) == "int32(n) + 1:i32"
    assert format_expr(call("sigmoid", x) - call("erf", x)) == "sigmoid(x) - erf(x)"


def test_constants():
    assert format_const(1.5, "float32") == "1.5"
    assert format_const(1.5, "float64") == "1.5:f64"
    assert format_const(2, "float32") == "2.0"
    assert format_const(3, "int64") == "3"
    assert format_const(3, "int32") == "3:i32"
    assert format_const(True, "bool") == "True"
    assert format_const(-math.inf, "float32") == "-inf"
    assert format_const(math.inf, "float64") == "inf:f64"
    assert format_const(math.nan, "float32") == "nan"
    assert format_expr(Const(-math.inf, "float32")) == "-inf"


def test_name_dedup_by_first_appearance():
    A = Buffer("A", (4, 4), "float32")
    B = Buffer("A", (4, 4), "float32")  # a second buffer named A
    i, i_again, named_i_1, named_A = Var("i"), Var("i"), Var("i_1"), Var("A")
    body = seq(
        For(named_i_1, 4, "serial", For(i, 4, "serial", Store(A, (i, named_i_1), const(0.0)))),
        For(i_again, 4, "serial", For(named_A, 4, "serial", Store(B, (i_again, named_A), Load(A, (named_A, i_again))))),
    )
    text = format_kernel(Kernel("k", [A, B], 1, body))
    assert text == (
        "def k(A: float32[4, 4]) -> (A_1: float32[4, 4]):\n"
        "    for i_1 in range(4):\n"
        "        for i in range(4):\n"
        "            A[i, i_1] = 0.0\n"
        "    for i_2 in range(4):\n"
        "        for A_2 in range(4):\n"
        "            A_1[i_2, A_2] = A[A_2, i_2]\n"
    )


def test_same_var_object_keeps_its_name():
    A = Buffer("A", (4,), "float32")
    i = Var("i")
    body = seq(For(i, 4, "serial", Store(A, (i,), const(0.0))), For(i, 4, "unrolled", Store(A, (i,), const(1.0))))
    text = format_kernel(Kernel("k", [A], 0, body))
    assert "i_1" not in text and text.count("for i in") == 2


def test_unbound_var_and_undeclared_buffer_are_marked():
    A = Buffer("A", (4,), "float32")
    T = Buffer("T", (4,), "float32", "local")
    i, k = Var("i"), Var("k")
    body = seq(For(i, 4, "serial", Store(A, (i,), Load(T, (k,)))), Store(A, (i,), const(0.0)))
    assert format_kernel(Kernel("k", [A], 0, body)) == (
        "def k() -> (A: float32[4]):\n    for i in range(4):\n        A[i] = T?[k?]\n    A[i?] = 0.0\n"
    )


def test_format_stmt_standalone():
    A = Buffer("A", (8,), "float32")
    i, j = Var("i"), Var("j")
    s = For(j, 2, "vectorized", Store(A, (i * 2 + j,), const(0.0)))
    assert format_stmt(s) == "for j in vectorized(2):\n    A[i * 2 + j] = 0.0"
    assert format_stmt(s, indent=1) == "    for j in vectorized(2):\n        A[i * 2 + j] = 0.0"
    assert format_stmt(Seq(())) == "pass"
