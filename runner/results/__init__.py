"""What a run found, as data: the result schema, the reports folder, trends over past runs,
redaction and the text made safe to show.
"""
