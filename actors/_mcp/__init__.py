"""MCP tool sources: the tools of a Model Context Protocol server as ordinary tools."""
