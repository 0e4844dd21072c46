"""What makes a measurement sound, without OpenCL: timing.py (how many runs, their statistics, ties) and
verify.py (results against numpy in double precision, on fresh random operands)."""
