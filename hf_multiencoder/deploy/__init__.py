"""What turns a trained multi-encoder into something deployed: the ONNX export and its onnxruntime runner
(`deploy.onnx`), and the demo page (`deploy.demo`). Each module imports its optional dependencies (onnx, onnxruntime,
gradio) only when used, so that the package itself never needs them."""
