//===- ClusterTest.cpp - presets, JSON format, validation -----------------===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/Cluster.h"

#include <gtest/gtest.h>

using namespace stpar::cost;

TEST(ClusterTest, Presets) {
  llvm::Expected<Cluster> v100 = getPreset("v100-sxm2-32g-4x8");
  ASSERT_TRUE(bool(v100));
  EXPECT_EQ(v100->getNumDevices(), 32);
  EXPECT_EQ(v100->device.hbmCapacity, 34359738368);   // 32 GiB, bytes
  // PrimePar's testbed read as hardware: 6 NVLink 2 links of 25 GB/s per
  // direction; one 100 Gb/s EDR port per node shared by 4 GPUs.
  EXPECT_EQ(v100->intraNode.units, 6);
  EXPECT_DOUBLE_EQ(v100->intraNode.bandwidth, 150e9); // bytes/s
  EXPECT_EQ(v100->interNode.units, 1);
  EXPECT_DOUBLE_EQ(v100->interNode.unitBandwidth, 12.5e9);
  EXPECT_DOUBLE_EQ(v100->interNode.bandwidth, 3.125e9); // bytes/s
  EXPECT_EQ(v100->device.getPeak(DType::BF16), 0);    // no bf16 on V100

  llvm::Expected<Cluster> a100 = getPreset("dgx-a100-80g-4");
  ASSERT_TRUE(bool(a100));
  EXPECT_EQ(a100->getNumDevices(), 32);
  EXPECT_DOUBLE_EQ(a100->device.getPeak(DType::BF16), 312e12); // FLOP/s
  // 8 x 200 Gb/s HDR per node = 200 GB/s per node = 25 GB/s per GPU.
  EXPECT_DOUBLE_EQ(a100->interNode.bandwidth, 25e9);
  // NVSwitch: 12 NVLink 3 links of 25 GB/s = 300 GB/s one way per GPU.
  EXPECT_DOUBLE_EQ(a100->intraNode.bandwidth, 300e9);

  llvm::Expected<Cluster> h200 = getPreset("hgx-h200-2");
  ASSERT_TRUE(bool(h200));
  EXPECT_DOUBLE_EQ(h200->device.hbmBandwidth, 4.8e12);
  EXPECT_DOUBLE_EQ(h200->intraNode.bandwidth, 450e9);
  EXPECT_DOUBLE_EQ(h200->interNode.bandwidth, 50e9); // 8 x 400 Gb/s / 8
  EXPECT_TRUE(bool(getPreset("dgx-h100-16")));

  for (const char *bad : {"dgx-a100-80g-0", "dgx-a100-80g-", "tpu-v4", ""}) {
    llvm::Expected<Cluster> c = getPreset(bad);
    ASSERT_FALSE(bool(c)) << bad;
    EXPECT_NE(llvm::toString(c.takeError()).find("unknown cluster preset"),
              std::string::npos);
  }
}

static const char *kValid = R"({
  "name": "tiny", "nodes": 2, "devices_per_node": 4,
  "device": {"fp32": 1.0e13, "bf16": 1.0e14, "hbm_capacity": 1073741824,
             "hbm_bandwidth": 1.0e12},
  "intra_node": {"bandwidth": 1.0e11, "latency": 1.0e-6},
  "inter_node": {"bandwidth": 1.0e10, "latency": 2.0e-6}
})";

TEST(ClusterTest, ParseAndRoundTrip) {
  llvm::Expected<Cluster> c = parseClusterJSON(kValid, "t.json");
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  EXPECT_EQ(c->name, "tiny");
  EXPECT_EQ(c->getNumDevices(), 8);
  EXPECT_DOUBLE_EQ(c->device.getPeak(DType::BF16), 1e14);
  EXPECT_EQ(c->device.getPeak(DType::FP16), 0);
  EXPECT_DOUBLE_EQ(c->interNode.latency, 2e-6);
  std::string text;
  llvm::raw_string_ostream os(text);
  os << toJSON(*c);
  llvm::Expected<Cluster> again = parseClusterJSON(text, "again.json");
  ASSERT_TRUE(bool(again));
  EXPECT_EQ(again->device.hbmCapacity, c->device.hbmCapacity);
  EXPECT_DOUBLE_EQ(again->intraNode.bandwidth, c->intraNode.bandwidth);
}

// The same tiny cluster described as hardware: 4 links of 25 GB/s per
// device; 2 NICs of 20 GB/s per node shared by 4 devices = 10 GB/s each.
static const char *kHardware = R"({
  "name": "tiny", "nodes": 2, "devices_per_node": 4,
  "device": {"fp32": 1.0e13, "hbm_capacity": 1073741824,
             "hbm_bandwidth": 1.0e12},
  "intra_node": {"links_per_device": 4, "link_bandwidth": 2.5e10,
                 "latency": 1.0e-6},
  "inter_node": {"nics_per_node": 2, "nic_bandwidth": 2.0e10,
                 "latency": 2.0e-6}
})";

TEST(ClusterTest, HardwareLinks) {
  llvm::Expected<Cluster> c = parseClusterJSON(kHardware, "h.json");
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  EXPECT_DOUBLE_EQ(c->intraNode.bandwidth, 1e11);
  EXPECT_DOUBLE_EQ(c->interNode.bandwidth, 1e10);
  // The hardware form round-trips as such.
  std::string text;
  llvm::raw_string_ostream os(text);
  os << toJSON(*c);
  EXPECT_NE(text.find("\"nics_per_node\":2"), std::string::npos) << text;
  EXPECT_EQ(text.find("\"bandwidth\""), std::string::npos) << text;
  llvm::Expected<Cluster> again = parseClusterJSON(text, "again.json");
  ASSERT_TRUE(bool(again));
  EXPECT_DOUBLE_EQ(again->interNode.bandwidth, 1e10);
  EXPECT_EQ(again->intraNode.units, 4);
}

static std::string errorOf(const std::string &text) {
  llvm::Expected<Cluster> c = parseClusterJSON(text, "f.json");
  if (c)
    return "";
  return llvm::toString(c.takeError());
}

static std::string replace(std::string s, const std::string &from,
                           const std::string &to) {
  size_t pos = s.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  return s.replace(pos, from.size(), to);
}

TEST(ClusterTest, Diagnostics) {
  EXPECT_EQ(errorOf(replace(kValid, "\"devices_per_node\": 4,", "")),
            "f.json: field 'devices_per_node': missing");
  EXPECT_EQ(errorOf(replace(kValid, "\"bandwidth\": 1.0e10",
                            "\"bandwidth\": -1.0e10")),
            "f.json: field 'inter_node.bandwidth': must be positive");
  EXPECT_EQ(errorOf(replace(kValid, "\"latency\": 1.0e-6", "\"latency\": -1")),
            "f.json: field 'intra_node.latency': must be non-negative");
  EXPECT_EQ(errorOf(replace(kValid, "\"nodes\": 2", "\"nodes\": 0")),
            "f.json: field 'nodes': must be a positive integer");
  EXPECT_EQ(errorOf(replace(kValid, "\"nodes\": 2", "\"nodes\": 2.5")),
            "f.json: field 'nodes': must be an integer");
  EXPECT_EQ(errorOf(replace(kValid, "\"fp32\"", "\"fp23\"")),
            "f.json: field 'device.fp23': unknown field");
  EXPECT_EQ(errorOf(replace(kValid, "\"hbm_bandwidth\": 1.0e12",
                            "\"hbm_bandwidth\": \"fast\"")),
            "f.json: field 'device.hbm_bandwidth': must be a number");
  EXPECT_NE(errorOf("{").find("f.json: invalid JSON"), std::string::npos);
  // Hardware link descriptions: exactly one form per level, positive counts.
  EXPECT_EQ(errorOf(replace(kHardware, "\"nic_bandwidth\": 2.0e10",
                            "\"nic_bandwidth\": 2.0e10, \"bandwidth\": 1")),
            "f.json: field 'inter_node.bandwidth': give either 'bandwidth' or "
            "'nics_per_node' and 'nic_bandwidth', not both");
  EXPECT_EQ(errorOf(replace(kHardware, "\"links_per_device\": 4",
                            "\"links_per_device\": 0")),
            "f.json: field 'intra_node.links_per_device': must be a positive "
            "integer");
  EXPECT_EQ(errorOf(replace(kHardware, "\"nic_bandwidth\": 2.0e10,", "")),
            "f.json: field 'inter_node.nic_bandwidth': missing");
  EXPECT_EQ(errorOf(replace(kHardware, "\"link_bandwidth\": 2.5e10",
                            "\"link_bandwidth\": -1")),
            "f.json: field 'intra_node.link_bandwidth': must be positive");
  EXPECT_EQ(errorOf(kHardware), "");
  EXPECT_EQ(errorOf(kValid), "");
}
