// RUN: stpar-opt %s -split-input-file -stp-print-mesh-placement -verify-diagnostics -o /dev/null

// 2 DGX nodes: "dp" crosses nodes, "tp" stays on NVSwitch.
#dev = #stp.device<fp32 = 1.95e13, hbm_capacity = 85899345920, hbm_bandwidth = 2.039e12>
#cl = #stp.cluster<nodes = 2, devices_per_node = 8, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 2.5e10, latency = 1.0e-5>>
// expected-remark @below {{mesh axis "dp" size 2 stride 8: inter-node (2 nodes)}}
// expected-remark @below {{mesh axis "tp" size 8 stride 1: intra-node (8 devices)}}
module attributes {stp.mesh = #stp.mesh<#cl, ["dp" = 2, "tp" = 8]>} {}

// -----

// PrimePar's testbed, 8 nodes x 4 V100: a 4x8 mesh whose major axis "x"
// (stride 8) crosses nodes only, and whose minor axis "y" (size 8, stride 1)
// spans 4 devices of a node x 2 nodes: hierarchical.
#dev = #stp.device<fp32 = 1.57e13, hbm_capacity = 34359738368, hbm_bandwidth = 9.0e11>
#cl = #stp.cluster<nodes = 8, devices_per_node = 4, device = #dev,
  intra_node = <bandwidth = 3.0e11, latency = 5.0e-6>,
  inter_node = <bandwidth = 1.0e11, latency = 1.0e-5>>
// expected-remark @below {{mesh axis "x" size 4 stride 8: inter-node (4 nodes)}}
// expected-remark @below {{mesh axis "y" size 8 stride 1: hierarchical (4 devices per node x 2 nodes)}}
module attributes {stp.mesh = #stp.mesh<#cl, ["x" = 4, "y" = 8]>} {}

// -----

// Groups of 3 over nodes of 8 straddle node boundaries.
#dev = #stp.device<fp32 = 1.0, hbm_capacity = 8, hbm_bandwidth = 1.0>
#cl = #stp.cluster<nodes = 3, devices_per_node = 8, device = #dev,
  intra_node = <bandwidth = 1.0, latency = 0>,
  inter_node = <bandwidth = 1.0, latency = 0>>
// expected-remark @below {{mesh axis "a" size 8 stride 3: irregular (groups straddle node boundaries), costed as inter-node}}
// expected-remark @below {{mesh axis "b" size 3 stride 1: irregular (groups straddle node boundaries), costed as inter-node}}
// expected-remark @below {{mesh axis "one" size 1 stride 1: no links (size 1)}}
module attributes {stp.mesh = #stp.mesh<#cl, ["a" = 8, "b" = 3, "one" = 1]>} {}
