"""lightcompress: compressed Transformers for fairseq (a --user-dir plugin).

torch and fairseq are installed separately (see README and Makefile):
- torch first, pinned to a build that suits the machine (CPU: torch==2.13.0);
- fairseq from requirements/fairseq.txt with --no-deps (its torchaudio pin would pull a CUDA
  torch and is not needed for text models).
"""

from setuptools import find_packages, setup

setup(
    name="lightcompress",
    version="0.1.0",
    description="Compressed neural machine translation for fairseq: LightFormer, Hypoformer, "
    "Subformer, Smartformer and DA-WID as a fairseq --user-dir plugin",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    license="MIT",
    # the page of lightcompress-export-web (web/: its ES module, index.html and the npm pins of
    # its engine), installed as lightcompress/webpage
    packages=[*find_packages(include=["lightcompress", "lightcompress.*"]), "lightcompress.webpage"],
    package_dir={"lightcompress.webpage": "web"},
    package_data={
        "lightcompress.webpage": [
            "index.html", "lightcompress.mjs", "package.json", "package-lock.json", ".npmrc"
        ]
    },
    install_requires=[
        # the torch-free runtime of the ONNX exports, its own distribution in this repository
        # (runtime/): `make` installs it first (pip install ./runtime; or pip install ./runtime .)
        "lightcompress-runtime==0.1.0",
        # >= 2.6: every loader relies on torch.load's weights_only=True default (fairseq
        # checkpoints load through the plugin's allow-list, never with weights_only=False)
        "torch>=2.6",
        # fairseq itself (ve-fairseq==0.12.3, or the fallback fairseq-fixed==0.12.3.1) is not
        # listed: both declare torchaudio, which must not be resolved by pip. The Makefile
        # installs it with --no-deps; importing lightcompress without it raises a clear error.
        "hydra-core>=1.3.2,<1.4",
        "omegaconf>=2.3,<2.4",
        "numpy>=1.24",
        "regex",
        "sacrebleu>=2.0",
        "tqdm",
        "bitarray",
        "scikit-learn",
        "packaging",
        "cython",
        "cffi",
        "sentencepiece>=0.1.99",
        # raw text through a Moses + subword-nmt BPE model (lightcompress_runtime.tokenizers: the
        # ONNX export's translate.py and lightcompress-translate --bpe-codes)
        "sacremoses>=0.1",
        "subword-nmt>=0.3.8",
        "tensorly>=0.8",
        # deployment: the ONNX export and its runtime (CTranslate2 is the [ct2] extra)
        "onnx==1.23.2",
        "onnxruntime==1.32.0",
    ],
    # What only the plots, the summarization recipe's ROUGE, the CTranslate2 comparison and the
    # project's own experiments need; `make` installs all of it (requirements/lock.txt).
    # pip install "lightcompress[plots]"
    extras_require={
        # lightcompress-compress's report.png (left out, with a note, without matplotlib) and
        # scripts/plot_*.py; adjustText: readable point labels in scripts/plot_frontier.py
        "plots": ["matplotlib>=3.5", "adjustText>=1.0"],
        # examples/summarization/lightformer/score_rouge.py
        "rouge": ["rouge-score>=0.1.2"],
        # CTranslate2: lightcompress-export-ct2 and measure_speed --ct2 (without it: refused
        # with one line / no CTranslate2 rows, with a note); lightcompress-compress's teacher
        # on CTranslate2 int8
        "ct2": ["ctranslate2==4.8.5"],
        # the project's own experiments (lab/bench/, lab/results/): the
        # CTranslate2 comparison and the plots
        "bench": ["ctranslate2==4.8.5", "matplotlib>=3.5", "adjustText>=1.0"],
        "all": ["matplotlib>=3.5", "adjustText>=1.0", "rouge-score>=0.1.2", "ctranslate2==4.8.5"],
    },
    entry_points={
        "console_scripts": [
            "lightcompress-params=lightcompress.measure.params:cli_main",
            "lightcompress-convert=lightcompress.convert.cli:cli_main",
            "lightcompress-compress=lightcompress.compress:cli_main",
            "lightcompress-export-ct2=lightcompress.deploy.ct2:cli_main",
            "lightcompress-export-onnx=lightcompress.deploy.onnx_export:cli_main",
            "lightcompress-export-web=lightcompress.deploy.web_export:cli_main",
            "lightcompress-translate=lightcompress.deploy.torch_translator:cli_main",
            "lightcompress-shortlist=lightcompress.deploy.shortlist_build:cli_main",
            "lightcompress-densify=lightcompress.deploy.densify:cli_main",
        ],
    },
)
