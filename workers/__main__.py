import ctypes
import signal

# First, before the imports: if the supervisor dies, so do we (PR_SET_PDEATHSIG).
# Set later, a supervisor dying during our imports would leave us orphaned.
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
except (OSError, AttributeError):  # not Linux: the parent check in the runtime still applies
    pass

from ._runtime import main  # noqa: E402

main()
