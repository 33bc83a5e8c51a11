import sys

from ._runtime import main


def _name_process() -> None:
    """`ps` and `top` show `tl-<provider>` (the supervisor passes the name as our argument)."""
    if len(sys.argv) > 1:
        try:
            with open("/proc/self/comm", "w") as comm:
                comm.write(f"tl-{sys.argv[1]}"[:15])  # the kernel keeps 15 bytes
        except OSError:
            pass  # not Linux: the command line still names the provider


# No PR_SET_PDEATHSIG here: it fires when the *thread* that forked us exits, and
# the supervisor forks from trio's thread cache, whose idle threads exit after a
# few seconds. The runtime checks its parent on every heartbeat instead.
_name_process()
main()
