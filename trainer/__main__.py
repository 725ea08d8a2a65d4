import sys

from trainer.run.cli import main

# The guard matters: vLLM starts its engine core as a spawned process, which imports this module again
# as `__mp_main__`; without it every engine start would start a second training run.
if __name__ == "__main__":
    sys.exit(main())
