"""The embedded local lab: engine nodes as local processes, each on its own loopback address,
supervised by a small daemon (supervisor.py) that the driver (driver.py) talks to.

Its registry entry is in kind.py, as every lab kind's: this package imports nothing, so that the
supervisor daemon starts without the runner's scenario model, results and drivers (it takes
runner/labs/lifecycle.py, runner/fsutil.py and runner/procstat.py).
"""
