"""What a run leaves behind: MLflow runs, checkpoints and resume, reports, plots, the progress bar and table.

Imports: core, config, ops, data. Never the engine.
"""
