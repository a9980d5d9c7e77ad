"""Export items to blinded annotator files, and import their verdicts.

Usage:
    python data_build/annotate.py export build=data/builds/policy annotators=2 out=annotation/
    python data_build/annotate.py import build=data/builds/policy labels=annotation/ out=data/builds/policy-agreed

    # the safety subsets' test pairs (wordings v5 and later: `safety_annotations: <name>`)
    python data_build/annotate.py safety-export name=safety_v1 sources_root=../shared/data/raw overwrite=true
    #   annotators write annotations/safety_v1/<annotator>/<chunk>.jsonl (export/INSTRUCTIONS.md)
    python data_build/annotate.py safety-import name=safety_v1
    #   a third reading of the kept pairs' replies, one at a time: annotations/safety_v2/screen/
    python data_build/annotate.py safety-screen name=safety_v2 base=safety_v1

Keys: automon.data.annotate (ExportConfig, ImportConfig), automon.data.safety_annotate (SafetyExportConfig,
SafetyImportConfig), automon.data.safety_screen (SafetyScreenConfig);
what each does: its docstring.
"""

import automon.startup  # noqa: F401  (first: Ctrl-C while the rest imports is one line, exit 130)

import sys

from automon.data.annotate_cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
