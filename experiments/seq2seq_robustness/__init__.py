"""Attacks on Multi30k translation models (Michel et al., NAACL 2019)."""
