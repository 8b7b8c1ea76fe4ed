"""A resumable SQLite study storage for the Optuna sweeper (sweeps/optuna_lr_beta.yaml).

hydra-optuna-sweeper 1.3 pins optuna < 3, and optuna 2.10's RDBStorage stamps its schema version
through a connection it never commits, which SQLAlchemy 2 (needed by MLflow 3) rolls back:
every later open then fails with a bare AssertionError. Creating the tables and stamping the
version in one committed transaction first lets the stock RDBStorage run unchanged.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from grpo.tracking.store import sqlite_path


def rdb_storage(url: str) -> Any:
    """optuna.storages.RDBStorage on `url` (sqlite:///path.db: the directory is created)."""
    import alembic.config
    import alembic.migration
    import alembic.script
    import optuna.storages._rdb.storage as rdb
    import sqlalchemy
    from optuna.storages._rdb import models

    logging.getLogger("alembic").setLevel(logging.WARNING)  # no migration chatter in the sweep log
    db = sqlite_path(url)
    if db is not None:
        db.parent.mkdir(parents=True, exist_ok=True)
    engine = sqlalchemy.create_engine(url)
    try:
        models.BaseModel.metadata.create_all(engine)
        here = Path(rdb.__file__).parent
        config = alembic.config.Config(os.fspath(here / "alembic.ini"))
        config.set_main_option("script_location", os.fspath(here / "alembic").replace("%", "%%"))
        script = alembic.script.ScriptDirectory.from_config(config)
        with engine.begin() as conn:
            context = alembic.migration.MigrationContext.configure(conn)
            if context.get_current_revision() is None:
                context.stamp(script, script.get_current_head())
    finally:
        engine.dispose()
    return rdb.RDBStorage(url)
