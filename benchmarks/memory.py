"""Peak memory of a benchmark's child process, measured so that its parent's size does not leak in.

`getrusage(RUSAGE_SELF).ru_maxrss` is the wrong figure for a child started by subprocess: Python
starts children with vfork, and Linux carries the high-water mark of the memory the child had before
exec (the parent's, shared until then) into ru_maxrss. A child of a 500 MB harness then reports at
least 500 MB whatever it did. VmHWM in /proc/self/status belongs to the process's own memory after
exec, so it is the child's real peak resident set.
"""

from __future__ import annotations

from commops_cli.processes import peak_rss_mb as own_peak_rss_mb

__all__ = ["own_peak_rss_mb"]
