"""A child for tests/test_launcher.py: it announces an address, then exits with status 1 (a
service that crashes once running; its starts are counted in the file ``--counter`` names)."""

import argparse
import json
import sys
import time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, default=0)
parser.add_argument("--metrics-port", type=int, default=-1)
parser.add_argument("--counter", required=True)
args = parser.parse_args()
counter = Path(args.counter)
counter.write_text(str(int(counter.read_text()) + 1 if counter.exists() else 1))
print(json.dumps({"address": f"127.0.0.1:{args.port or 1}"}), flush=True)
time.sleep(0.2)
sys.exit(1)
