"""`leaderboard verify`: check a bundle from its files alone, recomputing every number.

Two kinds of failure, kept apart:
- refused (`BundleRefused`, one line): the bundle is unsafe or malformed (a path leaving the
  folder, a symlink, a file over its cap, invalid JSON or gzip, a record that is not an episode);
  nothing in it is used;
- rejected (a `Verdict` with problems): a well-formed bundle whose content does not hold up; each
  problem names the episode or metric and what differs.

Checks, in order: the files' checksums; the track named is the current version of the track; the
policy and the declared training counterpart are not members of the track's panel; the declared
model identity fits the policy's spec (and matches local weights where they are here); the run
manifest is the track's suite; every episode is on the track (domain, policy, counterpart, role,
seed, scenario and its hash, the card hashes, its key) and appears once, finished; every scenario
x seed x counterpart x role is there; each episode replays to its recorded outcome under the
domain's rules, with every deterministic seat re-asked move by move (`seat_plan`); the counts and
every metric with its interval recompute to what submission.json states.

Reading is bounded before anything is parsed: the episodes are streamed, and reading stops at the
track's planned number of lines, a line over its cap, inflated bytes over their cap, or JSON
nested past a depth limit (`files.py`).
"""

from __future__ import annotations

import asyncio
import importlib.util
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
from ibrl_bench.leaderboard.scoring import SCORING_VERSION, entry_scores
from ibrl_bench.leaderboard.track import Track, available_tracks, check_pins, load_track, panel_member, track_scenarios
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
    # spec -> "re-asked", or "not re-asked: why" (an API model, sampled decoding, weights not here)
    seats: dict[str, str] = {}


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


def read_episodes(root: Path, name: str, max_lines: int | None = None) -> list[EpisodeRecord]:
    out = []
    for lineno, line in files.gz_lines(root, name, max_lines):
        if not line.strip():
            continue
        where = f"refused {root}: {name} line {lineno}"
        depth = files.json_depth(line)
        if depth > files.MAX_DEPTH:
            raise BundleRefused(f"{where} nests JSON {depth:,} levels deep, over the limit of {files.MAX_DEPTH}")
        try:
            out.append(EpisodeRecord.model_validate_json(line))
        except ValidationError as e:
            first = e.errors()[0]
            raise BundleRefused(f"{where} is not an episode record "
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


REASKED = "re-asked"


def seat_plan(spec: str, declared: dict[str, str] | None = None) -> tuple[bool, str]:
    """Whether the verifier can ask the agent behind `spec` again and must get the same moves, and
    why not when it cannot. Deterministic: scripted agents (and cards of them), and local models
    (`hf:`, `vllm:`) decoding greedily from weights pinned by a checksum or a package version that
    match what is here. `declared` is the model identity a submission states for its policy."""
    from ibrl_bench.leaderboard.bundle import model_identity

    parsed = parse_spec(spec)
    if parsed.kind == "card":
        from ibrl_bench.agents.cards import load_card

        card = load_card(parsed.target)
        if card.backend == "scripted":
            return True, REASKED
        local, why = _decodes_greedily_here(card.backend, card.params)
        if not local:
            return False, why
        here = model_identity(card.spec(), "")
        pin = here.get("package") or here.get("weights_sha256")
        if not pin or (card.revision and here.get("package") and card.revision != here["package"]):
            return False, f"not re-asked: weights here ({pin or 'none'}) are not the card's {card.revision}"
        return True, REASKED
    if parsed.kind == "scripted":
        return True, REASKED
    local, why = _decodes_greedily_here(parsed.kind, parsed.params)
    if not local:
        return False, why
    here = model_identity(spec, "")
    if not (here.get("weights_sha256") or here.get("package")):
        return False, "not re-asked: the weights are not here"
    if declared is not None and here != declared:
        return False, "not re-asked: the weights here differ from the declared ones"
    return True, REASKED


def _decodes_greedily_here(kind: str, params: dict) -> tuple[bool, str]:
    """Whether a seat of this backend kind and parameters is a local model decoding greedily that
    can run here (the weights are checked by the caller), and why not."""
    if kind not in ("hf", "vllm"):
        return False, f"not re-asked: {'plugin code' if kind == 'python' else kind + ' API model'}"
    if float(params.get("temperature", 0) or 0) > 0:
        return False, "not re-asked: sampled decoding"
    if kind == "vllm" and importlib.util.find_spec("vllm") is None:
        return False, "not re-asked: vLLM is not installed here"
    if kind == "hf" and any(importlib.util.find_spec(m) is None for m in ("torch", "transformers")):
        return False, "not re-asked: torch and transformers (the [hf] extra) are not installed here"
    return True, ""


# The fields a model identity may hold, per kind of policy spec (bundle.model_identity writes them).
IDENTITY_FIELDS = {
    "scripted": {"harness_version"}, "card": {"card_hash"}, "python": {"module_sha256"},
    "hf": {"package", "weights_sha256", "adapter_sha256", "hub_id", "revision"},
}


def identity_problem(sub: Submission) -> str | None:
    """The declared model identity must be of the policy's kind, with that kind's fields, and where
    it can be computed here (a card, local weights that are here), the same."""
    from ibrl_bench.leaderboard.bundle import model_identity

    kind = parse_spec(sub.policy).kind
    if sub.model.get("kind") != kind:
        return (f"model identity: kind {sub.model.get('kind')!r} does not fit the policy {sub.policy} "
                f"(a {kind} spec)")
    allowed = IDENTITY_FIELDS.get("hf" if kind == "vllm" else kind, {"model"})
    extra = sorted(set(sub.model) - allowed - {"kind"})
    if extra:
        return f"model identity: fields {extra} do not fit a {kind} policy (it may state {sorted(allowed)})"
    here = model_identity(sub.policy, "")
    pinned = kind == "card" or (kind in ("hf", "vllm") and (here.get("weights_sha256") or here.get("package")))
    if pinned and here != sub.model:
        return (f"model identity: the policy's spec gives {here} here, the bundle declares {sub.model}; "
                "the spec names another model than was submitted")
    return None


def verify_bundle(path: str | Path, root: Path | None = None) -> Verdict:
    folder = files.bundle_folder(path)
    sub = read_submission(folder)
    problems: list[str] = []
    seat_notes: dict[str, str] = {}

    def verdict(n: int = 0) -> Verdict:
        return Verdict(bundle=str(path), ok=not problems, problems=problems, submission=sub, track=sub.track.id,
                       n_episodes=n, seats=seat_notes)

    for key in ("episodes", "manifest"):
        if key not in sub.files:
            raise BundleRefused(f"refused {folder}: {files.SUBMISSION} lists no {key} file")
        entry = sub.files[key]
        files.member(folder, entry.path)  # refuses a path that leaves the folder, before any reading
        if files.sha256(folder, entry.path) != entry.sha256:
            problems.append(f"{entry.path}: its sha256 differs from the one in {files.SUBMISSION} "
                            "(the file changed after submission)")
    if sub.track.id not in available_tracks(root):
        problems.append(f"track {sub.track.id!r} is not a track of this leaderboard "
                        f"({', '.join(available_tracks(root))})")
        return verdict()
    track = load_track(sub.track.id, root)
    if (sub.track.version, sub.track.hash) != (track.version, track.hash):
        problems.append(f"the bundle is for track {track.id} version {sub.track.version} (hash {sub.track.hash}), "
                        f"but the track is now version {track.version} (hash {track.hash}); "
                        "resubmit on the current track")
        return verdict()
    check_pins(track)
    if sub.scoring != SCORING_VERSION:
        problems.append(f"the bundle was scored under scoring version {sub.scoring}, this harness scores under "
                        f"{SCORING_VERSION}; re-score it: ibrl-bench leaderboard rescore {path}")
        return verdict()
    for what, spec in (("the policy", sub.policy), ("the declared training counterpart", sub.train_counterpart)):
        member = panel_member(track, spec) if spec else None
        if member:
            problems.append(f"{what} {spec} is the track's panel member {member}: no held-out score there")
    problems += filter(None, [identity_problem(sub)])
    if problems:
        return verdict()

    try:
        manifest = Manifest.model_validate(files.read_json(folder, sub.files["manifest"].path))
    except ValidationError as e:
        raise _invalid(folder, sub.files["manifest"].path, e) from None
    want = expected_identity(track, sub)
    for k, v in want.items():
        if manifest.identity.get(k) != v:
            problems.append(f"manifest.json: {k} is {manifest.identity.get(k)!r}, the track's suite has {v!r}")

    planned = len(want["counterparts"]) * len(track.roles) * track.scenarios.n * track.seeds
    records = read_episodes(folder, sub.files["episodes"].path, max_lines=planned)
    seats = {spec: seat_plan(spec, sub.model if spec == sub.policy else None)
             for spec in dict.fromkeys([sub.policy, *want["counterparts"]])}
    seat_notes.update({spec: note for spec, (_, note) in seats.items()})
    problems += _check_episodes(track, sub, records, [spec for spec, (ok, _) in seats.items() if ok])
    if problems:
        return verdict(len(records))

    counts = Counts(episodes=len(records), cells=len({(r.counterpart, r.policy_role) for r in records}),
                    scenarios=len({r.scenario_id for r in records}), seeds=len({r.seed for r in records}))
    if counts != sub.counts:
        problems.append(f"counts: submission.json states {sub.counts.model_dump()}, "
                        f"the episodes give {counts.model_dump()}")
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


def _check_episodes(track: Track, sub: Submission, records: list[EpisodeRecord], reask: list[str]) -> list[str]:
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
    if problems:  # a bundle that is not the track's suite is not worth loading models for
        return problems
    return asyncio.run(_replay_all(domain, scenarios, to_replay, track.max_turns, reask))


REPLAY_CONCURRENCY = 16  # episodes replayed at once, so that a local model's moves are batched


async def _replay_all(domain, scenarios, records, max_turns, reask: list[str]) -> list[str]:
    agents = {spec: build_agent(spec, domain.name).agent for spec in reask}
    gate = asyncio.Semaphore(REPLAY_CONCURRENCY)

    async def one(r: EpisodeRecord) -> str | None:
        async with gate:
            seats = {role: agents[spec] for role, spec in r.agents.items() if spec in agents}
            found = await replay(domain, scenarios[r.scenario_id], r, max_turns, seats)
        if found:
            return f"episode {r.key} ({r.counterpart}, role {r.policy_role}, {r.scenario_id}, seed {r.seed}): {found}"
        return None

    try:
        return [p for p in await asyncio.gather(*(one(r) for r in records)) if p]
    finally:
        await asyncio.gather(*(a.aclose() for a in agents.values()), return_exceptions=True)
