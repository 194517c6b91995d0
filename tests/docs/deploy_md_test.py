#!/usr/bin/env python3
"""Runs the commands of docs/deploy.md as written, on loopback, so that the guide stays true.

The guide's two machines become one: box-b's worker and box-a's head run as local processes,
the guide's paths (/etc/tandem, /var/lib/tandem, /var/cache/tandem, /models) move under a scratch
folder, and its addresses (10.0.0.1:8080, 10.0.0.2:7070) become free loopback ports. The model is
the tiny built-in one, written under the guide's file name, so the model id in the calls stays.

What a scratch folder cannot do is mapped, not skipped silently: `systemctl enable --now UNIT`
runs the ExecStart= of the unit file the guide's `tandem systemd` wrote; `journalctl` prints that
process's log; `scp`/`ssh`/`chown` (one machine, one user) and the build steps of step 1 (this
build is the one tested) are not run. Every other command must exit 0.

usage: deploy_md_test.py SOURCE_DIR BUILD_DIR
"""
import json
import os
import re
import shutil
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SKIP = ("apt-get ", "git clone", "make build", "scripts/install-tandem.sh", "chown ", "scp ", "ssh ")
MODEL_FILE = "MiniMax-M3-UD-IQ4_XS-00001-of-00005.gguf"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def blocks(text, lang):
    """The fenced blocks of `lang`, each with the section heading above it."""
    out, heading, inside, body = [], "", False, []
    for line in text.splitlines():
        if not inside and line.startswith("#"):
            heading = line.lstrip("# ")
        if line.startswith("```"):
            if inside:
                out.append((heading, "\n".join(body)))
                inside = False
            elif line.strip() == "```" + lang:
                inside, body = True, []
            continue
        if inside:
            body.append(line)
    return out


def commands(block):
    """Shell commands of a block: continuation lines joined, comments and blanks dropped."""
    out, current = [], ""
    for raw in block.splitlines():
        line = raw.rstrip()
        if current:
            current += "\n" + line
        else:
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            current = line
        # A trailing comment after a continuation would break the join; the guide puts none there.
        if current.endswith("\\") or current.count("'") % 2 == 1:
            continue
        out.append(current)
        current = ""
    if current:
        out.append(current)
    return out


class Runner:
    def __init__(self, source, build):
        self.source, self.build = source, build
        self.root = tempfile.mkdtemp(prefix="deploy-md-", dir=os.path.join(build, "test-tmp") if os.path.isdir(os.path.join(build, "test-tmp")) else None)
        self.head_port, self.worker_port = free_port(), free_port()
        self.units = {}      # unit name -> the unit file written by the guide's `tandem systemd`
        self.procs = {}      # unit name -> (Popen, log path)
        self.env = dict(os.environ)
        self.env["PATH"] = build + os.pathsep + self.env.get("PATH", "")
        self.env["HOME"] = os.environ.get("HOME", self.root)
        self.vars = {}
        for d in ("etc/tandem", "etc/systemd/system", "var/lib/tandem", "var/cache/tandem/rpc", "models"):
            os.makedirs(os.path.join(self.root, d), exist_ok=True)

    def subst(self, text):
        r = self.root
        pairs = [
            ("/etc/systemd/system", r + "/etc/systemd/system"),
            ("/etc/tandem", r + "/etc/tandem"),
            ("/var/lib/tandem", r + "/var/lib/tandem"),
            ("/var/cache/tandem", r + "/var/cache/tandem"),
            ("/models/", r + "/models/"),
            ("/usr/local/bin/tandem", os.path.join(self.build, "tandem")),
            ("10.0.0.2:7070", "127.0.0.1:%d" % self.worker_port),
            ("0.0.0.0:7070", "127.0.0.1:%d" % self.worker_port),
            ("0.0.0.0:8080", "127.0.0.1:%d" % self.head_port),
            ("10.0.0.1:8080", "127.0.0.1:%d" % self.head_port),
            ("localhost:8080", "127.0.0.1:%d" % self.head_port),
        ]
        for a, b in pairs:
            text = text.replace(a, b)
        return text

    def sh(self, cmd, what):
        run_env = dict(self.env, **self.vars)
        p = subprocess.run(["bash", "-euo", "pipefail", "-c", cmd], cwd=self.source, env=run_env,
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            self.fail("%s: `%s` exited %d\nstdout:\n%s\nstderr:\n%s" % (what, cmd, p.returncode, p.stdout, p.stderr))
        return p.stdout

    def fail(self, message):
        for name, (_, log) in self.procs.items():
            with open(log) as f:
                message += "\n--- log of %s ---\n%s" % (name, f.read()[-4000:])
        raise SystemExit("deploy.md: " + message)

    def exec_start(self, unit):
        path = self.units.get(unit)
        if not path:
            self.fail("`systemctl ... %s` before `tandem systemd` wrote %s.service" % (unit, unit))
        with open(path) as f:
            for line in f:
                if line.startswith("ExecStart="):
                    # The unit names the scratch paths already (the guide's command wrote it).
                    return line[len("ExecStart="):].strip().replace("/usr/local/bin/tandem", os.path.join(self.build, "tandem"))
        self.fail(path + " has no ExecStart=")

    def start_unit(self, unit):
        argv = shlex.split(self.exec_start(unit))
        log = os.path.join(self.root, unit + ".log")
        proc = subprocess.Popen(argv, stdout=open(log, "w"), stderr=subprocess.STDOUT, env=self.env, cwd=self.root)
        self.procs[unit] = (proc, log)
        port = self.worker_port if "worker" in unit else self.head_port
        deadline = time.time() + 120
        while time.time() < deadline:
            if proc.poll() is not None:
                self.fail("%s exited %d at start" % (unit, proc.returncode))
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        else:
            self.fail(unit + " never listened")
        if "head" in unit:
            self.wait_ready()

    def wait_ready(self):
        deadline = time.time() + 180
        while time.time() < deadline:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/health" % self.head_port, timeout=2) as r:
                    if json.load(r).get("state") == "ready":
                        return
            except Exception:
                pass
            time.sleep(0.5)
        self.fail("the head never became ready")

    def run_command(self, section, cmd):
        text = self.subst(cmd)
        m = re.match(r"tandem systemd .*> (\S+)/(tandem-\w+)\.service$", text)
        if m:
            self.units[m.group(2)] = m.group(1) + "/" + m.group(2) + ".service"
        if text.startswith("systemctl "):
            for unit in re.findall(r"\b(tandem-\w+)\b", text):
                if "--now" in text:
                    self.start_unit(unit)
            return
        if text.startswith("journalctl "):
            unit = re.search(r"-u (\S+)", text).group(1)
            if unit not in self.procs:
                self.fail("journalctl -u %s: %s is not running" % (unit, unit))
            if "-f" in text.split():  # following a log only waits for the state the guide names
                with open(self.procs[unit][1]) as f:
                    log = f.read()
                if "ready" not in log:
                    self.fail("%s's log never said ready" % unit)
            return
        text = text.replace("sudo -u tandem ", "")  # one user here
        assign = re.match(r"^(?:export )?([A-Z_]+)=\$\((.*)\)\s*(#.*)?$", text)
        if assign:  # VAR=$(command): the command must succeed, and later commands see VAR
            self.vars[assign.group(1)] = self.sh(assign.group(2), section).strip()
            print("ok: %s" % cmd.splitlines()[0])
            return
        if "worker seed" in text:
            text = text.replace("--layers 0-30", "--layers " + self.worker_range())
        out = self.sh(text, section)
        if text.startswith("curl "):  # curl -s exits 0 on an HTTP error: the answer must be one
            try:
                answer = json.loads(out)
            except ValueError:
                self.fail("%s: `%s` did not answer JSON:\n%s" % (section, text, out))
            if "error" in answer or "choices" not in answer:
                self.fail("%s: `%s` answered:\n%s" % (section, text, out))
        print("ok: %s" % cmd.splitlines()[0])
        if " doctor " in text or " plan " in text:
            print(out)

    def worker_range(self):
        """The range `tandem plan -c` gives box-b: the guide says to seed what the plan prints."""
        p = json.loads(self.sh("tandem plan --json -c %s/etc/tandem/tandem.toml" % self.root, "plan for the seed range"))
        for d in p.get("devices", []):
            if d.get("node") == "box-b" and d.get("n_layers", 0) > 0:
                return "%d-%d" % (d["first_layer"], d["first_layer"] + d["n_layers"] - 1)
        self.fail("the plan gives box-b no layer range:\n" + json.dumps(p, indent=1))

    def stop(self):
        for proc, _ in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc, _ in self.procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    source, build = (os.path.abspath(a) for a in sys.argv[1:])
    with open(os.path.join(source, "docs/deploy.md")) as f:
        guide = f.read()
    r = Runner(source, build)
    ok = False
    try:
        r.sh("tandem synth --preset tiny -o %s/models/%s" % (r.root, MODEL_FILE), "the model")
        tomls = blocks(guide, "toml")
        if len(tomls) != 1:
            r.fail("expected one toml block (the config of step 3), found %d" % len(tomls))
        # The tiny model fits the head alone, where the planner would keep it; a hand split gives
        # box-b its share, so the guide's seed, doctor and calls go through a real split.
        config = r.subst(tomls[0][1]).replace("[model]\n", "[model]\nlayers = \"2,2\"\n", 1)
        with open(os.path.join(r.root, "etc/tandem/tandem.toml"), "w") as f:
            f.write(config)
        ran = 0
        for section, block in blocks(guide, "sh"):
            if section.startswith("Regenerating"):
                continue  # tests/ops/systemd_units_test.cpp checks deploy/ against the command
            for cmd in commands(block):
                if cmd.strip().startswith(SKIP):
                    print("not run here: %s" % cmd.splitlines()[0])
                    continue
                r.run_command(section, cmd)
                ran += 1
        for needed in ("tandem-worker", "tandem-head"):
            if needed not in r.procs:
                r.fail("the guide never starts " + needed)
        if "KEY" not in r.vars:
            r.fail("the guide never creates an API key")
        print("deploy.md: %d commands ran as written" % ran)
        ok = True
    finally:
        r.stop()
    if ok:
        shutil.rmtree(r.root, ignore_errors=True)


if __name__ == "__main__":
    main()
