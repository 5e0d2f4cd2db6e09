"""Flow-level network model (``--fidelity flow``): max-min fair bandwidth sharing of the flows
NCCL runs, recomputed whenever a flow starts or ends.

- :mod:`sim.flow.maxmin`: max-min fair rates (progressive filling) over capacitated links.
- :mod:`sim.flow.fluid`: finish times of a static set of flows (the uncontended reference).
- :mod:`sim.flow.network`: the SimPy component that runs batches of flows as they come and go.
- :mod:`sim.flow.decompose`: a communication op as flows plus a fixed latency.
- :mod:`sim.flow.transport`: the engine's hook (communication tasks -> flows).
"""

FIDELITIES = ("analytic", "flow")  # the network models: analytic durations, or max-min fair flows
