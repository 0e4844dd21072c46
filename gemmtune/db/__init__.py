"""The results database: ``urls`` (a URL shown without its secrets), ``connect`` (a URL made
usable: SQLite files, read-only opening, failures mid-search), ``rows`` (rows screened and read
into records), ``store`` (gemmtune's tables). Optuna's tables are read through Optuna."""
