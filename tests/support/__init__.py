"""Helpers shared by the test packages (the CLI in a child process, inventory variants, Docker)."""
