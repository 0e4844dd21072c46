"""How one configured GEMM reaches an OpenCL queue.

``plan``: what a family enqueues for one problem (kernels, their arguments, global and local
sizes, scratch buffers) as plain data, which the C export writes out as it is. ``operation``:
those plans built into programs and enqueued (``GemmOperation``), and the cache of prepared
operations the public call and the workers share.
"""
