"""The conversation engine: one actor per conversation runs the pure core's `step` and
performs its effects (Feishu calls, runtime calls, timers). No decisions are made here."""
