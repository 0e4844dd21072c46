"""What the searches found, read back for ``gemmtune report``: ``table`` (the results rows
filtered, summarised per problem, rendered), ``plot`` (best GFLOP/s as figures) and
``importance`` (Optuna's parameter importances of a study)."""
