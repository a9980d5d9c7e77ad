"""Source readers: one spec per public dataset, read from local files or the Hugging Face hub.

`read_source(name, sources_cfg)` yields `Row`s whose `data` uses the LOCAL file's field names,
whichever backend read them (hub rows are mapped by the spec's `from_hub`), so recipes never care
where a row came from.
"""

from automon.sources.registry import SOURCES, SourceSpec  # noqa: F401
from automon.sources.read import Row, SourceError, read_source, source_origin  # noqa: F401
