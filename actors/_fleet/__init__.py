"""The fleet: agents declared in a file, hosted on nodes, with schedules and upgrades."""
