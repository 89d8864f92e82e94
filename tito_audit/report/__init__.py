"""The report layer: what every command reports, below everything that produces or renders it.

``model_report`` (``ModelReport``, ``AuditReport``: the audit's JSON shape), ``check_result`` (one check's
result), ``findings`` (a divergence at its first token, and the collector checks build them with),
``finding_class`` (why two token runs differ, one rule for the audit and replay), ``verdict`` (the one rule from
results to a verdict), ``align`` (aligning token ids), ``quote`` (quoting text in one line), ``scan_report``
(the scan's summary) and ``rl_artifacts`` (what ``tito-audit rl --out`` leaves behind, read back). The audit,
replay, rl and scan fill these; the gate edits them; the formats render them.
"""
