from tuner.cli.main import entry

entry()
