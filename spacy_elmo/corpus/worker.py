"""What one worker does, here or in a Ray actor: load the pipeline once, then embed blocks, each
read from the input on its own and written atomically as its file of the output folder."""

from __future__ import annotations

import os
import resource
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional

from ..files import atomic_write
from .blocks import Block, read_block
from .hdf5_output import tokens_in, write_embeddings
from .output_folder import block_file
from .settings import EmbedSettings

if TYPE_CHECKING:
    from spacy.language import Language


def load_pipeline(settings: EmbedSettings, gpu_id: int = -1, allocator: Optional[str] = None) -> Language:
    """The pipeline, on GPU ``gpu_id`` (-1: the CPU; ``allocator``: thinc's there, see
    ``gpus.use_gpu``), its elmo components writing every layer in float32 (the files hold every
    layer, exact), in ``settings.precision`` where given."""
    from ..pipeline.component import Elmo
    from .gpus import use_gpu

    use_gpu(gpu_id, allocator)
    overrides: Dict[str, Any] = {"store": "layers", "store_dtype": "float32"}
    if settings.precision is not None:
        overrides["precision"] = settings.precision
    nlp = _pipeline(settings, overrides)
    if not any(isinstance(pipe, Elmo) for _, pipe in nlp.pipeline):
        raise ValueError(f"The pipeline has no 'elmo' component (it has {nlp.pipe_names}).")
    return nlp


def _pipeline(settings: EmbedSettings, elmo_settings: Dict[str, Any]) -> Language:
    """The pipeline of ``settings`` with ``elmo_settings`` given to its elmo components at load."""
    import spacy

    from ..pipeline.assembly import assemble_pipeline, elmo_component_names
    from ..weights.native import CONFIG_FILE

    if settings.weights is not None:
        return assemble_pipeline(settings.weights, settings.lang, elmo_config=elmo_settings)
    assert settings.pipeline is not None  # _check: a pipeline where no weights are given
    path = Path(settings.pipeline)
    if (path / CONFIG_FILE).is_file() and not (path / "config.cfg").is_file():
        raise ValueError(f"{path} is a biLM directory, not a spaCy pipeline: pass it as --weights {path}.")
    names = elmo_component_names(settings.pipeline)
    return spacy.load(settings.pipeline, config={"components": {name: elmo_settings for name in names}})


def embed_block(
    nlp: Language, block: Block, output: Path, settings: EmbedSettings, on_line: Callable[[], None] = lambda: None
) -> Dict[str, Any]:
    """Read, embed and write one block, atomically; its figures. A block whose file exists (a task
    retried after its worker died past the rename) is left as it is: ``written`` False.
    ``on_line``: called after each line embedded (progress)."""
    started, path = time.perf_counter(), block_file(output, block.number)
    written = not path.is_file()
    tokens = _write_block(nlp, block, path, settings, on_line) if written else tokens_in(path)
    return {
        "block": block.number,
        "lines": block.lines,
        "tokens": tokens,
        "written": written,
        "seconds": time.perf_counter() - started,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }


def _write_block(nlp: Language, block: Block, path: Path, settings: EmbedSettings, on_line: Callable[[], None]) -> int:
    """The block's file, written atomically; its token count."""
    lines, tokens = read_block(block, settings.text_column), []
    atomic_write(
        path,
        lambda temporary: tokens.append(
            write_embeddings(
                nlp,
                lines,
                temporary,
                block.first_line,
                settings.layers,
                settings.tokenized,
                settings.batch_size,
                on_line=on_line,
                store_tokens=settings.store_tokens,
            )
        ),
    )
    return tokens[0]
