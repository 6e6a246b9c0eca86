"""The testkit's Redis topologies themselves (tests/testkit/cluster.py, sentinel.py and
their `python3 -m testkit cluster|sentinel` command): each comes up as it says,
follows the changes the integration tests make (reshard, kill, failover), and
leaves no process behind once stopped. No gateway is involved.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

from harness import SANITIZED, SOURCE_DIR, redis_call, wait_until
from testkit.cluster import SLOTS, RedisCluster, info_fields
from testkit.configs import redis_settings, set_redis_topology
from testkit.procfs import running
from testkit.sentinel import MASTER_NAME, RedisSentinelSet, pairs

TESTS_DIR = os.path.join(SOURCE_DIR, "tests")
# These run no gateway: the sanitizer pass (CI's second) has nothing to find here.
NOT_THE_GATEWAY = "no gateway runs here; the plain suite covers the testkit"


def require(*binaries):
    missing = [b for b in binaries if not shutil.which(b)]
    if missing:
        raise unittest.SkipTest(f"not installed: {', '.join(missing)}")


@unittest.skipIf(SANITIZED, NOT_THE_GATEWAY)
class ClusterLauncherTest(unittest.TestCase):
    def test_cluster_up_reshard_kill_and_stop(self):
        require("redis-server", "redis-cli")
        cluster = RedisCluster()
        self.addCleanup(cluster.stop)
        pids, workdir = cluster.pids(), cluster.workdir
        self.assertEqual(len(pids), 6)
        for node in cluster.nodes:
            info = info_fields(redis_call(node.port, "CLUSTER", "INFO"))
            self.assertEqual((info["cluster_state"], info["cluster_slots_ok"],
                              info["cluster_known_nodes"]), ("ok", str(SLOTS), "6"), node.name)
        primaries = cluster.primaries()
        self.assertEqual(len(primaries), 3)
        self.assertEqual(sum(last - first + 1 for _, ranges in primaries
                             for first, last in ranges), SLOTS)
        for node, _ in primaries:
            self.assertEqual(redis_call(node.port, "ROLE")[0], b"master")
        replicas = cluster.replicas()
        self.assertEqual(len(replicas), 3)
        self.assertEqual({redis_call(n.port, "ROLE")[3] for n in replicas}, {b"connected"})
        self.assertEqual(cluster.key_slot("foo"), 12182)  # a value the CRC16 tests know too
        self.assertEqual(cluster.node_for_slot(12182), primaries[2][0])

        # A key in the first slot of the first primary follows its slot to the second.
        source, target = primaries[0][0], primaries[1][0]
        key = next(f"k{i}" for i in range(100000) if cluster.key_slot(f"k{i}") == 0)
        self.assertEqual(redis_call(source.port, "SET", key, "kept"), "OK")
        cluster.reshard(5, source, target)
        self.assertIs(cluster.node_for_slot(0), target)
        self.assertIs(cluster.node_for_slot(5), source)
        self.assertEqual(redis_call(target.port, "GET", key), b"kept")
        self.assertIn("MOVED", str(redis_call(source.port, "GET", key)))

        # A killed primary's replica takes over; the node comes back as a replica.
        victim = primaries[2][0]
        cluster.kill(victim)
        self.assertFalse(running(victim.pid))
        cluster.wait_until_ok(2 * cluster.node_timeout_ms / 1000 + 10)
        heir = cluster.node_for_slot(12182)
        self.assertIsNot(heir, victim)
        self.assertEqual(redis_call(heir.port, "ROLE")[0], b"master")
        back = cluster.restart(victim)
        cluster.wait_until_ok(20)
        self.assertEqual(redis_call(back.port, "ROLE")[0], b"slave")

        pids = cluster.pids()
        cluster.stop()
        self.assertEqual([p for p in pids if running(p)], [])
        self.assertFalse(os.path.exists(workdir))


@unittest.skipIf(SANITIZED, NOT_THE_GATEWAY)
class SentinelLauncherTest(unittest.TestCase):
    def test_sentinel_set_up_failover_kill_and_stop(self):
        require("redis-server", "redis-sentinel")
        group = RedisSentinelSet()
        self.addCleanup(group.stop)
        self.assertEqual(len(group.pids()), 5)
        primary, replica = group.data
        self.assertIs(group.primary(), primary)
        self.assertEqual(group.role(primary), "master")
        self.assertEqual(group.role(replica), "slave")
        self.assertEqual(len(group.sentinels()), 3)
        for sentinel in group.sentinel_processes:
            [master] = [pairs(m) for m in redis_call(sentinel.port, "SENTINEL", "MASTERS")]
            self.assertEqual((master["name"], master["port"], master["num-slaves"],
                              master["num-other-sentinels"], master["quorum"]),
                             (MASTER_NAME, str(primary.port), "1", "2", "2"), master)

        group.failover()
        promoted = group.wait_for_new_primary(primary)
        self.assertIs(promoted, replica)
        self.assertEqual(group.role(replica), "master")

        killed = group.kill_primary()
        self.assertIs(killed, replica)
        self.assertFalse(running(killed.pid))
        survivor = group.wait_for_new_primary(killed, timeout=30)
        self.assertIs(survivor, primary)
        self.assertEqual(group.role(primary), "master")

        pids = group.pids()
        group.stop()
        self.assertEqual([p for p in pids if running(p)], [])


@unittest.skipIf(SANITIZED, NOT_THE_GATEWAY)
class TopologyCommandTest(unittest.TestCase):
    def test_foreground_cluster_prints_ready_and_stops_on_sigterm(self):
        require("redis-server", "redis-cli")
        workdir = tempfile.mkdtemp(prefix="sluice-testkit-cli-")
        self.addCleanup(shutil.rmtree, workdir, True)
        pid_file = os.path.join(workdir, "pids")
        out = open(os.path.join(workdir, "out"), "w+")
        self.addCleanup(out.close)
        command = subprocess.Popen(
            [sys.executable, "-m", "testkit", "cluster", "--workdir", workdir,
             "--pid-file", pid_file], cwd=TESTS_DIR, stdout=out, stderr=subprocess.STDOUT)

        def stop():
            if command.poll() is None:
                command.kill()
                command.wait()
            subprocess.run([sys.executable, "-m", "testkit", "stop", pid_file], cwd=TESTS_DIR)
        self.addCleanup(stop)

        def ready_line():
            if command.poll() is not None:
                raise AssertionError(f"exited with {command.returncode}: {read(out)}")
            return next((line for line in read(out).splitlines() if line.startswith("ready")),
                        None)
        line = wait_until(ready_line, 60, interval=0.1, message="the ready line")
        seeds = line.split("seeds=", 1)[1].split(",")
        self.assertEqual(len(seeds), 6, line)
        port = int(seeds[0].rsplit(":", 1)[1])
        self.assertIn(b"cluster_state:ok", redis_call(port, "CLUSTER", "INFO"))
        with open(pid_file) as f:
            pids = [int(entry.split()[0]) for entry in f if entry.strip()]
        self.assertEqual(len(pids), 6)

        command.send_signal(signal.SIGTERM)
        self.assertEqual(command.wait(30), 0)
        self.assertEqual([p for p in pids if running(p)], [])


def read(f) -> str:
    f.flush()
    f.seek(0)
    return f.read()


@unittest.skipIf(SANITIZED, NOT_THE_GATEWAY)
class TopologyConfigTest(unittest.TestCase):
    def test_redis_section_round_trip(self):
        with open(os.path.join(SOURCE_DIR, "conf", "sluice.yaml")) as f:
            text = f.read()
        self.assertEqual(redis_settings(text)["topology"], "standalone")
        cluster = set_redis_topology(text, "cluster", "redis://127.0.0.1:7000/0",
                                     ["127.0.0.1:7001", "127.0.0.1:7002"])
        self.assertEqual(redis_settings(cluster),
                         {"url": "redis://127.0.0.1:7000/0", "topology": "cluster",
                          "nodes": ["127.0.0.1:7001", "127.0.0.1:7002"], "sentinel_master": ""})
        sentinel = set_redis_topology(cluster, "sentinel", "redis://127.0.0.1:26379/0",
                                      ["127.0.0.1:26380"], "mymaster")
        self.assertEqual(redis_settings(sentinel)["nodes"], ["127.0.0.1:26380"])
        self.assertEqual(redis_settings(sentinel)["sentinel_master"], "mymaster")
        self.assertEqual(sentinel.count("\n  topology:"), 1)  # the old one replaced
        # Everything outside the redis section is untouched.
        self.assertEqual(sentinel[sentinel.index("\nupstreams:"):],
                         text[text.index("\nupstreams:"):])

    def test_block_list_of_nodes_and_environment(self):
        text = ('redis:\n  url: "redis://${SLUICE_T_HOST:-127.0.0.1}:7000/0"  # seed\n'
                '  topology: cluster   # comment\n  nodes:\n    - "127.0.0.1:7001"\n'
                '    - 127.0.0.1:7002\nlimits: {}\n')
        self.assertEqual(redis_settings(text),
                         {"url": "redis://127.0.0.1:7000/0", "topology": "cluster",
                          "nodes": ["127.0.0.1:7001", "127.0.0.1:7002"], "sentinel_master": ""})
        replaced = set_redis_topology(text, "sentinel", "redis://127.0.0.1:1/0", [], "m")
        self.assertNotIn("7001", replaced)
        self.assertTrue(replaced.endswith("limits: {}\n"), replaced)


if __name__ == "__main__":
    unittest.main()
