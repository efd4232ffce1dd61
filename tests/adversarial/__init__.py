"""Adversarial candidates for the no-false-green regression tests (issue 22): each tries one way to pass while wrong, or to end a run with exit 0."""
