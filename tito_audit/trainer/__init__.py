"""Code that runs inside a trainer, beside the training step (importing no torch and no framework itself).

``guard`` (``check_batch``: the ids a batch trains equal the ids the engine sampled), ``batch_item`` (how a
trainer's batch names its fields), ``writer`` (``LogWriter``: replay records from any loop, to JSONL, gzip or
Parquet) and ``trl`` (``TitoGuardMixin`` for TRL's ``GRPOTrainer``; TRL is imported only there).
"""
