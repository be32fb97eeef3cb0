//===- ProblemTest.cpp - the problem text format --------------------------===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "stpar/Search/GPTProblem.h"
#include "stpar/Search/Problem.h"

#include "gtest/gtest.h"

using namespace llvm;
using namespace stpar::cost;
using namespace stpar::search;

namespace {

std::string print(const Problem &p) {
  std::string s;
  raw_string_ostream os(s);
  printProblem(os, p);
  return s;
}

const char *kSmall = R"(
# two linear layers with a residual, repeated
problem small
cluster v100-sxm2-32g-4x8
devices 4
memory-limit 1e9
batch-loop b
layers 3
op emb embedding section=pre group=embedding flops=0
  loop b 8
  loop h 16
  loop v 32 reduction
  input ids b bytes=8 nograd
  param wte v,h
  output y b,h
op fc matmul section=layer group=mlp flops=2
  loop b 8
  loop k 16
  loop n 16 reduction
  input x b,n
  param w n,k
  output y b,k
op add elementwise section=layer flops=1
  loop b 8
  loop h 16
  input x0 b,h
  input x1 b,h
  output y b,h
edge fc.y -> add.x1
edge add.y -> fc.x next
edge add.y -> add.x0 next
)";

TEST(ProblemFormat, ParsesAndRoundTrips) {
  Expected<Problem> p = parseProblem(kSmall, "small.txt");
  ASSERT_TRUE(bool(p)) << toString(p.takeError());
  EXPECT_EQ(p->name, "small");
  EXPECT_EQ(p->devices, 4);
  ASSERT_TRUE(p->memoryLimit.has_value());
  EXPECT_EQ(*p->memoryLimit, 1e9);
  EXPECT_EQ(p->layers, 3);
  ASSERT_EQ(p->ops.size(), 3u);
  EXPECT_EQ(p->ops[0].kind, OpKind::Embedding);
  EXPECT_FALSE(p->ops[0].operands[0].needsGrad);
  EXPECT_EQ(p->ops[0].operands[0].elementBytes, 8);
  EXPECT_EQ(p->ops[1].loops[2].kind, LoopKind::Reduction);
  EXPECT_EQ(p->sections[2], Section::Layer);
  ASSERT_EQ(p->edges.size(), 3u);
  EXPECT_TRUE(p->edges[1].nextLayer);
  std::string once = print(*p);
  Expected<Problem> q = parseProblem(once, "printed");
  ASSERT_TRUE(bool(q)) << toString(q.takeError());
  EXPECT_EQ(print(*q), once);
  // Flattened: emb, 3 x (fc, add); next edges resolved.
  FlatGraph g = flatten(*p);
  ASSERT_EQ(g.ops.size(), 7u);
  EXPECT_EQ(g.ops[3].name, "fc#1");
  // fc.y->add.x1 per copy (3) + 2 next edges per copy (6).
  EXPECT_EQ(g.edges.size(), 9u);
}

TEST(ProblemFormat, GatherGradientRoundTrips) {
  // `gathergrad` (Operand::gatherGradient) is read and written back.
  const char *text = R"(problem g
cluster dgx-a100-80g-1
devices 2
batch-loop b
op add elementwise flops=1
  loop b 8
  loop h 16
  input x b,h
  input pos b,h gathergrad
  output y b,h
)";
  Expected<Problem> p = parseProblem(text, "g.txt");
  ASSERT_TRUE(bool(p)) << toString(p.takeError());
  EXPECT_FALSE(p->ops[0].operands[0].gatherGradient);
  EXPECT_TRUE(p->ops[0].operands[1].gatherGradient);
  std::string once = print(*p);
  EXPECT_NE(once.find("input pos b,h bytes=2 gathergrad"), std::string::npos)
      << once;
  Expected<Problem> q = parseProblem(once, "printed");
  ASSERT_TRUE(bool(q)) << toString(q.takeError());
  EXPECT_EQ(print(*q), once);
}

TEST(ProblemFormat, GPTProblemRoundTrips) {
  TransformerShape s;
  s.model = {2, 64, 4, 256, 128, 32, 8};
  s.kvHeads = 2;
  s.gatedFFN = true;
  Problem p = buildTransformerProblem(s, "v100-sxm2-32g-4x8", 8);
  ASSERT_FALSE(bool(verifyProblem(p)));
  std::string once = print(p);
  Expected<Problem> q = parseProblem(once, "gpt");
  ASSERT_TRUE(bool(q)) << toString(q.takeError());
  EXPECT_EQ(print(*q), once);
  EXPECT_EQ(q->ops.size(), p.ops.size());
  EXPECT_EQ(q->edges.size(), p.edges.size());
}

TEST(ProblemFormat, MoEProblemRoundTrips) {
  TransformerShape s;
  s.model = {2, 64, 4, 256, 128, 32, 8};
  s.gatedFFN = true;
  s.moe = TransformerShape::MoE{};
  s.moe->experts = 4;
  s.moe->capacityFactor = 1.25;
  s.moe->load = {0.5, 0.25, 0.125, 0.125};
  s.moe->smartSchedule = false;
  Problem p = buildTransformerProblem(s, "dgx-a100-80g-2", 8);
  ASSERT_FALSE(bool(verifyProblem(p))) << toString(verifyProblem(p));
  std::string once = print(p);
  EXPECT_NE(once.find("  moe experts=e hidden=h ffn=f top-k=2 matrices=3 "
                      "capacity=1.25 load=0.5,0.25,0.125,0.125 "
                      "no-smart-schedule\n"),
            std::string::npos)
      << once;
  Expected<Problem> q = parseProblem(once, "moe");
  ASSERT_TRUE(bool(q)) << toString(q.takeError());
  EXPECT_EQ(print(*q), once);
  const Operator &moe = q->ops[9];
  ASSERT_EQ(moe.kind, OpKind::MoE);
  ASSERT_TRUE(moe.moe.has_value());
  EXPECT_EQ(moe.moe->expertLoop, 3u);
  EXPECT_FALSE(moe.moe->smartSchedule);
  EXPECT_TRUE(moe.moe->shadowing);
  EXPECT_FALSE(moe.moe->staticBuffers);
  // The program's memory (an ONNX model's stp.moe) round-trips too.
  p.ops[9].moe->staticBuffers = true;
  std::string text = print(p);
  EXPECT_NE(text.find("no-smart-schedule static-buffers\n"), std::string::npos)
      << text;
  Expected<Problem> r = parseProblem(text, "moe");
  ASSERT_TRUE(bool(r)) << toString(r.takeError());
  EXPECT_TRUE(r->ops[9].moe->staticBuffers);
  EXPECT_EQ(print(*r), text);
}

std::string errorOf(StringRef text) {
  Expected<Problem> p = parseProblem(text, "bad.txt");
  if (p)
    return "";
  return toString(p.takeError());
}

TEST(ProblemFormat, MoEErrors) {
  std::string op = "devices 2\nop m moe\n  loop b 4\n  loop h 8\n"
                   "  loop e 4\n  loop f 16\n";
  EXPECT_EQ(errorOf(op + "  moe experts=e hidden=h ffn=g\n"),
            "bad.txt:7: 'moe' names unknown loop 'g'");
  EXPECT_EQ(errorOf(op + "  moe experts=e hidden=h\n"),
            "bad.txt:7: 'moe' needs experts=, hidden= and ffn= loops");
  EXPECT_EQ(errorOf(op + "  moe experts=e hidden=h ffn=f frob\n"),
            "bad.txt:7: unknown 'moe' attribute 'frob'");
  EXPECT_EQ(errorOf(op),
            "bad.txt: operator 'm': an moe operator needs an 'moe' line");
  EXPECT_EQ(errorOf(op + "  moe experts=e hidden=h ffn=f top-k=2 "
                         "load=0.5,0.5\n"),
            "bad.txt: operator 'm': 'moe' load needs 4 non-negative shares "
            "that sum to 1");
  EXPECT_EQ(errorOf(op + "  moe experts=e hidden=h ffn=f top-k=5\n"),
            "bad.txt: operator 'm': 'moe' needs 1 <= top-k <= experts and "
            "matrices >= 1");
}

TEST(ProblemFormat, Errors) {
  EXPECT_EQ(errorOf("devices 2\nop a frobnicate\n"),
            "bad.txt:2: unknown operator kind 'frobnicate'");
  EXPECT_EQ(errorOf("loop b 2\n"), "bad.txt:1: 'loop' before any 'op'");
  EXPECT_EQ(errorOf("op a matmul\n loop b 2\n input x b,z\n"),
            "bad.txt:3: operand 'x' indexes unknown loop 'z'");
  EXPECT_EQ(errorOf("op a elementwise\n loop b 2\n input x b\n output y b\n"
                    "edge a.y -> b.x\n"),
            "bad.txt:5: unknown operator 'b'");
  // Structural errors come from verifyProblem, without a line.
  std::string e = errorOf("op a elementwise\n loop b 4\n output y b\n"
                          "op c elementwise\n loop b 8\n input x b\n"
                          "edge a.y -> c.x\n");
  EXPECT_NE(e.find("exceeds the producer's"), std::string::npos) << e;
  e = errorOf("op a elementwise\n loop b 4\n input x b\n output y b\n"
              "edge a.x -> a.y\n");
  EXPECT_NE(e.find("not an output"), std::string::npos) << e;
  // Edges through views: the map must match the operands' ranks, its
  // entries the producer's dims; unknown edge and loop attributes.
  const char *twoOps = "op a elementwise\n loop b 4\n loop h 8\n"
                       " output y b,h\n"
                       "op c elementwise\n loop b 4\n loop h 2\n loop d 4\n"
                       " input x b,h,d\n";
  e = errorOf(std::string(twoOps) + "edge a.y -> c.x views=1 map=0,1 "
                                    "sizes=4,2,4 lost=-,-\n");
  EXPECT_NE(e.find("does not match the operands' ranks"), std::string::npos)
      << e;
  e = errorOf(std::string(twoOps) + "edge a.y -> c.x views=1 map=0,5,- "
                                    "sizes=4,2,4 lost=-,-\n");
  EXPECT_NE(e.find("view map entry 5 out of range"), std::string::npos) << e;
  e = errorOf(std::string(twoOps) + "edge a.y -> c.x views=1 map=0,1,- "
                                    "sizes=4,2,4 lost=-,3\n");
  EXPECT_NE(e.find("view position 3 out of range"), std::string::npos) << e;
  e = errorOf(std::string(twoOps) + "edge a.y -> c.x views=1 map=0,1,- "
                                    "sizes=4,2,4 lost=-,- gradlost=-,1,-\n");
  EXPECT_NE(e.find("view position 1 out of range"), std::string::npos) << e;
  e = errorOf(std::string(twoOps) + "edge a.y -> c.x views=1 map=0,1,- "
                                    "sizes=4,2,4 lost=-,- gradlost=-,0\n");
  EXPECT_NE(e.find("gradient's view positions do not match"), std::string::npos)
      << e;
  EXPECT_EQ(errorOf(std::string(twoOps) + "edge a.y -> c.x via=2\n"),
            "bad.txt:10: expected 'next', 'views=', 'map=', 'sizes=', "
            "'lost=', 'gradlost=' or 'shared', got 'via=2'");
  EXPECT_EQ(errorOf("op a elementwise\n loop b 4 frozen\n"),
            "bad.txt:2: expected 'reduction' or 'fixed', got 'frozen'");
}

} // namespace
