"""The torch-free runtime of an ONNX export: numpy, onnxruntime and, for raw text, sentencepiece
or sacremoses + subword-nmt.

- :mod:`.files`: the export's files (``config.json`` and its format version, the manifest,
  the graphs' sessions, the dictionaries);
- :mod:`.search`: :class:`BeamSearch`, fairseq's beam search in numpy over a small step
  interface (:class:`Step`): the one search of every backend;
- :mod:`.onnx_step`: :class:`OnnxStep`, the export's graphs as that step, and
  :class:`OnnxGenerator`, the search over them;
- :mod:`.translator`: :class:`OnnxTranslator` (text in, text out) and the command line;
- :mod:`.shortlist`: :class:`Shortlist`, the vocabulary shortlist;
- :mod:`.tokenizers`: sentencepiece, Moses + subword-nmt BPE.

Its own distribution (``pip install ./runtime``; ``runtime/pyproject.toml``), which imports
nothing of the plugin (relative imports only); the plugin imports it. ``lightcompress-export-onnx``
also copies it, file for file, into every export as the package ``runtime/`` beside a short
``translate.py`` that runs it, so ``python EXPORT/translate.py EXPORT < in > out`` needs nothing
installed but numpy and onnxruntime; installed, ``python -m lightcompress_runtime EXPORT`` and
``from lightcompress_runtime import OnnxTranslator`` run the same code.
"""

from .files import FORMAT, MANIFEST, VERSION, VERSIONS, OnnxError, load_config, sinusoid
from .onnx_step import OnnxGenerator, OnnxStep
from .search import BeamSearch, SearchError, Step
from .shortlist import SHORTLIST_HEADER, Shortlist, shortlist_text
from .translator import OnnxTranslator, left_pad_batches, main, split_lines

__all__ = [
    "FORMAT",
    "MANIFEST",
    "SHORTLIST_HEADER",
    "VERSION",
    "VERSIONS",
    "BeamSearch",
    "OnnxError",
    "OnnxGenerator",
    "OnnxStep",
    "OnnxTranslator",
    "SearchError",
    "Shortlist",
    "Step",
    "left_pad_batches",
    "load_config",
    "main",
    "shortlist_text",
    "sinusoid",
    "split_lines",
]
