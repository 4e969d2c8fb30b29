from ibrl_bench.cli import main

main()
