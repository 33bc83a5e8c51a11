import sys

from ._proctitle import set_comm


def _fork_server() -> None:
    """`--fork-server`: serve fork requests; in a forked worker, go on as a spawned one."""
    from ._forkserver import run

    if run():
        from ._runtime import main

        main()


# No PR_SET_PDEATHSIG here: it fires when the *thread* that forked us exits, and
# the supervisor forks from trio's thread cache, whose idle threads exit after a
# few seconds. The runtime checks its parent on every heartbeat instead.
if sys.argv[1:2] == ["--fork-server"]:
    _fork_server()
else:
    if len(sys.argv) > 1:
        # `ps` and `top` show `tl-<provider>` (the supervisor passes the name as our argument).
        set_comm(f"tl-{sys.argv[1]}")
    from ._runtime import main

    main()
