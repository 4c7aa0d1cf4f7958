"""`gameday watchdog`: the watchdog of the DeepGEMM crash write-up (section 8), as code.

`machine` is the pure state machine (observations in, decisions out); `loop` observes a lab
through its driver and acts on the decisions; `metrics` and `alert` are what it reports through.
"""
