"""Weight formats: the native format (safetensors and JSON), the original bilm-tf release
(options.json + hdf5), and ELMoForManyLangs' models.

A new format to read or write (ONNX export, another toolkit's checkpoints) goes here.
"""
