"""The attack-time file of an output folder (`advjax.io.add_attack_time`)."""

import pytest
from conftest import case_record

from advjax.evaluation._attack_times import ATTACK_TIME_FILE, add_attack_time, untimed_records


def test_runs_before_the_time_file_leave_the_total_unknown_and_a_corrupt_file_is_named(tmp_path):
    """Records of an evaluation that attack_seconds.json does not time mean earlier runs went
    untimed: its total is unknown (never the last run's time passed off as the whole), and stays
    so; another evaluation in the same folder (another eps) is timed on its own; a corrupt file
    is an error that names it."""

    def records(*eps):
        return [case_record(model="m", eps=e) for e in eps]

    key = {"model": "m", "eps": 8 / 255, "norm": "linf", "version": "standard"}
    other = {**key, "eps": 4 / 255}
    assert not untimed_records(tmp_path, records(), key)
    assert not untimed_records(tmp_path, records(4 / 255), key), "another eps's records"
    assert untimed_records(tmp_path, records(8 / 255), key)
    runs = add_attack_time(tmp_path, key, 2.0, finished=True, untimed=True)
    assert [r["untimed_records_before"] for r in runs] == [True]
    assert not untimed_records(tmp_path, records(8 / 255), key), "timed from here on"
    runs = add_attack_time(tmp_path, key, 3.0, finished=True, untimed=False)
    assert runs[0]["untimed_records_before"], "the first run still says the total is unknown"
    add_attack_time(tmp_path, other, 1.5, finished=False, untimed=False)
    runs = add_attack_time(tmp_path, other, 2.5, finished=True, untimed=False)
    assert [r["seconds"] for r in runs] == [1.5, 2.5] and not runs[0]["untimed_records_before"]
    (tmp_path / ATTACK_TIME_FILE).write_text('{"runs": 3}')
    with pytest.raises(ValueError, match="attack_seconds.json is not an attack-time file"):
        untimed_records(tmp_path, records(), key)
