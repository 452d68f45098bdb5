"""The command line's commands are declared once (``loglake.cli.command.Command``, one module
per area) and their arguments checked before anything runs, each error naming its flag."""

import pytest

from loglake import cli


def test_every_command_is_declared_once_and_is_what_the_parser_offers():
    areas = [c.name for area in (cli.platform, cli.streams, cli.batch, cli.queries) for c in area.COMMANDS]
    assert len(areas) == len(set(areas)) == len(cli.ORDER)
    assert set(areas) == set(cli.ORDER) == set(cli.COMMANDS)
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    assert list(sub.choices) == list(cli.ORDER)


@pytest.mark.parametrize("argv, said", [
    (["produce", "job_views", "--count", "-1"], "--count must be >= 0, found -1"),
    (["produce", "job_views", "--count", "5", "--bad-fraction", "1.5"],
     "--bad-fraction must be within [0, 1], found 1.5"),
    (["produce", "job_views", "--count", "5", "--transactional", "--transaction-size", "0"],
     "--transaction-size must be >= 1 record, found 0"),
    (["produce", "job_views", "--count", "5", "--abort-every", "-2"], "--abort-every must be >= 0 (0: never abort)"),
    (["produce", "job_views", "--count", "5", "--rate", "0"], "--rate must be > 0 records/s, found 0.0"),
    (["speed", "run", "job_views"], "speed run needs --available-now"),
    (["audit", "job_views", "--sample", "-1"], "--sample must be >= 0, found -1"),
    (["diff", "job_views", "--partition", "0", "--from", "0", "--to", "5", "--sample", "-3"],
     "--sample must be >= 0, found -3"),
    (["demo", "--count", "-5"], "--count must be >= 0, found -5"),
])
def test_a_bad_argument_is_refused_before_anything_runs_naming_its_flag(argv, said, capsys, tmp_path):
    # No configuration exists at this --conf-dir: the check comes first, so it is never read.
    assert cli.main(["--conf-dir", str(tmp_path / "none"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("loglake: error: ") and said in err, err
