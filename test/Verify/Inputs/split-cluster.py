#!/usr/bin/env python3
"""split-cluster.py NODES DEVICES_PER_NODE OUT.json < CLUSTER.json

A cluster (stpar cluster show NAME --json) regrouped into NODES nodes of
DEVICES_PER_NODE devices, one network card per node and a network latency
of 100 us, for tests whose expert groups must span nodes (BaGuaLu's
hierarchical all-to-all) on few ranks."""
import json
import sys

nodes, per_node, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
cluster = json.load(sys.stdin)
cluster["name"] = f"{cluster['name']}-{nodes}x{per_node}"
cluster["nodes"] = nodes
cluster["devices_per_node"] = per_node
cluster["inter_node"]["nics_per_node"] = 1
cluster["inter_node"]["latency"] = 1e-4
cluster["source"] = (f"test: {cluster['source']}, regrouped into {nodes} "
                     f"nodes of {per_node} with one NIC each")
json.dump(cluster, open(out, "w"), indent=1)
