"""``moto_server`` with werkzeug's per-request log switched off (it costs moto CPU on
every call and nobody reads it). Run: ``python -m bench.moto_server -H 127.0.0.1 -p PORT``.
"""

from __future__ import annotations

import logging
import sys

from moto.server import main

if __name__ == "__main__":
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    sys.exit(main(sys.argv[1:]))
