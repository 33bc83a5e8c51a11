from ._runtime import main

main()
