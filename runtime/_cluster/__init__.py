"""A fleet of nodes on PostgreSQL: leases, placement, the fence, inboxes, the simulation."""
