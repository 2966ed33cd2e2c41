"""Checks the deployment files without a cluster: the Kubernetes manifests (structure,
required fields, probes wired to refit's endpoints, Prometheus annotations on the metrics
port, volumes that exist, the Service matching the pods), the systemd units, the Grafana
dashboard (every metric it queries is one refit exports) and the job files. Every flag the
manifests and units pass must be a flag of the binary they start.

    check_deploy_files.py REPO_ROOT
"""
import configparser
import glob
import json
import os
import re
import sys
import unittest

import yaml

ROOT = sys.argv.pop(1) if len(sys.argv) > 1 else "."
BINARY_SOURCES = {"refitd": "refitd/refitd_main.cc",
                  "refit-coordinator": "coordinator/coordinator_main.cc"}
PROBE_PATHS = {"/healthz", "/readyz"}


def read(path):
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def flags_of(binary):
    return set(re.findall(r"ABSL_FLAG\([^,]+,\s*(\w+)", read(BINARY_SOURCES[binary])))


def exported_metrics():
    return set(re.findall(r'\.Name\("(\w+)"\)', read("daemon/metrics.cc")))


def manifests():
    for path in sorted(glob.glob(os.path.join(ROOT, "deploy/kubernetes/*.yaml"))):
        with open(path) as f:
            for document in yaml.safe_load_all(f):
                if document is not None:
                    yield os.path.basename(path), document


def pod_spec(document):
    if document["kind"] == "Pod":
        return document["spec"], document["metadata"]
    if document["kind"] in ("Deployment", "DaemonSet", "StatefulSet"):
        template = document["spec"]["template"]
        return template["spec"], template["metadata"]
    return None, None


def used_flags(args):
    return {re.match(r"--(\w+)", a).group(1) for a in args if a.startswith("--")}


class KubernetesManifestsTest(unittest.TestCase):
    def test_every_document_names_its_kind_and_itself(self):
        seen = 0
        for name, document in manifests():
            with self.subTest(file=name, kind=document.get("kind")):
                for field in ("apiVersion", "kind", "metadata"):
                    self.assertIn(field, document)
                self.assertTrue(document["metadata"].get("name"))
                seen += 1
        self.assertGreaterEqual(seen, 5)

    def test_refit_containers_are_wired_for_probes_metrics_and_flags(self):
        checked = set()
        for name, document in manifests():
            spec, metadata = pod_spec(document)
            if spec is None:
                continue
            volumes = {v["name"] for v in spec.get("volumes", [])}
            annotations = metadata.get("annotations", {})
            for container in spec.get("initContainers", []) + spec["containers"]:
                with self.subTest(file=name, container=container["name"]):
                    self.assertTrue(container.get("image"))
                    for mount in container.get("volumeMounts", []):
                        self.assertIn(mount["name"], volumes, "mount of a volume that is absent")
                    binary = container.get("command", [""])[0]
                    if binary not in BINARY_SOURCES:
                        continue
                    checked.add(binary)
                    args = container.get("args", [])
                    self.assertLessEqual(used_flags(args), flags_of(binary))
                    ports = {p.get("name"): p["containerPort"] for p in container["ports"]}
                    metrics_port = int(next(a.split("=")[1] for a in args
                                            if a.startswith("--metrics_port=")))
                    self.assertIn(metrics_port, ports.values())
                    # Prometheus scrapes the metrics port.
                    self.assertEqual(annotations.get("prometheus.io/scrape"), "true")
                    self.assertEqual(int(annotations["prometheus.io/port"]), metrics_port)
                    # Both probes exist and point at refit's endpoints or grpc.health.v1.
                    for probe_name in ("livenessProbe", "readinessProbe"):
                        probe = container[probe_name]
                        if "httpGet" in probe:
                            self.assertIn(probe["httpGet"]["path"], PROBE_PATHS)
                            port = probe["httpGet"]["port"]
                            self.assertIn(port, set(ports) | set(ports.values()))
                        else:
                            self.assertIn(probe["grpc"]["port"], ports.values())
                    if binary == "refitd":
                        # The unix socket lies in a volume the workload can mount too.
                        socket = next(a.split("=")[1] for a in args if a.startswith("--socket="))
                        mounts = [m["mountPath"] for m in container["volumeMounts"]]
                        self.assertTrue(any(socket.startswith(m + "/") for m in mounts), socket)
                        self.assertNotEqual(
                            next(a for a in args if a.startswith("--metrics_host=")),
                            "--metrics_host=127.0.0.1", "probes cannot reach loopback")
        self.assertEqual(checked, set(BINARY_SOURCES))

    def test_pods_are_what_a_platform_team_would_apply(self):
        """One shared non-root user, no privilege escalation, refit's containers with
        requests and limits and a read-only root, IPC_LOCK (and nothing else) where memory is
        registered, tolerations for tainted GPU nodes, a native sidecar, /dev/shm sized for a
        70B model's host path, TLS and token files that come from mounted Secrets."""
        users, refitds = set(), 0
        for name, document in manifests():
            spec, _ = pod_spec(document)
            if spec is None:
                continue
            with self.subTest(file=name):
                context = spec["securityContext"]
                self.assertTrue(context["runAsNonRoot"])
                self.assertEqual(context["seccompProfile"]["type"], "RuntimeDefault")
                self.assertFalse(spec.get("automountServiceAccountToken", True))
                users.add((context["runAsUser"], context["runAsGroup"]))
                secret_mounts = {}
                secrets = {v["name"] for v in spec.get("volumes", []) if "secret" in v}
                init = spec.get("initContainers", [])
                for container in init + spec["containers"]:
                    self.assertFalse(container["securityContext"]["allowPrivilegeEscalation"])
                    for mount in container.get("volumeMounts", []):
                        if mount["name"] in secrets:
                            secret_mounts[mount["mountPath"]] = container["name"]
                    binary = container.get("command", [""])[0]
                    if binary not in BINARY_SOURCES:
                        continue
                    security = container["securityContext"]
                    self.assertTrue(security["readOnlyRootFilesystem"])
                    self.assertEqual(security["capabilities"]["drop"], ["ALL"])
                    for kind in ("requests", "limits"):
                        self.assertLessEqual({"cpu", "memory"}, set(container["resources"][kind]))
                    if binary == "refitd":
                        refitds += 1
                        self.assertEqual(security["capabilities"]["add"], ["IPC_LOCK"])
                        self.assertTrue(any(t["key"] == "nvidia.com/gpu"
                                            for t in spec.get("tolerations", [])))
                        env = {e["name"]: e.get("value") for e in container["env"]}
                        files = [env[k] for k in ("REFIT_TLS_CA", "REFIT_TLS_CERT",
                                                  "REFIT_TLS_KEY", "REFIT_DAEMON_TOKEN_FILE")]
                        if container in init:  # a sidecar: native, beside the workload
                            self.assertEqual(container["restartPolicy"], "Always")
                            shm = next(v for v in spec["volumes"] if v["name"] == "shm")
                            self.assertGreaterEqual(
                                int(shm["emptyDir"]["sizeLimit"].rstrip("Gi")), 160)
                    else:
                        args = dict(a.split("=", 1) for a in container["args"])
                        files = [args[f] for f in ("--tls_cert", "--tls_key", "--tls_client_ca",
                                                   "--token_file", "--daemon_token_file")]
                    for path in files:
                        self.assertTrue(any(path.startswith(m + "/") for m in secret_mounts),
                                        f"{path} is not in a mounted Secret")
        self.assertEqual(len(users), 1, "refitd and the ranks must share a user")
        self.assertEqual(refitds, 2)

    def test_the_service_reaches_the_coordinator_pods(self):
        documents = [d for _, d in manifests()]
        service = next(d for d in documents if d["kind"] == "Service")
        deployment = next(d for d in documents if d["kind"] == "Deployment")
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        for key, value in service["spec"]["selector"].items():
            self.assertEqual(labels.get(key), value)
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        names = {p["name"] for p in container["ports"]}
        for port in service["spec"]["ports"]:
            self.assertIn(port["targetPort"], names)
        config = next(d for d in documents if d["kind"] == "ConfigMap")
        job = json.loads(config["data"]["job.json"])
        self.assertTrue(job["name"])


class SystemdUnitsTest(unittest.TestCase):
    def test_units_start_refit_binaries_with_their_flags(self):
        units = sorted(glob.glob(os.path.join(ROOT, "deploy/systemd/*.service")))
        self.assertEqual(len(units), 2)
        for path in units:
            with self.subTest(unit=os.path.basename(path)):
                unit = configparser.ConfigParser(strict=False, interpolation=None)
                unit.read(path)
                for section in ("Unit", "Service", "Install"):
                    self.assertIn(section, unit)
                command = unit["Service"]["ExecStart"].split()
                binary = os.path.basename(command[0])
                self.assertIn(binary, BINARY_SOURCES)
                self.assertLessEqual(used_flags(command[1:]), flags_of(binary))
                self.assertEqual(unit["Service"]["Restart"], "always")


class GrafanaDashboardTest(unittest.TestCase):
    def test_every_query_reads_metrics_refit_exports(self):
        with open(os.path.join(ROOT, "deploy/grafana/refit-dashboard.json")) as f:
            dashboard = json.load(f)
        exported = exported_metrics()
        suffixes = ("_bucket", "_sum", "_count")
        ids = [p["id"] for p in dashboard["panels"]]
        self.assertEqual(len(ids), len(set(ids)))
        queried = set()
        for panel in dashboard["panels"]:
            with self.subTest(panel=panel["title"]):
                grid = panel["gridPos"]
                self.assertLessEqual(grid["x"] + grid["w"], 24)
                self.assertTrue(panel["targets"])
                for target in panel["targets"]:
                    for name in re.findall(r"\b(refitd?_[a-z_]+)", target["expr"]):
                        base = next((name[:-len(s)] for s in suffixes if name.endswith(s)
                                     and name[:-len(s)] in exported), name)
                        self.assertIn(base, exported, f"{name} is not a refit metric")
                        queried.add(base)
        # The dashboard covers what the issue asks: latency, throughput per route and per
        # node, failures, the version per destination.
        for needed in ("refit_epoch_duration_seconds", "refit_bytes_total", "refitd_bytes_total",
                       "refit_epochs_total", "refitd_destination_version"):
            self.assertIn(needed, queried)


class JobFilesTest(unittest.TestCase):
    def test_a_job_per_reference_refit(self):
        names = set()
        for path in glob.glob(os.path.join(ROOT, "deploy/jobs/*.json")):
            with open(path) as f:
                names.add(json.load(f)["name"])
        self.assertLessEqual({"mini", "dsv3-h100", "dsv3-gb200", "qwen3-235b"}, names)


if __name__ == "__main__":
    unittest.main(verbosity=2)
