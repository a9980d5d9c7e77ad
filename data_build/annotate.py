"""Export free-text test items to blinded annotator files, and import their labels.

Usage:
    python data_build/annotate.py export build=data/builds/policy annotators=2 out=annotation/
    python data_build/annotate.py import build=data/builds/policy labels=annotation/ out=data/builds/policy-agreed

Keys: automon.data.annotate (ExportConfig, ImportConfig); what it does: its docstring.
"""

import sys

from automon.data.annotate import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
