"""The API server process's serving half (see `process`): the routes, vLLM's metrics, and the
state the two share with the pipe to the engine core."""

from labengine.server.process import build_app, serve
from labengine.server.state import EngineDead, ServerState

__all__ = ["EngineDead", "ServerState", "build_app", "serve"]
