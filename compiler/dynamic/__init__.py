"""The run-time-sized wing: one program for a range of shapes (compiler.Dim): dynamic kernels
(kernel.py), dynamic networks (network.py) and the DynamicGraph they are built from (graph.py)."""
