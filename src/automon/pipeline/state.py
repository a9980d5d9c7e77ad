"""The pipeline's record of what it ran: `<state_dir>/pipeline_state.json`.

Per stage: the command, the stage's status when the pipeline asked (and why), and what the
pipeline did; the timings of the last run. A record only: whether a stage is current is always
the stage's own answer (automon.pipeline.stages), never read from here.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

STATE_FORMAT = "automon-pipeline-state-v2"
STATE_FILE = "pipeline_state.json"


class State:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, Any] = {"format": STATE_FORMAT, "stages": {}}
        if path.exists():
            try:
                d = json.loads(path.read_text())
                if d.get("format") == STATE_FORMAT:
                    self.data = d
                    self.data.setdefault("stages", {})
            except (OSError, ValueError):
                pass  # an unreadable record is started again; nothing depends on it

    @property
    def stages(self) -> dict[str, Any]:
        return self.data["stages"]

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.data["updated"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.path)
