"""The settings rules of the tracking group: a known backend, a store MLflow 3 can use (its SQLite
file, when there is one, a database), the UI's address, what is logged and registered.

Walked by the registry grpo/cli/checks.py; UserError (one line: field, value, fix) on the first
rule broken. Light: no mlflow import."""

from __future__ import annotations

import math

from grpo.config import TRACKING_BACKENDS, GrpoConfig, TrackingConfig
from grpo.errors import reject


def check_tracking(t: TrackingConfig) -> None:
    if t.backend not in TRACKING_BACKENDS:
        reject(f"tracking.backend={t.backend} is unknown: use tracking=mlflow or tracking=none")
    if t.backend == "mlflow" and t.uri:
        from grpo.tracking.store import check_uri

        check_uri(t.uri, field="tracking.uri")
    if t.ui_url is not None and not str(t.ui_url).startswith(("http://", "https://")):
        reject(f"tracking.ui_url={t.ui_url} must be an http(s):// address of the MLflow UI, or null")
    if t.log_samples < 0:
        reject(f"tracking.log_samples must be >= 0 (0 = no sample table), got {t.log_samples}")
    if t.log_completions < 0:
        reject(f"tracking.log_completions must be >= 0 (0 = no completions table), got {t.log_completions}")
    if not (math.isfinite(t.system_metrics_interval) and t.system_metrics_interval > 0):
        reject(f"tracking.system_metrics_interval must be > 0 seconds, got {t.system_metrics_interval}")
    wants = (
        "tracking.register_as" if t.register_as is not None else "tracking.log_model" if t.log_model else None
    )
    if wants and t.backend != "mlflow":
        reject(f"{wants} logs to MLflow: it needs tracking=mlflow, not tracking={t.backend}")
    if t.register_as is not None and not str(t.register_as).strip():
        reject("tracking.register_as is empty: give the registered model a name, or null")


def check_tracking_store(s: GrpoConfig) -> None:
    """tracking=mlflow: the store's SQLite file, when it exists, is a database (the store's address
    is the tracking group's, or the default under output_root: a rule across both)."""
    from grpo.tracking.store import check_sqlite_file, tracking_uri

    check_sqlite_file(tracking_uri(s), "tracking.uri" if s.tracking.uri else "the default MLflow store")
