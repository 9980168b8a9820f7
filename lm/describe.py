"""The subgraph and skeleton parts of a sentence, read off a computation and its design space:
op kinds, shapes, reduction extents, access patterns and arithmetic of each stage, and the
decision slots each sketch of the space has, all without the user's names."""

from __future__ import annotations

from minitc.arith import affine
from minitc.autotune.space import template_defaults
from minitc.expr import Binary, Call, Cast, Compare, Not, Select, Var
from minitc.schedule.recorder import Schedule
from minitc.schedule.state import Read, from_tensors
from minitc.te import Reduce

MAX_READS = 8  # reads written per stage; every stage of the dataset has at most 5


def describe_stages(outputs) -> list:
    """One dict per stage (keyword arguments of language.WrittenStage), producers first."""
    state, _ = from_tensors(list(outputs))
    number = {st.name: n for n, st in enumerate(state.stages)}
    out = []
    for st in state.stages:
        if st.is_placeholder:
            out.append({"kind": "input", "dtype": st.dtype, "shape": tuple(st.shape)})
            continue
        axes = {a: f"a{k}" for k, a in enumerate(st.all_axes)}
        reduce = None
        if isinstance(st.body, Reduce):
            reduce = (st.body.combiner, tuple(a.extent for a in st.body.axes))
        reads = tuple((number[r.stage], tuple(index_text(i, axes) for i in r.indices)) for r in st.reads())
        if len(reads) > MAX_READS:  # a Winograd transform's dozens: the distinct ones, the first few
            reads = tuple(dict.fromkeys(reads))[:MAX_READS]
        out.append(
            {
                "kind": st.tag or "compute",
                "dtype": st.dtype,
                "shape": tuple(st.shape),
                "reduce": reduce,
                "reads": reads,
                "ops": body_ops(st.body),
            }
        )
    return out


def index_text(e, axes: dict) -> str:
    """An index as an affine form over the stage's axes, e.g. `a2*2+a5-1`; `?` if not affine."""
    form = affine(e, atoms=False)
    if form is None or any(v not in axes for v in form.coef):
        return "?"
    text = ""
    for v, c in sorted(form.coef.items(), key=lambda t: int(axes[t[0]][1:])):
        term = axes[v] + (f"*{abs(c)}" if abs(c) != 1 else "")
        text += ("-" if c < 0 else "+" if text else "") + term
    if form.offset or not text:
        text += f"{form.offset:+d}" if text else str(form.offset)
    return text


def body_ops(body) -> tuple:
    """The arithmetic of a stage's body (not of its index expressions), sorted and unique."""
    ops = set()
    stack = [body]
    while stack:
        e = stack.pop()
        if isinstance(e, Read) or isinstance(e, Var):
            continue  # index arithmetic is described by the access pattern
        if isinstance(e, (Binary, Compare)):
            ops.add(e.op)
        elif isinstance(e, Call):
            ops.add(e.name)
        elif isinstance(e, Select):
            ops.add("select")
        elif isinstance(e, Cast):
            ops.add("cast")
        elif isinstance(e, Not):
            ops.add("not")
        stack.extend(e.children())
    return tuple(sorted(ops))


def decision_label(name: str, names: dict) -> str:
    """A sampler slot name without user names: `matmul.mr` -> `s2.mr`,
    `cache.conv2d_local.k` -> `cache.s3.local.a1`, `C.j` -> `s2.a1`."""
    parts, axes = [], {}
    for part in name.split("."):
        base = part[: -len("_local")] if part.endswith("_local") else part
        if base in names:
            stage, axes = names[base]
            parts += [stage, "local"] if base != part else [stage]
        else:
            parts.append(axes.get(part, part))
    return ".".join(parts)


def space_skeleton(space) -> tuple:
    """(sketch, slot names) per sketch: a template lists its parameters; the generic rules take
    their slots from the computation (tiles per axis, inline, cache, parallel, unroll)."""
    out = []
    for sketch in space.sketches:
        if sketch == "template":
            params = template_defaults(space.tag, Schedule(space.outputs), space.out, space.target)
            out.append(("template", (space.tag,) + tuple(params)))
        else:
            out.append((sketch, ()))
    return tuple(out)
