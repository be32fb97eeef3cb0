// RUN: stpar-opt %s -split-input-file -verify-diagnostics

// Device figures must be positive.
// expected-error @+1 {{device peak 'fp32' must be a positive FLOP/s, got -1}}
func.func @f() attributes {d = #stp.device<fp32 = -1.0, hbm_capacity = 1, hbm_bandwidth = 1.0>}

// -----

// An optional peak given as zero is an error (omit it instead).
// expected-error @+1 {{device peak 'bf16' must be a positive FLOP/s (omit it if the device has none), got 0}}
func.func @f() attributes {d = #stp.device<fp32 = 1.0, bf16 = 0, hbm_capacity = 1, hbm_bandwidth = 1.0>}

// -----

// expected-error @+1 {{device 'hbm_capacity' must be a positive number of bytes, got 0}}
func.func @f() attributes {d = #stp.device<fp32 = 1.0, hbm_capacity = 0, hbm_bandwidth = 1.0>}

// -----

// expected-error @+1 {{device 'hbm_bandwidth' must be a positive bytes/s, got -2}}
func.func @f() attributes {d = #stp.device<fp32 = 1.0, hbm_capacity = 8, hbm_bandwidth = -2>}

// -----

// expected-error @+1 {{link 'bandwidth' must be a positive bytes/s, got 0}}
func.func @f() attributes {l = #stp.link<bandwidth = 0, latency = 1.0e-6>}

// -----

// expected-error @+1 {{link 'latency' must be a non-negative number of seconds, got -1}}
func.func @f() attributes {l = #stp.link<bandwidth = 1.0e9, latency = -1.0e-6>}

// -----

#dev = #stp.device<fp32 = 1.0, hbm_capacity = 8, hbm_bandwidth = 1.0>
#link = #stp.link<bandwidth = 1.0, latency = 0>
// expected-error @+1 {{cluster 'nodes' must be at least 1, got 0}}
func.func @f() attributes {c = #stp.cluster<nodes = 0, devices_per_node = 4, device = #dev, intra_node = #link, inter_node = #link>}

// -----

#dev = #stp.device<fp32 = 1.0, hbm_capacity = 8, hbm_bandwidth = 1.0>
#link = #stp.link<bandwidth = 1.0, latency = 0>
// expected-error @+1 {{cluster 'devices_per_node' must be at least 1, got -4}}
func.func @f() attributes {c = #stp.cluster<nodes = 1, devices_per_node = -4, device = #dev, intra_node = #link, inter_node = #link>}

// -----

// expected-error @+1 {{mesh axis "tp" must have a size of at least 1, got 0}}
func.func @f() attributes {a = #stp.axis<"tp" = 0>}

// -----

#dev = #stp.device<fp32 = 1.0, hbm_capacity = 8, hbm_bandwidth = 1.0>
#link = #stp.link<bandwidth = 1.0, latency = 0>
#cl = #stp.cluster<nodes = 2, devices_per_node = 4, device = #dev, intra_node = #link, inter_node = #link>
// expected-error @+1 {{duplicate mesh axis name "x"}}
func.func @f() attributes {m = #stp.mesh<#cl, ["x" = 2, "x" = 4]>}

// -----

#dev = #stp.device<fp32 = 1.0, hbm_capacity = 8, hbm_bandwidth = 1.0>
#link = #stp.link<bandwidth = 1.0, latency = 0>
#cl = #stp.cluster<nodes = 2, devices_per_node = 4, device = #dev, intra_node = #link, inter_node = #link>
// expected-error @+1 {{mesh axis sizes multiply to 6 but the cluster has 8 devices (2 nodes x 4)}}
func.func @f() attributes {m = #stp.mesh<#cl, ["x" = 2, "y" = 3]>}

// -----

#dev = #stp.device<fp32 = 1.0, hbm_capacity = 8, hbm_bandwidth = 1.0>
#link = #stp.link<bandwidth = 1.0, latency = 0>
#cl = #stp.cluster<nodes = 1, devices_per_node = 8, device = #dev, intra_node = #link, inter_node = #link>
#mesh = #stp.mesh<#cl, ["dp" = 2, "x" = 2, "y" = 2]>
// expected-error @+1 {{unknown mesh axis "tp" in the split of loop "k"}}
func.func @f() attributes {stp.spec = #stp.spec<#mesh, loops = ["m" = 8, "k" = 8 {"tp"}]>}

// -----

#dev = #stp.device<fp32 = 1.0, hbm_capacity = 8, hbm_bandwidth = 1.0>
#link = #stp.link<bandwidth = 1.0, latency = 0>
#cl = #stp.cluster<nodes = 1, devices_per_node = 8, device = #dev, intra_node = #link, inter_node = #link>
#mesh = #stp.mesh<#cl, ["dp" = 2, "x" = 2, "y" = 2]>
// expected-error @+1 {{mesh axis "x" is used twice in one partition spec: in the split of loop "m" and in the split of loop "k"}}
func.func @f() attributes {stp.spec = #stp.spec<#mesh, loops = ["m" = 8 {"x"}, "k" = 8 {"y", "x"}]>}

// -----

#dev = #stp.device<fp32 = 1.0, hbm_capacity = 8, hbm_bandwidth = 1.0>
#link = #stp.link<bandwidth = 1.0, latency = 0>
#cl = #stp.cluster<nodes = 1, devices_per_node = 8, device = #dev, intra_node = #link, inter_node = #link>
#mesh = #stp.mesh<#cl, ["dp" = 2, "x" = 2, "y" = 2]>
// expected-error @+1 {{mesh axis "x" is used twice in one partition spec: in the split of loop "b" and in the temporal grid}}
func.func @f() attributes {stp.spec = #stp.spec<#mesh, loops = ["b" = 4 {"x"}, "m" = 8, "n" = 8 reduction, "k" = 8], temporal = <grid = ["x", "y"], matmul = ["m", "n", "k"], steps = 2>>}

// -----

#dev = #stp.device<fp32 = 1.0, hbm_capacity = 8, hbm_bandwidth = 1.0>
#link = #stp.link<bandwidth = 1.0, latency = 0>
#cl = #stp.cluster<nodes = 1, devices_per_node = 8, device = #dev, intra_node = #link, inter_node = #link>
#mesh = #stp.mesh<#cl, ["dp" = 2, "x" = 4]>
// expected-error @+1 {{temporal grid is not square: axis "dp" has 2 devices, axis "x" has 4}}
func.func @f() attributes {stp.spec = #stp.spec<#mesh, loops = ["m" = 8, "n" = 8 reduction, "k" = 8], temporal = <grid = ["dp", "x"], matmul = ["m", "n", "k"], steps = 2>>}

// -----

#dev = #stp.device<fp32 = 1.0, hbm_capacity = 8, hbm_bandwidth = 1.0>
#link = #stp.link<bandwidth = 1.0, latency = 0>
#cl = #stp.cluster<nodes = 1, devices_per_node = 8, device = #dev, intra_node = #link, inter_node = #link>
#mesh = #stp.mesh<#cl, ["dp" = 2, "x" = 2, "y" = 2]>
// expected-error @+1 {{temporal primitive on a 2x2 grid needs 2 steps, got 4}}
func.func @f() attributes {stp.spec = #stp.spec<#mesh, loops = ["m" = 8, "n" = 8 reduction, "k" = 8], temporal = <grid = ["x", "y"], matmul = ["m", "n", "k"], steps = 4>>}

// -----

#dev = #stp.device<fp32 = 1.0, hbm_capacity = 8, hbm_bandwidth = 1.0>
#link = #stp.link<bandwidth = 1.0, latency = 0>
#cl = #stp.cluster<nodes = 1, devices_per_node = 8, device = #dev, intra_node = #link, inter_node = #link>
#mesh = #stp.mesh<#cl, ["dp" = 2, "x" = 2, "y" = 2]>
// expected-error @+1 {{temporal grid uses mesh axis "x" twice}}
func.func @f() attributes {stp.spec = #stp.spec<#mesh, loops = ["m" = 8, "n" = 8 reduction, "k" = 8], temporal = <grid = ["x", "x"], matmul = ["m", "n", "k"], steps = 2>>}

// -----

#dev = #stp.device<fp32 = 1.0, hbm_capacity = 8, hbm_bandwidth = 1.0>
#link = #stp.link<bandwidth = 1.0, latency = 0>
#cl = #stp.cluster<nodes = 1, devices_per_node = 8, device = #dev, intra_node = #link, inter_node = #link>
#mesh = #stp.mesh<#cl, ["dp" = 2, "x" = 2, "y" = 2]>
// expected-error @+1 {{loop "k" of extent 10 is not divisible into its 4 pieces; mark it 'padded' to pad it to 12}}
func.func @f() attributes {stp.spec = #stp.spec<#mesh, loops = ["m" = 8, "k" = 10 {"x", "y"}]>}

// -----

#dev = #stp.device<fp32 = 1.0, hbm_capacity = 8, hbm_bandwidth = 1.0>
#link = #stp.link<bandwidth = 1.0, latency = 0>
#cl = #stp.cluster<nodes = 1, devices_per_node = 8, device = #dev, intra_node = #link, inter_node = #link>
#mesh = #stp.mesh<#cl, ["dp" = 2, "x" = 2, "y" = 2]>
// A temporal dim is cut into q slices too: 6 / (2 x 2) does not divide.
// expected-error @+1 {{loop "m" of extent 6 is not divisible into its 4 pieces; mark it 'padded' to pad it to 8}}
func.func @f() attributes {stp.spec = #stp.spec<#mesh, loops = ["m" = 6 {"dp"}, "n" = 8 reduction, "k" = 8], temporal = <grid = ["x", "y"], matmul = ["m", "n", "k"], steps = 2>>}

// -----

#dev = #stp.device<fp32 = 1.0, hbm_capacity = 8, hbm_bandwidth = 1.0>
#link = #stp.link<bandwidth = 1.0, latency = 0>
#cl = #stp.cluster<nodes = 1, devices_per_node = 8, device = #dev, intra_node = #link, inter_node = #link>
#mesh = #stp.mesh<#cl, ["dp" = 2, "x" = 2, "y" = 2]>
// expected-error @+1 {{temporal dims M, N, K must be one reduction loop and two parallel loops (N reduced in the forward product, K in the input gradient, M in the weight gradient), got 0 reduction loops}}
func.func @f() attributes {stp.spec = #stp.spec<#mesh, loops = ["m" = 8, "n" = 8, "k" = 8], temporal = <grid = ["x", "y"], matmul = ["m", "n", "k"], steps = 2>>}

// -----

#dev = #stp.device<fp32 = 1.0, hbm_capacity = 8, hbm_bandwidth = 1.0>
#link = #stp.link<bandwidth = 1.0, latency = 0>
#cl = #stp.cluster<nodes = 1, devices_per_node = 8, device = #dev, intra_node = #link, inter_node = #link>
#mesh = #stp.mesh<#cl, ["dp" = 2, "x" = 2, "y" = 2]>
// expected-error @+1 {{temporal dim K names loop "h", which the spec does not have}}
func.func @f() attributes {stp.spec = #stp.spec<#mesh, loops = ["m" = 8, "n" = 8 reduction, "k" = 8], temporal = <grid = ["x", "y"], matmul = ["m", "n", "h"], steps = 2>>}

// -----

#dev = #stp.device<fp32 = 1.0, hbm_capacity = 8, hbm_bandwidth = 1.0>
#link = #stp.link<bandwidth = 1.0, latency = 0>
#cl = #stp.cluster<nodes = 1, devices_per_node = 8, device = #dev, intra_node = #link, inter_node = #link>
#mesh = #stp.mesh<#cl, ["dp" = 2, "x" = 2, "y" = 2]>
// I's slice (M, N) = (r, r + t) does not depend on c: a whole grid row
// holds the same slice, which the primitive must never do.
// expected-error @+1 {{temporal rule 'forward' replicates slice (M=0, N=0) of operand I at step 0: devices (0, 0) and (0, 1) both use it}}
func.func @f() attributes {stp.spec = #stp.spec<#mesh, loops = ["m" = 8, "n" = 8 reduction, "k" = 8], temporal = <grid = ["x", "y"], matmul = ["m", "n", "k"], steps = 2, forward = (r, c, t) -> (r, r + t, c)>>}

// -----

#dev = #stp.device<fp32 = 1.0, hbm_capacity = 8, hbm_bandwidth = 1.0>
#link = #stp.link<bandwidth = 1.0, latency = 0>
#cl = #stp.cluster<nodes = 1, devices_per_node = 8, device = #dev, intra_node = #link, inter_node = #link>
#mesh = #stp.mesh<#cl, ["dp" = 2, "x" = 2, "y" = 2]>
// A rule that ignores the step recomputes the same block at every step.
// expected-error @+1 {{temporal rule 'input_grad' computes block (M=0, N=1, K=0) twice: device (0, 0) at step 0 and device (0, 0) at step 1}}
func.func @f() attributes {stp.spec = #stp.spec<#mesh, loops = ["m" = 8, "n" = 8 reduction, "k" = 8], temporal = <grid = ["x", "y"], matmul = ["m", "n", "k"], steps = 2, input_grad = (r, c, t) -> (r, r + c - 1, c)>>}

// -----

// expected-error @+1 {{temporal rule 'forward' must map (r, c, t)[d] to (M, N, K) slice indices: 3 dims, at most 1 symbol, 3 results}}
func.func @f() attributes {t = #stp.temporal<grid = ["x", "y"], matmul = ["m", "n", "k"], steps = 2, forward = (r, c) -> (r, c, r)>}

// -----

// expected-error @+1 {{'grid' needs 2 names, got 3}}
func.func @f() attributes {t = #stp.temporal<grid = ["x", "y", "z"], matmul = ["m", "n", "k"], steps = 2>}

// -----

// expected-error @+1 {{expected 'forward', 'input_grad' or 'weight_grad' (in this order), got 'backward'}}
func.func @f() attributes {t = #stp.temporal<grid = ["x", "y"], matmul = ["m", "n", "k"], steps = 2, backward = (r, c, t) -> (r, c, t)>}

// -----

#dev = #stp.device<fp32 = 1.0, hbm_capacity = 8, hbm_bandwidth = 1.0>
#link = #stp.link<bandwidth = 1.0, latency = 0>
#cl = #stp.cluster<nodes = 1, devices_per_node = 8, device = #dev, intra_node = #link, inter_node = #link>
#mesh = #stp.mesh<#cl, ["dp" = 8]>
// expected-error @+1 {{duplicate loop dimension "m"}}
func.func @f() attributes {stp.spec = #stp.spec<#mesh, loops = ["m" = 8, "m" = 8 reduction]>}

// -----

// expected-error @+1 {{loop dimension "m" must have an extent of at least 1, got 0}}
func.func @f() attributes {l = #stp.loop<"m" = 0>}

// -----

// expected-error @+1 {{attribute 'stp.mesh' must be a #stp.mesh, got 3 : i64}}
module attributes {stp.mesh = 3} {}

// -----

// expected-error @+1 {{unknown stp attribute 'stp.planned' (expected 'stp.mesh', 'stp.spec', 'stp.composite', 'stp.group', 'stp.plan', 'stp.plan_ops', 'stp.dims', a memory-plan attribute or a marker of the partitioned program)}}
module attributes {stp.planned = 3} {}

// -----

// expected-error @+1 {{attribute 'stp.plan' must be a dictionary}}
module attributes {stp.plan = 3} {}

// -----

module {
  // expected-error @+1 {{attribute 'stp.plan_ops' must be an array of dictionaries}}
  func.func private @f() attributes {stp.plan_ops = [1]}
}

// -----

// expected-error @+1 {{attribute 'stp.composite' must be "gelu" or "moe", got "relu"}}
module attributes {stp.composite = "relu"} {}

// -----

// expected-error @+1 {{attribute 'stp.group' must be a non-negative integer, got -1 : i64}}
module attributes {stp.group = -1 : i64} {}

// -----

#dev = #stp.device<fp32 = 1.0, hbm_capacity = 8, hbm_bandwidth = 1.0>
#link = #stp.link<bandwidth = 1.0, latency = 0>
#cl = #stp.cluster<nodes = 1, devices_per_node = 8, device = #dev, intra_node = #link, inter_node = #link>
module attributes {stp.mesh = #stp.mesh<#cl, ["dp" = 8]>} {
  // expected-error @+1 {{'func.func' op partition spec's mesh differs from the enclosing 'stp.mesh' attribute}}
  func.func @f() attributes {stp.spec = #stp.spec<#stp.mesh<#cl, ["tp" = 8]>, loops = ["m" = 8 {"tp"}]>} {
    return
  }
}

// -----

// expected-error @+1 {{attribute 'stp.dims' must be a dictionary of non-negative integers}}
module attributes {stp.dims = {batch = -1 : i64}} {}

// -----

// The pipeline markers of -stp-pipeline-stages are non-negative integers.
// expected-error @+1 {{attribute 'stp.transfer_group' must be a non-negative integer}}
module attributes {stp.transfer_group = -1 : i64} {}

// -----

// expected-error @+1 {{attribute 'stp.stage' must be a non-negative integer}}
module attributes {stp.stage = "first"} {}
