"""The event store's contract and what every engine shares.

The in-memory engine, the store operations (check, export, retention), the queued
append both writers use, and snapshot chunks.
"""
