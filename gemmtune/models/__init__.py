"""Cost models, which rank configurations before they are measured: ``analytic`` (from first
principles), ``learned`` (fitted to measured rows, and the search's seeds), ``breeding`` (children
of the best), ``shipped_prior`` (the rows shipped for the learned model). No OpenCL."""
