"""Alembic's environment for the results database: migrations run on the connection `data.db` hands over
(`config.attributes["connection"]`), with their own version table so a database shared with another
Alembic application (Prefect's, say) keeps the two histories apart."""

from __future__ import annotations

from alembic import context

from judgebench_flows.data.engines import VERSION_TABLE

context.configure(connection=context.config.attributes["connection"], version_table=VERSION_TABLE)
with context.begin_transaction():
    context.run_migrations()
