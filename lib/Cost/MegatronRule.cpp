//===- MegatronRule.cpp - Megatron-LM's tensor-parallel rule ----*- C++ -*-===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// See MegatronRule.h for the rule and its sources.
//
//===----------------------------------------------------------------------===//

#include "stpar/Cost/MegatronRule.h"

#include "llvm/ADT/STLExtras.h"

using namespace llvm;

namespace stpar::cost {

static bool indexes(const Operand &o, int loop) {
  return is_contained(o.dims, unsigned(loop));
}

MegatronChoice chooseMegatronLoop(const Operator &op, const MegatronInputs &in,
                                  int64_t tp) {
  MegatronChoice c;
  if (tp <= 1)
    return c;
  auto fits = [&](int l) { return op.loops[l].extent % tp == 0; };
  auto replicate = [&](const char *why) {
    c.loop = -1;
    c.replicated = why;
    return c;
  };
  if (in.lost)
    return replicate("an input is split on a dim this operator does not "
                     "index as a loop");
  // Under sequence parallelism a split on the sequence is gathered before a
  // linear (Megatron's all-gather ahead of the column-parallel linear).
  SmallVector<int, 2> loops(in.inputLoops.begin(), in.inputLoops.end());
  unsigned params = 0;
  for (const Operand &o : op.operands)
    params += o.role == OperandRole::Parameter;
  bool linear = op.kind == OpKind::MatMul && params == 1;
  if (linear && in.sequenceLoop >= 0)
    erase(loops, in.sequenceLoop);

  if (op.kind == OpKind::Embedding) {
    if (in.vocabLoop < 0)
      return c;
    if (!fits(in.vocabLoop))
      return replicate("vocabulary not divisible by tp");
    c.loop = in.vocabLoop;
    return c;
  }
  if (linear) {
    if (loops.size() == 1 && op.loops[loops[0]].kind == LoopKind::Reduction) {
      if (!fits(loops[0]))
        return replicate("reduction dim not divisible by tp");
      c.loop = loops[0]; // row-parallel
      return c;
    }
    if (!loops.empty())
      return replicate("linear whose input is split on a non-reduction dim");
    bool any = false;
    for (unsigned l = 0; l < op.loops.size(); ++l) {
      if (op.loops[l].kind != LoopKind::Parallel)
        continue;
      bool inParam = false, inInput = false;
      for (const Operand &o : op.operands) {
        inParam |= o.role == OperandRole::Parameter && indexes(o, int(l));
        inInput |= o.role == OperandRole::Input && indexes(o, int(l));
      }
      if (!inParam || inInput)
        continue;
      any = true;
      if (fits(int(l))) {
        c.loop = int(l); // column-parallel
        return c;
      }
    }
    return replicate(any ? "output dim not divisible by tp"
                         : "linear without an output dim of its weight");
  }
  if (loops.size() > 1)
    return replicate("inputs split on different dims");
  if (loops.size() == 1) {
    int l = loops[0];
    if (op.loops[l].kind == LoopKind::Reduction && op.kind != OpKind::MatMul &&
        op.kind != OpKind::Softmax)
      return replicate("input split on the dim it normalizes or reduces");
    if (!fits(l)) {
      replicate("split dim not divisible by tp");
      c.indivisible = true;
      return c;
    }
    c.loop = l;
    return c;
  }
  if (in.sequenceLoop >= 0 && op.kind != OpKind::MatMul &&
      fits(in.sequenceLoop))
    c.loop = in.sequenceLoop;
  return c;
}

} // namespace stpar::cost
