from ._runtime import main

# No PR_SET_PDEATHSIG here: it fires when the *thread* that forked us exits, and
# the supervisor forks from trio's thread cache, whose idle threads exit after a
# few seconds. The runtime checks its parent on every heartbeat instead.
main()
