"""Where the text data is found."""

TEXT_DIR_ENV = "ADVJAX_TEXT_DIR"
