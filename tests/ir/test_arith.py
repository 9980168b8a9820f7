"""Index arithmetic (minitc/arith.py): folding `//` and `%` by constants under loop ranges,
checked against Python's integers on random affine expressions."""

import numpy as np

from minitc.arith import fold_divisions, simplify
from minitc.expr import Const, Var, binary, const, substitute
from minitc.printer import format_expr

jo, jv, lane = (Var(n, "int64") for n in ("jo", "jv", "lane"))


def test_a_vector_of_blocked_data_reads_one_block():
    """(jo*48 + jv*16 + lane) // 16 and % 16 for a lane in [0, 16): the block and the lane."""
    j = jo * 48 + jv * 16 + lane
    ranges = {jo: (0, 63), jv: (0, 2), lane: (0, 15)}
    assert format_expr(simplify(fold_divisions(j // 16, ranges))) == "jo * 3 + jv"
    assert format_expr(simplify(fold_divisions(j % 16, ranges))) == "lane"
    # 8-lane steps of a 16-wide block: the remainder spans 48 values, nothing folds
    narrow = {jo: (0, 63), jv: (0, 5), lane: (0, 7)}
    assert "//" in format_expr(fold_divisions((jo * 48 + jv * 8 + lane) // 16, narrow))


def test_a_dividend_that_can_wrap_around_int64_is_not_folded():
    e = binary("floordiv", jo * 2**62, const(2**62))
    assert "//" in format_expr(fold_divisions(e, {jo: (0, 7)}))


def test_folding_matches_python_integers():
    rng = np.random.default_rng(0)
    variables = (jo, jv, lane)
    for _ in range(400):
        c = int(rng.choice([2, 3, 4, 7, 8, 16, 28]))
        coefs = [int(rng.choice([0, 1, 2, 5, c, 2 * c, 3 * c, -c])) for _ in variables]
        offset = int(rng.integers(-40, 41))
        ranges = {v: (0, int(rng.integers(0, 2 * c))) for v in variables}
        dividend = sum((v * k for v, k in zip(variables, coefs)), const(offset))
        for op in ("floordiv", "mod"):
            folded = fold_divisions(binary(op, dividend, const(c)), ranges)
            for _ in range(4):
                values = {v: int(rng.integers(lo, hi + 1)) for v, (lo, hi) in ranges.items()}
                x = sum(k * values[v] for v, k in zip(variables, coefs)) + offset
                got = simplify(substitute(folded, {v: Const(n, "int64") for v, n in values.items()}))
                assert isinstance(got, Const) and got.value == (x // c if op == "floordiv" else x % c)
