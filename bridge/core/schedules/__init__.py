"""Scheduled prompts (docs/schedules.md): the operator's ``[[schedules]]`` and those people add
with ``!schedule``, each run claimed in the store before it starts (exactly once), made as an
ordinary turn through :meth:`bridge.core.core.Core.start_thread`."""
