"""advjax for text: sentence classifiers and translation models under word- and
character-level attacks, evaluated with the same evidence discipline as the image study.

Data is found through a flag or the ``ADVJAX_TEXT_DIR`` environment variable (a folder
laid out like ``../shared/data/text``), never a path written into the code.
"""

TEXT_DIR_ENV = "ADVJAX_TEXT_DIR"
