"""Scheduled prompts (/every, /at, BRIDGE_SCHEDULES), carried out by the engine: the clock
that makes them due and the store that keeps them (scheduler.py), wall-clock times read in
a zone (times.py), what the listings and lines say (texts.py). The core decides each run
(core/schedules.py)."""
