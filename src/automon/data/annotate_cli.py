"""`data_build/annotate.py <command> key=value ...`: the annotation rounds' commands (COMMANDS):
export / import (automon.data.annotate), safety-export / safety-import (automon.data.safety_annotate),
safety-screen (automon.data.safety_screen), evidence-import (automon.data.evidence_gold)."""

from __future__ import annotations

from automon.data.annotate import ExportConfig, ImportConfig, export, import_labels
from automon.data.evidence_gold import EvidenceImportConfig, evidence_import
from automon.data.safety_annotate import SafetyExportConfig, SafetyImportConfig, safety_export, safety_import
from automon.data.safety_screen import SafetyScreenConfig, safety_screen
from automon.data.verdicts import AnnotationError, annotations_dir, verdicts_path
from automon.errors import script_main

COMMANDS = {"export": (ExportConfig, export), "import": (ImportConfig, import_labels),
            "safety-export": (SafetyExportConfig, safety_export), "safety-import": (SafetyImportConfig, safety_import),
            "safety-screen": (SafetyScreenConfig, safety_screen),
            "evidence-import": (EvidenceImportConfig, evidence_import)}


def main(argv: list[str]) -> int:
    """`annotate.py <command> key=value ...` (COMMANDS): typed keys (a typo stops with the valid ones); the
    entry points' error convention (automon.errors.script_main)."""
    return script_main(_main, argv)


def _main(argv: list[str]) -> int:
    import yaml
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if not argv or argv[0] not in COMMANDS:
        raise AnnotationError(f"unknown command {argv[0] if argv else '(none)'!r}", None,
                              f"run `annotate.py <{'|'.join(COMMANDS)}> key=value ...` (see automon.data.annotate)")
    schema, fn = COMMANDS[argv[0]]
    try:
        cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), OmegaConf.from_dotlist(argv[1:])))
    except yaml.YAMLError as e:  # a value that is not YAML (an unquoted ": " in a sentence)
        raise AnnotationError(f"a value does not parse: {e}".replace("\n", " "), argv[0],
                              "quote it: key='\"a sentence: with a colon\"'") from None
    except OmegaConfBaseException as e:
        keys = ", ".join(f.name for f in __import__("dataclasses").fields(schema))
        raise AnnotationError(f"bad argument: {e.msg if hasattr(e, 'msg') else e}", argv[0],
                              f"valid keys for {argv[0]}: {keys}") from None
    result = fn(cfg)
    if argv[0] == "export":
        print(f"wrote {result['annotators']} blinded files of {result['items']} items to {cfg.out}")
    elif argv[0] == "safety-export":
        print(f"wrote {annotations_dir(cfg.root, cfg.name) / 'export'}: " + ", ".join(
            f"{s} {v['candidate_pairs']} candidate pairs" for s, v in result["subsets"].items())
            + f", for {', '.join(result['annotators'])}")
    elif argv[0] == "safety-screen":
        print(f"wrote {verdicts_path(cfg.name, cfg.root)}: " + "; ".join(
            f"{s}: {v['pairs_rejected']} kept pairs of {cfg.base} rejected ({v.get('benign_flagged', 0)} benign replies "
            f"read as misbehavior, {v.get('misbehavior_missed', 0)} misbehavior replies read as benign, {v['broken']} broken)"
            for s, v in result["screen"]["subsets"].items()))
    elif argv[0] == "evidence-import":
        print(f"wrote {annotations_dir(cfg.root, cfg.name) / 'gold.jsonl'}: {result['with_gold']} of {result['items']} "
              f"items with gold; token F1 {result['token_f1_mean']}, exact match {result['exact_match_share']} over "
              f"{result['both_marked']} items both readers marked")
    elif argv[0] == "safety-import":
        print(f"wrote {verdicts_path(cfg.name, cfg.root)}: " + "; ".join(
            f"{s}: kappa {v['cohen_kappa']}, {v['pairs_kept']} of {v['candidate_pairs']} pairs kept"
            for s, v in result["subsets"].items()))
    else:
        a = result["annotation"]
        print(f"wrote {cfg.out}: kappa {a['cohen_kappa']}, agreement {a['raw_agreement']}, "
              f"{a['test_pairs_kept']} test pairs kept, {a['test_pairs_dropped']} dropped")
    return 0
