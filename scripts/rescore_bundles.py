"""Rescore submission bundles with this harness's scoring recipe (`leaderboard.scoring.SCORING`),
from their own episodes, then rebuild the boards. Episodes and manifests are not touched, so their
checksums still hold; only submission.json's scores and README.md change.

    python scripts/rescore_bundles.py [BUNDLE ...]     # default: every bundle under leaderboards/
"""

from __future__ import annotations

import sys
from pathlib import Path

from ibrl_bench.leaderboard.board import build_board, write_board
from ibrl_bench.leaderboard.bundle import rescore_bundle
from ibrl_bench.leaderboard.track import load_track


def main(argv: list[str]) -> None:
    bundles = [Path(a) for a in argv] or sorted(Path("leaderboards").glob("*/*/submissions/*/"))
    tracks = set()
    for folder in bundles:
        sub = rescore_bundle(folder)
        tracks.add(sub.track.id)
        print(f"rescored {folder} (scoring {sub.scores.scoring})")
    for track_id in sorted(tracks):
        track = load_track(track_id)
        write_board(build_board(track), track)
        print(f"rebuilt the board of {track_id}")


if __name__ == "__main__":
    main(sys.argv[1:])
