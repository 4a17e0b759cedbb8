"""Durable timers: the book an owner keeps, the service that fires them, its checkpoint."""
