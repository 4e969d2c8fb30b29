"""`leaderboard verify`: check a bundle from its files alone, recomputing every number.

Two kinds of failure, kept apart:
- refused (`BundleRefused`, one line): the bundle is unsafe or malformed (a path leaving the
  folder, a symlink, a file over its cap, invalid JSON or gzip, a record that is not an episode);
  nothing in it is used;
- rejected (a `Verdict` with problems): a well-formed bundle whose content does not hold up; each
  problem names the episode or metric and what differs.

Checks, in order: the files' checksums; the track named is the current version of the track; the
run manifest is the track's suite; every episode is on the track (domain, policy, counterpart,
role, seed, scenario and its hash, the card hashes, its key) and appears once, finished; every
scenario x seed x counterpart x role is there; each episode replays to its recorded outcome under
the domain's rules (scripted seats re-asked move by move); the counts and every metric with its
interval recompute to what submission.json states.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from pathlib import Path

from pydantic import BaseModel, ValidationError

from ibrl_bench.agents.spec import build_agent, parse_spec
from ibrl_bench.domains import get_domain
from ibrl_bench.leaderboard import files
from ibrl_bench.leaderboard.bundle import FORMAT, Counts, Submission
from ibrl_bench.leaderboard.files import BundleRefused
from ibrl_bench.leaderboard.replay import replay
from ibrl_bench.leaderboard.scoring import SCORING, entry_scores
from ibrl_bench.leaderboard.track import Track, available_tracks, check_pins, load_track, track_scenarios
from ibrl_bench.runner.crossplay import episode_key
from ibrl_bench.runner.store import EpisodeRecord, Manifest

TOLERANCE = 1e-9


class Verdict(BaseModel):
    bundle: str
    ok: bool
    problems: list[str]
    submission: Submission
    track: str
    n_episodes: int = 0


def _invalid(root: Path, name: str, e: ValidationError) -> BundleRefused:
    err = e.errors()[0]
    where = ".".join(str(x) for x in err["loc"]) or "top level"
    return BundleRefused(f"refused {root}: {name}: {where}: {err['msg']}")


def read_submission(root: Path) -> Submission:
    raw = files.read_json(root, files.SUBMISSION)
    if isinstance(raw, dict) and raw.get("format") != FORMAT:
        raise BundleRefused(f"refused {root}: {files.SUBMISSION} has format {raw.get('format')!r}; this harness "
                            f"reads format {FORMAT}")
    try:
        return Submission.model_validate(raw)
    except ValidationError as e:
        raise _invalid(root, files.SUBMISSION, e) from None


def read_episodes(root: Path, name: str) -> list[EpisodeRecord]:
    out = []
    for lineno, line in files.gz_lines(root, name):
        if not line.strip():
            continue
        try:
            out.append(EpisodeRecord.model_validate_json(line))
        except ValidationError as e:
            first = e.errors()[0]
            raise BundleRefused(f"refused {root}: {name} line {lineno} is not an episode record "
                                f"({'.'.join(str(x) for x in first['loc'])}: {first['msg']})") from None
    return out


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=TOLERANCE)


def _interval_problem(what: str, stated, recomputed) -> str | None:
    for field in ("estimate", "low", "high"):
        if not _same(getattr(stated, field), getattr(recomputed, field)):
            return f"{what}: submission.json states {stated.format(4)}, the episodes give {recomputed.format(4)}"
    if (stated.n, stated.n_clusters, stated.method) != (recomputed.n, recomputed.n_clusters, recomputed.method):
        return f"{what}: submission.json states n={stated.n} ({stated.method}), the episodes give n={recomputed.n}"
    return None


def expected_identity(track: Track, sub: Submission) -> dict:
    """The parts of the run manifest's identity that make it this track's suite."""
    return {
        "domain": track.domain, "split": track.split, "n_scenarios": track.scenarios.n,
        "scenario_set": track.scenarios.hash, "policies": [sub.policy],
        "counterparts": track.counterparts + ([sub.train_counterpart] if sub.train_counterpart else []),
        "roles": track.roles, "seeds": list(range(track.seeds)), "max_turns": track.max_turns,
    }


def _deterministic(spec: str) -> bool:
    """Agents the verifier can ask again and get the same move: scripted ones (or cards for them)."""
    parsed = parse_spec(spec)
    if parsed.kind == "card":
        from ibrl_bench.agents.cards import load_card

        return load_card(parsed.target).backend == "scripted"
    return parsed.kind == "scripted"


def verify_bundle(path: str | Path, root: Path | None = None) -> Verdict:
    folder = files.bundle_folder(path)
    sub = read_submission(folder)
    problems: list[str] = []

    def verdict(n: int = 0) -> Verdict:
        return Verdict(bundle=str(path), ok=not problems, problems=problems, submission=sub, track=sub.track.id, n_episodes=n)

    for key in ("episodes", "manifest"):
        if key not in sub.files:
            raise BundleRefused(f"refused {folder}: {files.SUBMISSION} lists no {key} file")
        entry = sub.files[key]
        files.member(folder, entry.path)  # refuses a path that leaves the folder, before any reading
        if files.sha256(folder, entry.path) != entry.sha256:
            problems.append(f"{entry.path}: its sha256 differs from the one in {files.SUBMISSION} "
                            "(the file changed after submission)")
    if sub.track.id not in available_tracks(root):
        problems.append(f"track {sub.track.id!r} is not a track of this leaderboard ({', '.join(available_tracks(root))})")
        return verdict()
    track = load_track(sub.track.id, root)
    if (sub.track.version, sub.track.hash) != (track.version, track.hash):
        problems.append(f"the bundle is for track {track.id} version {sub.track.version} (hash {sub.track.hash}), "
                        f"but the track is now version {track.version} (hash {track.hash}); resubmit on the current track")
        return verdict()
    check_pins(track)

    try:
        manifest = Manifest.model_validate(files.read_json(folder, sub.files["manifest"].path))
    except ValidationError as e:
        raise _invalid(folder, sub.files["manifest"].path, e) from None
    want = expected_identity(track, sub)
    for k, v in want.items():
        if manifest.identity.get(k) != v:
            problems.append(f"manifest.json: {k} is {manifest.identity.get(k)!r}, the track's suite has {v!r}")

    records = read_episodes(folder, sub.files["episodes"].path)
    problems += _check_episodes(track, sub, records)
    if problems:
        return verdict(len(records))

    counts = Counts(episodes=len(records), cells=len({(r.counterpart, r.policy_role) for r in records}),
                    scenarios=len({r.scenario_id for r in records}), seeds=len({r.seed for r in records}))
    if counts != sub.counts:
        problems.append(f"counts: submission.json states {sub.counts.model_dump()}, the episodes give {counts.model_dump()}")
    if sub.scores.scoring != SCORING:
        problems.append(f"scores: submission.json was scored with scoring version {sub.scores.scoring}, this harness "
                        f"scores with version {SCORING}; rescore it with scripts/rescore_bundles.py")
        return verdict(len(records))
    scores = entry_scores(records, track, sub.train_counterpart)
    for metric, summary in scores.metrics.items():
        stated = sub.scores.metrics.get(metric)
        if stated is None:
            problems.append(f"metric {metric}: missing from submission.json")
            continue
        problems += filter(None, [_interval_problem(f"metric {metric} overall", stated.overall, summary.overall)])
        for c, iv in summary.per_counterpart.items():
            if c not in stated.per_counterpart:
                problems.append(f"metric {metric} vs {c}: missing from submission.json")
            else:
                problems += filter(None, [_interval_problem(f"metric {metric} vs {c}", stated.per_counterpart[c], iv)])
    if (scores.mismatch is None) != (sub.scores.mismatch is None):
        problems.append("mismatch: stated and recomputed disagree on whether there is one")
    elif scores.mismatch is not None:
        problems += filter(None, [_interval_problem("mismatch", sub.scores.mismatch, scores.mismatch)])
    return verdict(len(records))


def _check_episodes(track: Track, sub: Submission, records: list[EpisodeRecord]) -> list[str]:
    domain = get_domain(track.domain)
    scenarios = {s.id: s for s in track_scenarios(track).scenarios}
    counterparts = track.counterparts + ([sub.train_counterpart] if sub.train_counterpart else [])
    card_of = {m.spec: m.card_hash for m in track.panel}
    if sub.train_counterpart:
        card_of[sub.train_counterpart] = None
        parsed = parse_spec(sub.train_counterpart)
        if parsed.kind == "card":
            from ibrl_bench.agents.cards import load_card

            card_of[sub.train_counterpart] = load_card(parsed.target).hash
    card_of[sub.policy] = sub.model.get("card_hash")
    problems: list[str] = []
    seen: Counter = Counter()
    to_replay = []
    for r in records:
        where = f"episode {r.key} ({r.counterpart}, role {r.policy_role}, {r.scenario_id}, seed {r.seed})"
        other = domain.other(r.policy_role) if r.policy_role in domain.roles else None
        if r.domain != track.domain or r.policy != sub.policy:
            problems.append(f"{where}: domain {r.domain} / policy {r.policy} are not the track's / the submission's")
        elif r.counterpart not in counterparts:
            problems.append(f"{where}: counterpart {r.counterpart} is not in the track's panel")
        elif r.policy_role not in track.roles or r.seed not in range(track.seeds):
            problems.append(f"{where}: role {r.policy_role} / seed {r.seed} are not in the track")
        elif r.agents != {r.policy_role: r.policy, other: r.counterpart}:
            problems.append(f"{where}: seats {r.agents} do not match its policy and counterpart")
        elif r.scenario_id not in scenarios:
            problems.append(f"{where}: scenario {r.scenario_id} is not in the track's scenario set")
        elif r.scenario_hash != scenarios[r.scenario_id].hash:
            problems.append(f"{where}: scenario hash {r.scenario_hash} differs from the track's "
                            f"{scenarios[r.scenario_id].hash} (the scenario was swapped or edited)")
        elif r.key != episode_key(r.policy, r.counterpart, r.policy_role, r.scenario_id, r.seed):
            problems.append(f"{where}: its key does not match its policy, counterpart, role, scenario and seed")
        elif r.outcome.status == "error":
            problems.append(f"{where}: ended in an infrastructure error; rerun submit to retry it before submitting")
        elif (r.cards.get(other), r.cards.get(r.policy_role)) != (card_of[r.counterpart], card_of[r.policy]):
            problems.append(f"{where}: card hashes {r.cards} differ from the pinned "
                            f"{ {other: card_of[r.counterpart], r.policy_role: card_of[r.policy]} }")
        else:
            to_replay.append(r)
        seen[(r.counterpart, r.policy_role, r.scenario_id, r.seed)] += 1
    for (c, role, sid, seed), n in seen.items():
        if n > 1:
            problems.append(f"{n} episodes of {c}, role {role}, {sid}, seed {seed}: one attempt per scenario and seed")
    wanted = [(c, role, sid, seed) for c in counterparts for role in track.roles for sid in scenarios
              for seed in range(track.seeds)]
    missing = [w for w in wanted if w not in seen]
    if missing:
        c, role, sid, seed = missing[0]
        problems.append(f"{len(missing)} episodes of the suite are missing, e.g. {c}, role {role}, {sid}, seed {seed}")
    cells = Counter((r.counterpart, r.policy_role) for r in records if r.outcome.status != "error")
    for c in track.counterparts:
        for role in track.roles:
            if cells[(c, role)] < track.min_episodes_per_cell:
                problems.append(f"cell {c}, role {role}: {cells[(c, role)]} episodes, the track needs "
                                f"{track.min_episodes_per_cell}")
    problems += asyncio.run(_replay_all(domain, scenarios, to_replay, track.max_turns, sub.policy, counterparts))
    return problems


async def _replay_all(domain, scenarios, records, max_turns, policy, counterparts) -> list[str]:
    agents = {spec: build_agent(spec, domain.name) for spec in dict.fromkeys([policy, *counterparts])
              if _deterministic(spec)}
    problems = []
    try:
        for r in records:
            seats = {role: agents[spec] for role, spec in r.agents.items() if spec in agents}
            found = await replay(domain, scenarios[r.scenario_id], r, max_turns, seats)
            if found:
                problems.append(f"episode {r.key} ({r.counterpart}, role {r.policy_role}, {r.scenario_id}, "
                                f"seed {r.seed}): {found}")
    finally:
        await asyncio.gather(*(a.aclose() for a in agents.values()), return_exceptions=True)
    return problems
