"""The embedded local lab: engine nodes as local processes, each on its own loopback address,
supervised by a small daemon (supervisor.py) that the driver (driver.py) talks to."""
