"""Alembic's environment for the state database: migrations run on the connection the
claim store hands over (``config.attributes["connection"]``), inside its schema lock."""

from alembic import context

from vlgate.registry_hooks.migrations import VERSION_TABLE

connection = context.config.attributes["connection"]
context.configure(connection=connection, version_table=VERSION_TABLE)
with context.begin_transaction():
    context.run_migrations()
