from setuptools import find_packages, setup

setup(
    name="hf_multiencoder",
    version="0.1.0",
    description="Tune several pretrained Hugging Face encoders together as one model (concat / DME / CDME fusion).",
    long_description=open("README.md", encoding="utf-8").read() if __import__("os").path.exists("README.md") else "",
    long_description_content_type="text/markdown",
    packages=find_packages(include=["hf_multiencoder", "hf_multiencoder.*"]),
    package_data={"hf_multiencoder.training": ["model_card_template.md", "seeds_card_template.md"]},
    python_requires=">=3.10",
    install_requires=[
        "torch>=2.4",
        "transformers>=5.0,<6",
        "datasets>=3.0",
        "evaluate>=0.4",
        "accelerate>=1.0",
        "safetensors>=0.4",
        "huggingface_hub>=1.0",
        "seqeval>=1.2",
        "PyYAML>=6.0",
        "scipy>=1.10",
        "scikit-learn>=1.3",
        "xxhash>=3.0",  # feature-cache fingerprints (also a dependency of datasets)
    ],
    extras_require={
        "dev": ["pytest>=8", "pytest-xdist>=3.5", "ruff>=0.5", "tensorboard>=2.14", "playwright>=1.45"],
        "tensorboard": ["tensorboard>=2.14"],
        "plot": ["matplotlib>=3.7"],
        "peft": ["peft>=0.13"],  # LoRA on the members (hf_multiencoder.training.lora, run_glue_multi.py --lora_r)
        "sentence-transformers": ["sentence-transformers>=6.0,<7"],
        # ONNX export and onnxruntime inference (hf_multiencoder.deploy.onnx); onnxscript: torch's exporter
        "onnx": ["onnx>=1.16", "onnxruntime>=1.18", "onnxscript>=0.2"],
        # the demo page (space/app.py; playwright, in the dev extra, drives Debian's chromium in its test)
        "demo": ["gradio>=5.0"],
        "docs": ["mkdocs>=1.6", "mkdocs-material>=9.5", "mkdocstrings[python]>=0.26"],  # make docs
    },
)
