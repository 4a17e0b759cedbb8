"""Reading sessions from a log for people: the folds and plain formats the CLI and the
console share (summaries, agent trees, transcript lines, ids and times)."""
