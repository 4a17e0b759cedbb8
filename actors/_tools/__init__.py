"""Tools: the decorator and registry, the schema of a signature, the runner, time tools."""
