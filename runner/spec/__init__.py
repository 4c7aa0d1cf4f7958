"""What users write: the scenario format, user steps, inventories, the team's gameday.toml,
and the checks that read them. Nothing here touches a lab.
"""
