"""deploy/kubernetes/: the manifests parse, agree with each other (labels and
selectors, named ports, probes on the admin listener's port and paths, the
config file and secret files the container reads where the volumes put
them, a grace period longer than the preStop hook plus the drain), and the
ConfigMap's configuration passes `sluice --check` with the secrets in place.
"""

import os
import subprocess
import tempfile
import unittest

import yaml

from harness import SOURCE_DIR, SLUICE_BIN

K8S = os.path.join(SOURCE_DIR, "deploy", "kubernetes")


def load_all():
    docs = []
    with open(os.path.join(K8S, "kustomization.yaml")) as f:
        resources = yaml.safe_load(f)["resources"]
    for name in resources:
        with open(os.path.join(K8S, name)) as f:
            docs.extend(doc for doc in yaml.safe_load_all(f) if doc)
    return resources, docs


class KubernetesManifestsTest(unittest.TestCase):
    def setUp(self):
        self.resources, self.docs = load_all()
        self.by_kind = {}
        for doc in self.docs:
            self.by_kind.setdefault(doc["kind"], []).append(doc)

    def one(self, kind):
        self.assertEqual(len(self.by_kind.get(kind, [])), 1, kind)
        return self.by_kind[kind][0]

    def test_every_file_is_listed(self):
        files = sorted(f for f in os.listdir(K8S) if f.endswith(".yaml"))
        self.assertEqual(sorted(self.resources + ["kustomization.yaml"]), files)
        for kind in ("Deployment", "Service", "ConfigMap", "PodDisruptionBudget",
                     "HorizontalPodAutoscaler", "ServiceMonitor"):
            self.one(kind)
        self.assertEqual(len(self.by_kind["Secret"]), 2)

    def config(self):
        return yaml.safe_load(self.one("ConfigMap")["data"]["sluice.yaml"])

    def container(self):
        spec = self.one("Deployment")["spec"]["template"]["spec"]
        self.assertEqual(len(spec["containers"]), 1)
        return spec, spec["containers"][0]

    def mounted_file(self, path):
        """The (volume, key) a file path of the container comes from."""
        spec, container = self.container()
        volumes = {v["name"]: v for v in spec["volumes"]}
        for mount in container["volumeMounts"]:
            prefix = mount["mountPath"].rstrip("/") + "/"
            if path.startswith(prefix):
                return volumes[mount["name"]], path[len(prefix):]
        self.fail(f"{path} is under no volume mount")

    def test_selectors_match_the_pods(self):
        deployment = self.one("Deployment")
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        self.assertEqual(deployment["spec"]["selector"]["matchLabels"], pod_labels)
        for kind in ("PodDisruptionBudget",):
            self.assertEqual(self.one(kind)["spec"]["selector"]["matchLabels"], pod_labels)
        self.assertEqual(self.one("Service")["spec"]["selector"], pod_labels)
        service_labels = self.one("Service")["metadata"]["labels"]
        for key, value in self.one("ServiceMonitor")["spec"]["selector"]["matchLabels"].items():
            self.assertEqual(service_labels.get(key), value)
        target = self.one("HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]
        self.assertEqual((target["kind"], target["name"]),
                         ("Deployment", deployment["metadata"]["name"]))

    def test_ports_and_probes_match_the_listeners(self):
        config = self.config()
        _, container = self.container()
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        self.assertEqual(ports["http"], int(config["server"]["listen"].rsplit(":", 1)[1]))
        self.assertEqual(ports["admin"], int(config["admin"]["listen"].rsplit(":", 1)[1]))
        for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
            get = container[probe]["httpGet"]
            self.assertEqual(get["path"], path)
            self.assertEqual(ports.get(get["port"], get["port"]), ports["admin"])
        service_ports = {p["name"]: p for p in self.one("Service")["spec"]["ports"]}
        for port in service_ports.values():
            self.assertIn(port["targetPort"], ports)
        endpoint = self.one("ServiceMonitor")["spec"]["endpoints"][0]
        self.assertIn(endpoint["port"], service_ports)
        self.assertEqual(service_ports[endpoint["port"]]["targetPort"], "admin")
        self.assertEqual(endpoint["path"], "/metrics")

    def test_config_and_secret_files_are_where_the_volumes_put_them(self):
        _, container = self.container()
        args = container["args"]
        config_path = args[args.index("--config") + 1]
        volume, key = self.mounted_file(config_path)
        self.assertEqual(volume["configMap"]["name"], self.one("ConfigMap")["metadata"]["name"])
        self.assertIn(key, self.one("ConfigMap")["data"])
        secrets = {s["metadata"]["name"]: s for s in self.by_kind["Secret"]}
        config = self.config()
        for path in (config["redis"]["key_secret_file"], config["admin"]["token_file"]):
            volume, key = self.mounted_file(path)
            secret = secrets[volume["secret"]["secretName"]]
            self.assertIn(key, secret["stringData"], path)
        env = {e["name"] for e in container["env"]}
        self.assertLessEqual({"SLUICE_REDIS_URL", "SLUICE_UPSTREAM"}, env)

    def test_the_grace_period_covers_the_hook_and_the_drain(self):
        spec, container = self.container()
        command = container["lifecycle"]["preStop"]["exec"]["command"]
        self.assertEqual(command[0], "/bin/sleep")
        drain_s = self.config()["server"]["drain_timeout_ms"] / 1000
        self.assertGreater(spec["terminationGracePeriodSeconds"], float(command[1]) + drain_s)
        # The image's user (Dockerfile: uid 10001) and a read-only root.
        self.assertEqual(spec["securityContext"]["runAsUser"], 10001)
        self.assertTrue(container["securityContext"]["readOnlyRootFilesystem"])
        self.assertEqual(self.config()["local"]["fleet_size"], 0)  # learned: follows the HPA

    def test_the_configuration_passes_check(self):
        config = self.config()
        with tempfile.TemporaryDirectory() as tmp:
            secrets = {s["metadata"]["name"]: s["stringData"] for s in self.by_kind["Secret"]}
            text = self.one("ConfigMap")["data"]["sluice.yaml"]
            for path in (config["redis"]["key_secret_file"], config["admin"]["token_file"]):
                volume, key = self.mounted_file(path)
                local = os.path.join(tmp, key)
                with open(local, "w") as f:
                    f.write(secrets[volume["secret"]["secretName"]][key])
                text = text.replace(path, local)
            config_file = os.path.join(tmp, "sluice.yaml")
            with open(config_file, "w") as f:
                f.write(text)
            env = dict(os.environ, SLUICE_REDIS_URL="redis://127.0.0.1:6379",
                       SLUICE_UPSTREAM="127.0.0.1:9000")
            result = subprocess.run([SLUICE_BIN, "--check", "--config", config_file], env=env,
                                    capture_output=True, text=True, timeout=30)
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            self.assertIn("configuration OK", result.stdout + result.stderr)


if __name__ == "__main__":
    unittest.main()
