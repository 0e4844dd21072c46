"""Execution: the processes a search measures in. ``processes`` starts and watches them (plain
Python); ``timing_worker`` (verify and time) and ``compiler`` (build) run in them, each started as
``child`` says; ``messages`` is what goes between them."""
