"""Unit constants. Quantities carry their unit in their name (`_gib`, `_s`, `_tokens`)."""

GIB = 1024**3  # bytes per GiB
GB = 1e9  # bytes per GB (spec sheets and bandwidths use decimal units)
MIB = 1024**2  # bytes per MiB
TFLOPS = 1e12  # FLOP/s per TFLOP/s
