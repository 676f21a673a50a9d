"""Request traces: the canonical frame and its reading (frame), per-column checks (values),
writing (write), and importing public traces (importers, with the readers formats, rows and
servegen)."""
