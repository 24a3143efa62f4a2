"""The webhook delivery ids already handled: replay protection that survives a restart and
is shared by every receiver replica (one row per id in vlgate's state database)."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from vlgate.registry_hooks.state_db import StateDatabase, deliveries_table, utc_now


class DeliveryLog:
    def __init__(self, db: StateDatabase):
        self.engine = db.engine

    def seen(self, delivery_id: str) -> bool:
        """Whether a delivery id was recorded (by :meth:`first`) already."""
        with self.engine.connect() as connection:
            found = connection.execute(sa.select(deliveries_table.c.delivery_id).where(deliveries_table.c.delivery_id == delivery_id)).first()
        return found is not None

    def first(self, delivery_id: str) -> bool:
        """Record a delivery id as handled: True the first time, False for a replay."""
        try:
            with self.engine.begin() as connection:
                connection.execute(deliveries_table.insert().values(delivery_id=delivery_id, received_at=utc_now()))
        except IntegrityError:
            return False
        return True

    def forget_before(self, cutoff: datetime) -> int:
        """Delivery ids older than the receiver's timestamp tolerance can go: a replay that
        old is refused on its timestamp anyway."""
        with self.engine.begin() as connection:
            return connection.execute(deliveries_table.delete().where(deliveries_table.c.received_at < cutoff)).rowcount
