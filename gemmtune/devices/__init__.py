"""The devices: which OpenCL implementations a process sees (``icd``), what gemmtune knows of a
device as plain data (``info``: ``DeviceInfo``, no OpenCL objects), and the devices listed,
chosen by spec and opened (``opencl``, the one module of them that imports pyopencl)."""
