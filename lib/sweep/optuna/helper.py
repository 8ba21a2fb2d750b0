# kiln's Optuna helper: one Python process per sweep, started by the `optuna` sweeper
# (lib/sweep/optuna/sweeper.cc) and embedded in kiln at build time. It reads one JSON request per
# line on stdin and answers each with one JSON line on stdout:
#   {"op": "open", ...}          -> create or load the study; fail trials a dead sweep left RUNNING
#   {"op": "ask"}                -> {"number", "params": [{"key", "value", "index"}]} or {"full": true}
#   {"op": "tell", "number", "state", "values", "attrs"}
#   {"op": "report", "number", "step", "value"}
#   {"op": "should_prune", "number"} -> {"prune": bool}
#   {"op": "trials"}             -> every trial of the study but those asked past n_trials, and the best ones
#   {"op": "load", "storage", "study_name"} -> an existing study, read only (for kiln report)
# An error is {"error": KIND, "message": TEXT}. Optuna owns the study; this file is only glue.
import json
import math
import os
import signal
import socket
import sys
import threading


def reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


try:
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
    from optuna.trial import TrialState
except ImportError as e:
    reply({"error": "optuna-missing", "message": str(e)})
    sys.exit(3)

optuna.logging.set_verbosity(optuna.logging.WARNING)

PARENT = os.getppid()


def die_with_parent():
    # The helper ends with the sweep's kiln process, even one killed mid-request (the end of
    # stdin ends it too, between requests).
    try:
        import ctypes
        import signal
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass
    if os.getppid() != PARENT:  # the parent ended before prctl
        sys.exit(0)


die_with_parent()
OWNER = "%s:%d" % (socket.gethostname(), PARENT)
lock = threading.Lock()
state = {"study": None, "storage": None, "n_trials": 0, "space": {}, "running": {}}


class BadInput(Exception):
    pass


def distribution(spec):
    kind = spec["type"]
    if kind == "float":
        return FloatDistribution(spec["low"], spec["high"], log=spec.get("log", False), step=spec.get("step"))
    if kind == "int":
        return IntDistribution(spec["low"], spec["high"], log=spec.get("log", False), step=spec.get("step") or 1)
    return CategoricalDistribution(spec["choices"])


def grid_space(space):
    grid = {}
    for key, dist in space.items():
        if isinstance(dist, CategoricalDistribution):
            grid[key] = list(dist.choices)
        elif isinstance(dist, IntDistribution) and not dist.log:
            grid[key] = list(range(dist.low, dist.high + 1, dist.step))
        else:
            raise BadInput("the grid sampler needs choice() or range() for every parameter; '%s' is an interval" % key)
    return grid


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# The abandon reason of a trial asked once the study had n_trials (two processes asked at the same
# moment): it never ran, and the trial list leaves it out.
PAST_N_TRIALS = "n_trials reached"


def counted(trial):
    # Trials a dead sweep left RUNNING (failed by the next one) do not use up n_trials.
    return trial.state != TrialState.WAITING and "kiln:abandoned" not in trial.system_attrs


class PerTrialSeed(optuna.samplers.BaseSampler):
    """A seeded sampler whose random stream is drawn anew for each trial from (seed, trial number).

    Processes that share a study with the same seed would otherwise draw the same parameters (their
    samplers' streams are equal, and so is the history they see). Trial numbers are unique in a
    study, so the streams differ, and one process that asks one trial at a time stays reproducible.
    QMCSampler is not wrapped: it indexes its sequence by trial number already."""

    def __init__(self, cls, kwargs):
        self._cls, self._kwargs, self._seed = cls, kwargs, int(kwargs["seed"])
        self._inner = cls(**kwargs)
        self.last_seed = None

    def before_trial(self, study, trial):
        import numpy
        self.last_seed = int(numpy.random.SeedSequence([self._seed, trial.number]).generate_state(1)[0] >> 1)
        self._inner = self._cls(**dict(self._kwargs, seed=self.last_seed))
        self._inner.before_trial(study, trial)

    def infer_relative_search_space(self, study, trial):
        return self._inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        return self._inner.sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self._inner.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study, trial, state, values):
        self._inner.after_trial(study, trial, state, values)

    def reseed_rng(self):
        self._inner.reseed_rng()


def make_sampler(cls_name, kwargs):
    cls = getattr(optuna.samplers, cls_name)
    if kwargs.get("seed") is not None and cls_name != "QMCSampler":
        cls(**kwargs)  # bad options fail here, as they would unwrapped
        return PerTrialSeed(cls, kwargs)
    return cls(**kwargs)


def op_open(req):
    space = {k: distribution(v) for k, v in req["space"].items()}
    sampler_spec, pruner_spec = req["sampler"], req["pruner"]
    kwargs = dict(sampler_spec["kwargs"])
    if sampler_spec["class"] == "GridSampler" and kwargs.get("search_space") is None:
        kwargs["search_space"] = grid_space(space)
    try:
        sampler = make_sampler(sampler_spec["class"], kwargs)
    except (TypeError, ValueError) as e:
        raise BadInput("hydra.sweeper.sampler (%s): %s" % (sampler_spec["class"], e))
    try:
        pruner = getattr(optuna.pruners, pruner_spec["class"])(**pruner_spec["kwargs"])
    except (TypeError, ValueError) as e:
        raise BadInput("hydra.sweeper.pruner (%s): %s" % (pruner_spec["class"], e))
    # Nothing touches the storage before the sampler and pruner are known to be good.
    url = req["storage"]
    storage = open_storage(url, req.get("heartbeat", 5))
    name = req["study_name"]
    try:
        existing = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        existing = None
    if existing is not None:
        have = [d.name.lower() for d in existing.directions]
        if have != req["directions"]:
            raise BadInput("study '%s' in %s optimizes %s, not %s (hydra.sweeper.direction)"
                           % (name, url, have, req["directions"]))
    study = optuna.create_study(storage=storage, study_name=name, directions=req["directions"], sampler=sampler,
                                pruner=pruner, load_if_exists=True)
    # Every write goes through the study's own (caching) storage: a write to the RDBStorage under
    # it would not reach the trials the study has cached, and the study would read them stale
    # (a trial this process abandoned at n_trials counted as a real failure).
    storage = study._storage
    marked = []
    host = socket.gethostname()
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = t.system_attrs.get("kiln:owner", "")
        owner_host, _, owner_pid = owner.rpartition(":")
        if owner_host == host and owner_pid.isdigit() and not pid_alive(int(owner_pid)):
            storage.set_trial_system_attr(t._trial_id, "kiln:abandoned", "its sweep process %s ended" % owner_pid)
            storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL)
            marked.append(t.number)
    optuna.storages.fail_stale_trials(study)
    state.update(study=study, storage=storage, n_trials=req["n_trials"], space=space)
    threading.Thread(target=heartbeats, args=(req.get("heartbeat", 5),), daemon=True).start()
    trials = study.get_trials(deepcopy=False)
    return {"study_name": name, "marked_failed": marked, "trials": len(trials),
            "counted": sum(1 for t in trials if counted(t))}


# Messages of a storage whose schema another process is creating at the same moment (two sweeps
# started together on a new database): opening it again once that process is done succeeds.
SCHEMA_RACE = ("already exists", "UNIQUE constraint failed", "database is locked", "Duplicate entry")


def open_storage(url, heartbeat):
    import time
    for attempt in range(50):
        try:
            return optuna.storages.RDBStorage(url, heartbeat_interval=heartbeat)
        except Exception as e:
            message = str(e).splitlines()[0] if str(e) else type(e).__name__
            if attempt < 49 and any(race in message for race in SCHEMA_RACE):
                time.sleep(0.1)
                continue
            raise BadInput("cannot open storage '%s': %s" % (url, message))


def heartbeats(interval):
    import time
    while True:
        time.sleep(interval)
        with lock:
            for trial in list(state["running"].values()):
                try:
                    state["storage"].record_heartbeat(trial._trial_id)
                except Exception:
                    pass


def op_ask(req):
    study = state["study"]
    optuna.storages.fail_stale_trials(study)
    if sum(1 for t in study.get_trials(deepcopy=False) if counted(t)) >= state["n_trials"]:
        return {"full": True}
    trial = study.ask(state["space"])
    # Another process may have asked at the same moment: the trials numbered before this one decide.
    before = sum(1 for t in study.get_trials(deepcopy=False) if t.number < trial.number and counted(t))
    if before >= state["n_trials"]:
        state["storage"].set_trial_system_attr(trial._trial_id, "kiln:abandoned", PAST_N_TRIALS)
        study.tell(trial, state=TrialState.FAIL)
        return {"full": True}
    state["storage"].set_trial_system_attr(trial._trial_id, "kiln:owner", OWNER)
    seed = getattr(study.sampler, "last_seed", None)
    if seed is not None:
        state["storage"].set_trial_system_attr(trial._trial_id, "kiln:sampler_seed", seed)
    state["storage"].record_heartbeat(trial._trial_id)
    state["running"][trial.number] = trial
    params = []
    for key, dist in state["space"].items():
        value = trial.params[key]
        index = dist.choices.index(value) if isinstance(dist, CategoricalDistribution) else None
        text = repr(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        params.append({"key": key, "value": value, "index": index, "text": text})
    return {"number": trial.number, "params": params}


def op_tell(req):
    trial = state["running"].pop(req["number"])
    for key, value in req.get("attrs", {}).items():
        trial.set_user_attr(key, value)
    st = {"COMPLETE": TrialState.COMPLETE, "FAIL": TrialState.FAIL, "PRUNED": TrialState.PRUNED}[req["state"]]
    values = req.get("values") if st == TrialState.COMPLETE else None
    try:
        state["study"].tell(trial, values=values, state=st)
    except RuntimeError as e:
        # GridSampler.after_trial calls Study.stop once the grid is done, which only works inside
        # study.optimize; the trial's state is stored before that (optuna/study/_tell.py).
        if "Study.stop" not in str(e):
            raise
    return {"ok": True}


def op_report(req):
    trial = state["running"][req["number"]]
    value = req["value"]
    if value is not None and math.isfinite(value):
        trial.report(value, req["step"])
    return {"ok": True}


def op_should_prune(req):
    return {"prune": bool(state["running"][req["number"]].should_prune())}


def op_trials(req):
    study = state["study"]
    out = []
    for t in study.get_trials(deepcopy=False):
        if t.system_attrs.get("kiln:abandoned") == PAST_N_TRIALS:
            continue
        duration = (t.datetime_complete - t.datetime_start).total_seconds() \
            if t.datetime_complete and t.datetime_start else None
        out.append({"number": t.number, "state": t.state.name, "values": t.values, "params": t.params,
                    "duration": duration, "dir": t.user_attrs.get("kiln:dir", ""),
                    "abandoned": "kiln:abandoned" in t.system_attrs})
    try:
        best = [t.number for t in study.best_trials]
    except ValueError:
        best = []
    return {"trials": out, "best": best}


def op_load(req):
    # Reads a study without changing it: a SQLite file that is not there is an error, not a new study.
    url, name = req["storage"], req["study_name"]
    if url.startswith("sqlite:///") and not os.path.isfile(url[len("sqlite:///"):]):
        raise BadInput("no study database at %s" % url[len("sqlite:///"):])
    try:
        storage = optuna.storages.RDBStorage(url)
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        raise BadInput("no study '%s' in %s" % (name, url))
    except Exception as e:
        raise BadInput("cannot read %s: %s" % (url, str(e).splitlines()[0] if str(e) else type(e).__name__))
    state.update(study=study, storage=study._storage)
    return {"study_name": name, "trials": len(study.get_trials(deepcopy=False))}


OPS = {"open": op_open, "load": op_load, "ask": op_ask, "tell": op_tell, "report": op_report, "should_prune": op_should_prune,
       "trials": op_trials}

def abandon_running(reason):
    for trial in list(state["running"].values()):
        try:
            state["storage"].set_trial_system_attr(trial._trial_id, "kiln:abandoned", reason)
            state["storage"].set_trial_state_values(trial._trial_id, state=TrialState.FAIL)
        except Exception:
            pass
    state["running"].clear()


# SIGTERM (the sweep died: PR_SET_PDEATHSIG) is acted on between requests, never inside one: a
# trial asked for is always recorded with its owner, and the trials this sweep was running are
# marked FAIL (abandoned) at once, so the study never keeps a RUNNING trial nobody runs.
in_request = False
stopping = False


def on_sigterm(signum, frame):
    global stopping
    stopping = True
    if not in_request:
        raise SystemExit(0)


signal.signal(signal.SIGTERM, on_sigterm)
try:
    reply({"ready": True, "optuna": optuna.__version__, "python": sys.version.split()[0]})
    for line in sys.stdin:
        if not line.strip():
            continue
        in_request = True
        try:
            req = json.loads(line)
            with lock:
                reply(OPS[req["op"]](req))
        except BadInput as e:
            reply({"error": "bad-input", "message": str(e)})
        except Exception as e:
            reply({"error": "optuna", "message": "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")})
        in_request = False
        if stopping:
            break
finally:
    if stopping and state["study"] is not None:
        with lock:
            abandon_running("its sweep process %d ended" % PARENT)
