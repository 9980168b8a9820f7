"""Schedule primitives and traces: the schedule state (state.py), the primitives on loops
(loops.py) and on stages (stages.py), the trace of decisions (trace.py), and `Schedule`
(recorder.py), which applies a primitive and records it as a step of the trace."""

from minitc.schedule.recorder import Schedule
from minitc.schedule.trace import Step, Trace

__all__ = ["Schedule", "Step", "Trace"]
