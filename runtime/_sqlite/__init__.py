"""The SQLite event store: one file in WAL mode, its writer thread, audit and watcher."""
