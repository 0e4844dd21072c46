"""The public call: ``gemmtune.gemm`` on numpy arrays and ``Gemm`` in place on pyopencl arrays.

``compute`` holds both entry points and the cached context per device; ``operands`` checks
what a caller passes (arrays, views, their memory); ``host`` makes numpy arrays a call's buffers
(in place where the device computes in the host's memory); ``batched`` runs many problems of one shape
in one launch; ``complex3m`` the 3M complex product. ``gemmtune`` re-exports ``gemm`` and
``Gemm`` lazily, so importing the package needs no OpenCL.
"""
