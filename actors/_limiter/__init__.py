"""The fleet limiter: one actor that grants model calls, and its pure core."""
