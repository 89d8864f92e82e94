"""Hooks for training frameworks: thin adapters that feed a framework's batches to the run-time guard
(``tito_audit.check_batch``) and its episodes to a replay log (``tito_audit.replay.LogWriter``).

``tito_audit.integrations.trl``: ``TitoGuardMixin`` for TRL's ``GRPOTrainer`` (its ``rollout_func`` path).
Each module imports its framework only where it needs it, so that importing ``tito_audit`` never does.
"""
