"""Durable workflows: an async function whose steps are events in its own stream."""
