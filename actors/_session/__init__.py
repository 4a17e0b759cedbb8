"""The session: its events and fold, its pure decider, the actor shell, its handle and spawn.

What a session is made of (agent specs, budgets, the context projection) lives here too,
since the session's fold reads it; replay and fork fold the same log.
"""
