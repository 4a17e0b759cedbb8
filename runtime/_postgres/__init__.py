"""The PostgreSQL event store: schema, writer, retries over outages, lock, a test server."""
