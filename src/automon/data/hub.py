"""A build as the Hugging Face hub reads it: the YAML metadata block that opens the dataset card.

`datasets.load_dataset(<build dir>)` reads it: `configs` names the split files (without it every file
of the build, manifest.json too, is read as data), `dataset_info.features` the types, so that `meta`,
whose keys differ by recipe, loads as one struct (the union of its keys, null where a recipe has none)
instead of a schema inferred per block that fails to cast. The features are the samples' own, merged
over every sample (`SampleFeatures`); a field whose type differs between samples stops the build.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from automon.schema import FIELDS

# The hub's license ids for the sources' licenses (manifest `sources.<name>.license`); any other (none
# stated, unverified) is `unknown`, and the card's Sources section says which source it is.
HUB_LICENSES = {"mit": "mit", "cc-by-4.0": "cc-by-4.0", "apache-2.0": "apache-2.0", "gpl-3.0": "gpl-3.0"}
_SCALARS = ((bool, "bool"), (int, "int64"), (float, "float64"), (str, "string"))
_SIZES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
          (10_000_000, "1M<n<10M"))


class SampleFeatures:
    """The features of JSON records, merged one record at a time: a scalar dtype, {"struct": {name:
    feature}}, {"list": feature}, or None while only nulls (or empty lists) were seen."""

    def __init__(self) -> None:
        self.root: dict = {"struct": {}}

    def add(self, record: Mapping[str, Any]) -> None:
        self.root = self._merge(self.root, dict(record), "")

    def _merge(self, have: Any, v: Any, where: str) -> Any:
        if v is None:
            return have
        if isinstance(v, dict):
            fields = dict(self._expect(have, "struct", v, where) or {})
            for k, x in v.items():
                fields[k] = self._merge(fields.get(k), x, f"{where}.{k}" if where else k)
            return {"struct": fields}
        if isinstance(v, list):
            inner = self._expect(have, "list", v, where)
            for x in v:
                inner = self._merge(inner, x, f"{where}[]")
            return {"list": inner}
        dtype = next(name for kind, name in _SCALARS if isinstance(v, kind))
        if have is None or have == dtype:
            return dtype
        if {have, dtype} == {"int64", "float64"}:
            return "float64"
        raise ValueError(f"sample field {where} is {dtype} here and {have} elsewhere: the dataset card cannot "
                         "type it (give the field one type in its recipe)")

    @staticmethod
    def _expect(have: Any, kind: str, v: Any, where: str) -> Any:
        if have is None:
            return None
        if not isinstance(have, dict) or kind not in have:
            raise ValueError(f"sample field {where} is a {type(v).__name__} here and {have} elsewhere: the dataset "
                             "card cannot type it (give the field one type in its recipe)")
        return have[kind]

    def yaml_features(self) -> list[dict]:
        """dataset_info.features as the hub's YAML writes them (fields in the records' order)."""
        return [{"name": k, **_yaml(f)} for k, f in self.root["struct"].items()]


def _yaml(f: Any) -> dict:
    if f is None:
        return {"dtype": "null"}
    if isinstance(f, str):
        return {"dtype": f}
    if "struct" in f:
        return {"struct": [{"name": k, **_yaml(x)} for k, x in sorted(f["struct"].items())]}
    inner = _yaml(f["list"])
    return {"list": inner["dtype"] if "dtype" in inner else inner["struct"]}


def features_of(samples: Iterable[Any]) -> SampleFeatures:
    """The features of a build's samples (automon.schema.Sample: their JSON fields)."""
    feats = SampleFeatures()
    for s in samples:
        feats.add({k: getattr(s, k) for k in FIELDS})
    return feats


def hub_metadata(manifest: Mapping[str, Any], features: SampleFeatures | None, pretty_name: str) -> str:
    """The card's YAML block (between --- lines), or "" for a build without sample features."""
    if features is None:
        return ""
    import yaml

    counts = manifest["counts"]
    n = {split: sum(v for sub in counts.get(split, {}).values() for v in sub.values()) for split in ("test", "train")}
    licenses = sorted({HUB_LICENSES.get(o["license"].split(" ")[0].lower(), "unknown")
                       for o in manifest["sources"].values()})
    size = next((name for bound, name in _SIZES if sum(n.values()) < bound), "n>10M")
    block = {
        "pretty_name": pretty_name,
        "license": licenses,
        "language": ["en", "code"],
        "task_categories": ["text-classification"],
        "tags": ["llm-monitoring", "ai-safety", "sycophancy", "reward-hacking", "specification-gaming"],
        "size_categories": [size],
        "configs": [{"config_name": "default", "data_files": [{"split": s, "path": f"{s}.jsonl"} for s in n if n[s]]}],
        "dataset_info": {"features": features.yaml_features(),
                         "splits": [{"name": s, "num_examples": n[s]} for s in n if n[s]]},
    }
    return "---\n" + yaml.safe_dump(block, sort_keys=False, allow_unicode=True, width=1000) + "---\n"
