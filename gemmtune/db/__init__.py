"""The results database: ``urls`` (a URL shown without its secrets), ``connect`` (a URL made
usable: SQLite files, read-only opening, failures mid-search), ``rows`` (rows screened and read
into records), ``store`` (gemmtune's tables), ``tuned`` (``best_config``: what the rows and the
shipped defaults say to use). Optuna's tables are read through Optuna."""
