"""Tables and figures of the study, built from results.json and the attack records."""


def write_report(results: dict, out) -> None:
    """Placeholder until the report lands."""
