"""The blackboard: versioned JSON entries shared by agents, local or on a fleet of nodes."""
