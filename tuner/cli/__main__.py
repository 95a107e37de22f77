from tuner.cli.main import main

main()
