"""Pretraining a biLM on raw text: corpus -> vocab -> pretrain -> evaluate (see project.yml)."""
