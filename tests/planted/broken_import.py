"""A module that fails while being imported (a missing native backend)."""

raise ImportError("planted: the native backend libplanted.so is not installed")
