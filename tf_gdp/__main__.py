"""Entry point of `python -m tf_gdp`."""

from tf_gdp.cli import main

if __name__ == "__main__":
  main.run()
