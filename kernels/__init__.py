"""OpenCL C sources of gemmtune's kernels, installed as package data (see gemmtune.files.shipped)."""
