"""The mlflow logger against a real MLflow tracking server, read back with MLflow's own client.

Starts `mlflow server` from the .venv (SQLite backend, a local artifact folder, --serve-artifacts)
on a free loopback port in a temporary folder, runs short `kiln train` jobs with
`logger=[csv,mlflow]`, and reads the runs back with mlflow.tracking.MlflowClient in this one
process (importing mlflow takes seconds). Two groups, one ctest test each:

  round_trip  every metric value and step equals metrics.csv, every param the composed config
              (.hydra/config.yaml), the artifacts are byte-equal, the tags are there; SIGTERM ends
              the run KILLED and `ckpt_path=last` continues the same run to FINISHED; an Optuna
              sweep of 6 trials is one parent run with 6 nested runs (RUNNING while one of them
              runs, FINISHED when the last one ends); kiln mlflow-register makes
              kiln export's files a registered model's version.
  faults      the server killed in the middle of a run and started again: the run finishes and
              every record arrives; an unreachable server is one warning and training goes on,
              then `kiln mlflow-sync` sends the run; a URI that is not MLflow and rejected
              credentials are one line each and exit 2.
Skips (exit 77) without mlflow in the .venv.
"""
import csv
import http.server
import json
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

KILN = os.environ["KILN_BINARY"]

try:
    import yaml
    from mlflow.tracking import MlflowClient
except ImportError as e:
    print(f"skipped: mlflow is not in this Python ({e}); scripts/setup_venv.sh test installs it")
    sys.exit(77)

SHORT = ["experiment=fashion_mnist", "logger=[csv,mlflow]", "trainer.limit_val_batches=2",
         "trainer.limit_test_batches=2", "trainer.log_every_n_steps=1"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`mlflow server` in a process group of its own, killed with the group."""

    def __init__(self, folder, port):
        self.folder, self.port = folder, port
        self.uri = f"http://127.0.0.1:{port}"
        self.proc = None

    def start(self):
        env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
        log = open(os.path.join(self.folder, "server.log"), "ab")
        self.proc = subprocess.Popen(
            [os.path.join(os.path.dirname(sys.executable), "mlflow"), "server", "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", "1",
             "--backend-store-uri", "sqlite:///" + os.path.join(self.folder, "mlflow.db"),
             "--artifacts-destination", os.path.join(self.folder, "artifacts"), "--serve-artifacts"],
            stdout=log, stderr=log, env=env, start_new_session=True)
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    break
            except OSError:
                if self.proc.poll() is not None:
                    raise SystemExit("mlflow server did not start:\n" + open(log.name).read()[-2000:])
                time.sleep(0.1)
        else:
            raise SystemExit("mlflow server did not start in 120 s")
        return self

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None


def kiln(args, cwd, env=None, **kw):
    return subprocess.run([KILN] + args, cwd=cwd, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **(env or {})), **kw)


def run_id(run_dir):
    with open(os.path.join(run_dir, "mlflow", "run.json")) as f:
        return json.load(f)["run_id"]


def csv_metrics(run_dir):
    """{key: [(step, value), ...]} of metrics.csv."""
    out = {}
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        for row in csv.DictReader(f):
            step = int(row.pop("step"))
            for key, value in row.items():
                if value != "":
                    out.setdefault(key, []).append((step, float(value)))
    return out


def mlflow_metrics(client, rid, keys):
    return {key: [(m.step, m.value) for m in client.get_metric_history(rid, key)] for key in keys}


def same_values(a, b):
    return len(a) == len(b) and all(
        sa == sb and (va == vb or (math.isnan(va) and math.isnan(vb))) for (sa, va), (sb, vb) in zip(a, b))


def flatten(node, prefix=""):
    """The params kiln logs: mappings flattened to dotted keys, scalars as Python's str(), lists
    and empty mappings as compact JSON."""
    if isinstance(node, dict) and node:
        out = {}
        for k, v in node.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(node, (list, dict)):
        return {prefix: json.dumps(node, separators=(",", ":"))}
    return {prefix: str(node)}


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def assert_run_matches_folder(client, run_dir):
    rid = run_id(run_dir)
    run = client.get_run(rid)
    expected = csv_metrics(run_dir)
    got = mlflow_metrics(client, rid, expected.keys())
    for key in expected:
        check(same_values(sorted(got[key]), sorted(expected[key])),
              f"{key}: MLflow has {sorted(got[key])[:5]}..., metrics.csv {sorted(expected[key])[:5]}...")
    check(set(run.data.metrics) == set(expected), f"metric names {set(run.data.metrics) ^ set(expected)}")
    return run


def round_trip(tmp, server, client):
    # 1. A short run: metrics, params, tags and artifacts.
    run_dir = os.path.join(tmp, "run")
    r = kiln(["train"] + SHORT + ["trainer.max_steps=12", "hydra.run.dir=" + run_dir,
                                  "logger.mlflow.tracking_uri=" + server.uri,
                                  "logger.mlflow.experiment_name=round trip",
                                  "logger.mlflow.log_model=true"], cwd=tmp)
    check(r.returncode == 0, f"kiln train failed: {r.stderr[-2000:]}")
    run = assert_run_matches_folder(client, run_dir)
    check(run.info.status == "FINISHED", f"status {run.info.status}")
    check(client.get_experiment(run.info.experiment_id).name == "round trip", "experiment name")
    n_metrics = sum(len(v) for v in csv_metrics(run_dir).values())
    check(n_metrics > 12 * 2, f"only {n_metrics} metric values")
    with open(os.path.join(run_dir, ".hydra", "config.yaml")) as f:
        params = flatten(yaml.safe_load(f))
    check(run.data.params == params,
          "params differ: " + str({k: (run.data.params.get(k), params.get(k))
                                   for k in set(run.data.params) | set(params)
                                   if run.data.params.get(k) != params.get(k)}))
    tags = run.data.tags
    check(tags["kiln.version"] and tags["mlflow.runName"] == run_dir, f"tags {tags}")
    check("logger=[csv,mlflow]" in tags["kiln.command_line"], tags["kiln.command_line"])
    check(tags["mlflow.source.name"].endswith("kiln") and tags["mlflow.user"], f"tags {tags}")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp, capture_output=True, text=True)
    if commit.returncode == 0:
        check(tags.get("mlflow.source.git.commit") == commit.stdout.strip(), "git commit tag")
    local = client.download_artifacts(run.info.run_id, "", os.path.join(tmp, "downloaded"))
    for name in [".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "test_metrics.yaml"]:
        with open(os.path.join(run_dir, name), "rb") as a, open(os.path.join(local, name), "rb") as b:
            check(a.read() == b.read(), f"artifact {name} differs")
    # log_model: the best checkpoint (last.ckpt when no validation chose one: 12 steps end before
    # the first), under its path in the run folder.
    best = os.path.join("checkpoints", "last.ckpt")
    recorded = os.path.join(run_dir, "checkpoints", "best_model_path.txt")
    if os.path.exists(recorded):
        with open(recorded) as f:
            best = os.path.relpath(os.path.realpath(f.read().strip()), os.path.realpath(run_dir))
    check(best.startswith("checkpoints/") and best.endswith(".ckpt"), f"best checkpoint {best}")
    with open(os.path.join(run_dir, best), "rb") as a, open(os.path.join(local, best), "rb") as b:
        check(a.read() == b.read(), f"artifact {best} differs")
    check(not os.path.exists(os.path.join(run_dir, "mlflow", "pending.jsonl")), "pending left")
    print(f"round trip: {n_metrics} metric values, {len(params)} params, 5 artifacts equal ({best})")
    # kiln export with the run's stored config (its mlflow logger) logs nothing: no MLflow run.
    r = kiln(["export", "run_dir=" + run_dir, "hydra.run.dir=" + os.path.join(tmp, "export")], cwd=tmp)
    check(r.returncode == 0, f"kiln export failed: {r.stderr[-2000:]}")
    check(len(client.search_runs([run.info.experiment_id])) == 1, "kiln export made an MLflow run")
    # kiln mlflow-register: the export's files are the run's model/ artifacts and a model version.
    export = os.path.join(tmp, "export")
    r = kiln(["mlflow-register", "run_dir=" + run_dir, "model_dir=" + export, "name=fmnist cnn"], cwd=tmp)
    check(r.returncode == 0 and r.stdout.strip() == "fmnist cnn 1", f"mlflow-register: {r.stdout} {r.stderr[-2000:]}")
    versions = client.search_model_versions("name='fmnist cnn'")
    check(len(versions) == 1 and versions[0].run_id == run.info.run_id, f"versions {versions}")
    local = client.download_artifacts(run.info.run_id, "model", os.path.join(tmp, "model"))
    for name in ["model.safetensors", "config.yaml"]:
        with open(os.path.join(export, name), "rb") as a, open(os.path.join(local, name), "rb") as b:
            check(a.read() == b.read(), f"registered {name} differs")
    print("kiln export made no run; kiln mlflow-register made version 1 of 'fmnist cnn'")

    # 2. SIGTERM ends the run KILLED; ckpt_path=last continues the same run to FINISHED.
    run_dir = os.path.join(tmp, "stopped")
    args = ["train"] + SHORT + ["trainer.max_steps=100000", "hydra.run.dir=" + run_dir,
                                "logger.mlflow.tracking_uri=" + server.uri]
    proc = subprocess.Popen([KILN] + args, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        if os.path.exists(os.path.join(run_dir, "metrics.csv")) and \
                sum(1 for _ in open(os.path.join(run_dir, "metrics.csv"))) > 5:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    check(proc.returncode == 143, f"exit {proc.returncode}: {err[-1500:]}")
    rid = run_id(run_dir)
    check(client.get_run(rid).info.status == "KILLED", f"status {client.get_run(rid).info.status}")
    stopped_at = max(s for s, _ in csv_metrics(run_dir)["train/loss"])
    r = kiln(["train"] + SHORT + ["trainer.max_steps=" + str(stopped_at + 5), "hydra.run.dir=" + run_dir,
                                  "logger.mlflow.tracking_uri=" + server.uri, "ckpt_path=last"], cwd=tmp)
    check(r.returncode == 0, f"resume failed: {r.stderr[-2000:]}")
    check(run_id(run_dir) == rid, "the resumed fit started another MLflow run")
    run = client.get_run(rid)
    check(run.info.status == "FINISHED", f"resumed status {run.info.status}")
    steps = [m.step for m in client.get_metric_history(rid, "train/loss")]
    check(max(steps) == stopped_at + 5 and stopped_at in steps, f"steps {steps}")
    print(f"SIGTERM at step {stopped_at}: KILLED; resumed to FINISHED in the same run")

    # 3. An Optuna sweep of 6 trials: one parent run, 6 nested runs with their params and objective.
    sweep = os.path.join(tmp, "sweep")
    r = kiln(["train", "hparams_search=fashion_mnist_optuna", "experiment=fashion_mnist", "logger=[csv,mlflow]",
              "hydra.sweeper.n_trials=6", "trainer.limit_train_batches=6", "trainer.limit_val_batches=2",
              "trainer.val_check_interval=1.0", "hydra.sweep.dir=" + sweep,
              "logger.mlflow.tracking_uri=" + server.uri, "logger.mlflow.experiment_name=sweep"], cwd=tmp)
    check(r.returncode == 0, f"sweep failed: {r.stderr[-2000:]}")
    with open(os.path.join(sweep, "mlflow", "parent.json")) as f:
        parent = json.load(f)["run_id"]
    experiment = client.get_experiment_by_name("sweep").experiment_id
    runs = client.search_runs([experiment])
    children = [run for run in runs if run.data.tags.get("mlflow.parentRunId") == parent]
    check(len(runs) == 7 and len(children) == 6, f"{len(runs)} runs, {len(children)} nested")
    check(client.get_run(parent).info.status == "FINISHED", "parent status")
    with open(os.path.join(sweep, "mlflow", "parent.json")) as f:
        running = json.load(f)["jobs_running"]
    check(running == 0, f"{running} jobs still counted as running")
    for child in children:
        job = child.data.tags["kiln.sweep_job"]
        with open(os.path.join(sweep, job, ".hydra", "config.yaml")) as f:
            check(child.data.params == flatten(yaml.safe_load(f)), f"job {job}'s params")
        check(child.data.params["optimizer.lr"] and "val/acc" in child.data.metrics, f"job {job}")
        pruned = child.data.tags.get("kiln.trial_state") == "PRUNED"
        check(child.info.status == ("KILLED" if pruned else "FINISHED"), f"job {job}: {child.info.status}")
    print(f"Optuna sweep: parent {parent} with 6 nested runs "
          f"({sum(c.data.tags.get('kiln.trial_state') == 'PRUNED' for c in children)} pruned: KILLED)")


class NotMlflow(http.server.BaseHTTPRequestHandler):
    code = 404

    def _answer(self):
        body = b"<html>not here</html>"
        self.send_response(self.code)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = _answer

    def log_message(self, *args):
        pass


class RejectsToken(NotMlflow):
    code = 401


def serve(handler):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def warnings_about_mlflow(stderr):
    return [line for line in stderr.splitlines() if "mlflow" in line and "WARNING" in line]


def faults(tmp, server, client):
    # 1. The server killed in the middle of a run, started again: every record arrives.
    run_dir = os.path.join(tmp, "outage")
    args = ["train"] + SHORT + ["trainer.max_steps=400", "hydra.run.dir=" + run_dir,
                                "logger.mlflow.tracking_uri=" + server.uri, "logger.mlflow.timeout=2",
                                "logger.mlflow.max_queue=20", "logger.mlflow.flush_timeout=120"]
    proc = subprocess.Popen([KILN] + args, cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 60
    while time.time() < deadline and proc.poll() is None and \
            not os.path.exists(os.path.join(run_dir, "mlflow", "run.json")):
        time.sleep(0.05)
    time.sleep(0.5)
    server.kill()
    time.sleep(3)
    server.start()
    _, err = proc.communicate(timeout=240)
    check(proc.returncode == 0, f"exit {proc.returncode}: {err[-2000:]}")
    check(len(warnings_about_mlflow(err)) == 1, "warnings: " + "\n".join(warnings_about_mlflow(err)))
    run = assert_run_matches_folder(client, run_dir)
    check(run.info.status == "FINISHED", f"status {run.info.status}")
    n = sum(len(v) for v in csv_metrics(run_dir).values())
    print(f"server killed and restarted mid-run: all {n} metric values arrived")

    # 2. Unreachable at the start: one warning, training goes on, then kiln mlflow-sync sends it.
    run_dir = os.path.join(tmp, "offline")
    r = kiln(["train"] + SHORT + ["trainer.max_steps=10", "hydra.run.dir=" + run_dir,
                                  f"logger.mlflow.tracking_uri=http://127.0.0.1:{free_port()}",
                                  "logger.mlflow.flush_timeout=1"], cwd=tmp)
    check(r.returncode == 0, f"offline train failed: {r.stderr[-2000:]}")
    warned = warnings_about_mlflow(r.stderr)
    check(len(warned) == 2 and "does not answer" in warned[0] and "mlflow-sync" in warned[1],
          "warnings: " + "\n".join(warned))
    check(os.path.exists(os.path.join(run_dir, "mlflow", "pending.jsonl")), "no pending.jsonl")
    r = kiln(["mlflow-sync", "run_dir=" + run_dir, "tracking_uri=" + server.uri], cwd=tmp)
    check(r.returncode == 0, f"mlflow-sync failed: {r.stderr[-2000:]}")
    run = assert_run_matches_folder(client, run_dir)
    check(run.info.status == "FINISHED" and len(run.data.params) > 50, f"synced run {run.info}")
    check(not os.path.exists(os.path.join(run_dir, "mlflow", "pending.jsonl")), "pending left")
    r = kiln(["mlflow-sync", "run_dir=" + run_dir], cwd=tmp)
    check(r.returncode == 2 and "nothing to send" in r.stderr, f"second sync: {r.stderr}")
    print("unreachable at start: one warning, trained; kiln mlflow-sync sent it")

    # 3. Not an MLflow server, and rejected credentials: one line each, exit 2, nothing trained.
    for handler, expected in [(NotMlflow, "is not an MLflow tracking server"),
                              (RejectsToken, "refused the credentials")]:
        httpd = serve(handler)
        r = kiln(["train"] + SHORT + ["trainer.max_steps=3", "hydra.run.dir=" + os.path.join(tmp, handler.__name__),
                                      f"logger.mlflow.tracking_uri=http://127.0.0.1:{httpd.server_address[1]}"],
                 cwd=tmp, env={"MLFLOW_TRACKING_TOKEN": "wrong"})
        httpd.shutdown()
        errors = [line for line in r.stderr.splitlines() if "error" in line]
        check(r.returncode == 2 and len(errors) == 1 and expected in errors[0] and "Traceback" not in r.stderr,
              f"{handler.__name__}: exit {r.returncode}: {r.stderr[-1500:]}")
        check(not os.path.exists(os.path.join(tmp, handler.__name__, "metrics.csv")), "it trained")
        print(f"{handler.__name__}: {errors[0]}")


def main():
    group = sys.argv[1]
    with tempfile.TemporaryDirectory(prefix="kiln-mlflow-") as tmp:
        server = Server(tmp, free_port())
        started = time.time()
        server.start()
        print(f"mlflow server up in {time.time() - started:.1f} s")
        try:
            client = MlflowClient(server.uri)
            {"round_trip": round_trip, "faults": faults}[group](tmp, server, client)
        finally:
            server.kill()


if __name__ == "__main__":
    main()
