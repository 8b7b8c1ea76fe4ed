"""Evaluation: the evaluator and its dataset export."""
