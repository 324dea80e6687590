"""The refusal tally trusts no name in its folder: it holds the folder and the log by descriptor,
follows no link, makes its counts file new, and counts only the statuses the front refuses with."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from webhooks.web import refusals


def _victim(tmp_path: Path) -> tuple[Path, tuple]:
    """A file outside the front's folder, and what must stay the same of it."""
    victim = tmp_path / "victim"
    victim.write_text("only its owner reads this: hunter2\n")
    victim.chmod(0o600)
    return victim, _state(victim)


def _state(path: Path) -> tuple:
    info = path.stat()
    return path.read_bytes(), stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid, info.st_mtime_ns


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    front = tmp_path / "front"
    front.mkdir(mode=0o710)
    return front


def _tally(folder: Path) -> refusals.Tally:
    return refusals.Tally(folder, lambda: None, lambda: [])


def test_only_the_statuses_the_front_refuses_with_are_counted(folder):
    (folder / "refused.log").write_text("400\nhunter2 413\n999\n\n431\n-rw\n400\n4")
    tally = _tally(folder)
    tally.step()
    tally.close()

    assert refusals.counts(folder) == {"400": 2, "413": 1, "431": 1}  # the unfinished "4" waits for its line
    assert "hunter2" not in (folder / "refusals.json").read_text()


def test_a_link_planted_for_the_counts_file_is_never_written_through(folder, tmp_path):
    victim, before = _victim(tmp_path)
    (folder / "refusals.json.new").symlink_to(victim)
    (folder / "refused.log").write_text("400\n")
    tally = _tally(folder)
    tally.step()
    tally.close()

    assert _state(victim) == before
    assert json.loads((folder / "refusals.json").read_text()) == {"400": 1}
    info = (folder / "refusals.json").lstat()
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o640
    assert not (folder / "refusals.json.new").exists() and not (folder / "refusals.json.new").is_symlink()


@pytest.mark.parametrize("planted", ["link", "fifo"])
def test_a_log_that_is_a_link_or_not_a_file_is_not_read(folder, tmp_path, planted):
    victim, before = _victim(tmp_path)
    log = folder / "refused.log"
    if planted == "link":
        log.symlink_to(victim)
    else:
        os.mkfifo(log)
    tally = _tally(folder)
    tally.step()  # a FIFO would block a reader that opened it for reading without O_NONBLOCK
    tally.close()

    assert _state(victim) == before
    assert refusals.counts(folder) == {}


def test_the_log_rotated_under_the_tally_is_read_to_its_end_by_descriptor(folder, monkeypatch):
    monkeypatch.setattr(refusals, "ROTATE_AT_BYTES", 8)
    log = folder / "refused.log"
    log.write_text("400\n403\n")
    reopened = []
    tally = refusals.Tally(folder, lambda: reopened.append(log.write_text("413\n")), lambda: [])
    tally.step()
    tally.step()
    tally.close()

    assert reopened and refusals.counts(folder) == {"400": 1, "403": 1, "413": 1}
    assert sorted(p.name for p in folder.iterdir()) == ["refusals.json", "refused.log"]
