//===- Weights.cpp - weights.bin from an ONNX model's initializers ---------===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//
//
// Writes the global data of every `stp.param` argument of the entry
// function into one file (format in docs/emitted-code.md) that the emitted
// programs read their blocks from. This file is compiled with exceptions
// because the ONNX headers need them.
//
//===----------------------------------------------------------------------===//

#include "stpar/Target/Emit.h"

#include "stpar/Dialect/STP/IR/STPAttrs.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <onnx/onnx_pb.h>

#include <cstring>

using namespace mlir;

namespace stpar::target {

namespace {

/// weights.bin dtype code and element size of an IR element type.
bool getCode(Type t, uint32_t &code, size_t &size) {
  if (t.isF32()) {
    code = 0;
    size = 4;
  } else if (t.isF64()) {
    code = 1;
    size = 8;
  } else if (t.isInteger(64)) {
    code = 2;
    size = 8;
  } else if (t.isInteger(32)) {
    code = 3;
    size = 4;
  } else if (t.isInteger(8)) {
    code = 4;
    size = 1;
  } else if (t.isInteger(1)) {
    code = 5;
    size = 1;
  } else {
    return false;
  }
  return true;
}

/// Whether the ONNX data type stores elements exactly as `t` does.
bool sameLayout(int32_t onnxType, Type t) {
  using TP = onnx::TensorProto;
  return (onnxType == TP::FLOAT && t.isF32()) ||
         (onnxType == TP::DOUBLE && t.isF64()) ||
         (onnxType == TP::INT64 && t.isInteger(64)) ||
         (onnxType == TP::INT32 && t.isInteger(32)) ||
         (onnxType == TP::INT8 && t.isInteger(8)) ||
         ((onnxType == TP::BOOL || onnxType == TP::UINT8) && t.isInteger(1));
}

template <typename To, typename Range>
void convert(const Range &values, std::string &out) {
  for (auto v : values) {
    To x = static_cast<To>(v);
    out.append(reinterpret_cast<const char *>(&x), sizeof(To));
  }
}

/// The bytes of `proto` in the layout of `t`; false with `error` set.
bool tensorBytes(const onnx::TensorProto &proto, Type t, int64_t elements,
                 StringRef modelDir, std::string &out, std::string &error) {
  size_t size = 0;
  uint32_t code = 0;
  getCode(t, code, size);
  size_t expected = static_cast<size_t>(elements) * size;
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto &kv : proto.external_data()) {
      if (kv.key() == "location")
        location = kv.value();
      else if (kv.key() == "offset")
        offset = std::stoll(kv.value());
      else if (kv.key() == "length")
        length = std::stoll(kv.value());
    }
    if (!sameLayout(proto.data_type(), t)) {
      error = "its external data has another element type than the argument";
      return false;
    }
    llvm::SmallString<256> path(modelDir);
    llvm::sys::path::append(path, location);
    auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false);
    if (!buffer) {
      error = "its external data file '" + std::string(path) +
              "' cannot be read: " + buffer.getError().message();
      return false;
    }
    StringRef bytes = (*buffer)->getBuffer();
    if (length < 0)
      length = static_cast<int64_t>(bytes.size()) - offset;
    if (offset < 0 || offset + length > static_cast<int64_t>(bytes.size()) ||
        static_cast<size_t>(length) != expected) {
      error = "its external data in '" + std::string(path) +
              "' is shorter than the tensor or has another size";
      return false;
    }
    out.assign(bytes.data() + offset, expected);
    return true;
  }
  if (proto.has_raw_data()) {
    if (!sameLayout(proto.data_type(), t) || proto.raw_data().size() != expected) {
      error = "its raw data has another element type or size than the "
              "argument";
      return false;
    }
    out = proto.raw_data();
    return true;
  }
  using TP = onnx::TensorProto;
  out.clear();
  auto put = [&](const auto &values) {
    if (t.isF32())
      convert<float>(values, out);
    else if (t.isF64())
      convert<double>(values, out);
    else if (t.isInteger(64))
      convert<int64_t>(values, out);
    else if (t.isInteger(32))
      convert<int32_t>(values, out);
    else if (t.isInteger(8))
      convert<int8_t>(values, out);
    else
      for (auto v : values)
        out.push_back(v != 0 ? 1 : 0);
  };
  switch (proto.data_type()) {
  case TP::FLOAT:
    put(proto.float_data());
    break;
  case TP::DOUBLE:
    put(proto.double_data());
    break;
  case TP::INT64:
    put(proto.int64_data());
    break;
  case TP::INT32:
  case TP::INT16:
  case TP::INT8:
  case TP::UINT8:
  case TP::BOOL:
    put(proto.int32_data());
    break;
  default:
    error = "its ONNX data type " + std::to_string(proto.data_type()) +
            " cannot be written";
    return false;
  }
  if (out.size() != expected) {
    error = "it holds " + std::to_string(out.size() / size) +
            " elements, expected " + std::to_string(elements) +
            " (no data in the model?)";
    return false;
  }
  return true;
}

template <typename T> void put(std::string &s, T v) {
  s.append(reinterpret_cast<const char *>(&v), sizeof(T));
}

} // namespace

bool writeWeights(llvm::StringRef onnxPath, ModuleOp module,
                  llvm::StringRef path, std::string &error) {
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func) {
    error = "the module has no function @main";
    return false;
  }
  struct Param {
    unsigned arg;
    std::string name;
    RankedTensorType global;
  };
  // Global types (stp.split dims times their axes' sizes).
  SmallVector<int64_t> gridShape;
  for (Operation &op : module.getBody()->getOperations())
    if (op.getName().getStringRef() == "shard.grid")
      if (auto shape = op.getAttrOfType<DenseI64ArrayAttr>("shape"))
        gridShape.assign(shape.asArrayRef().begin(), shape.asArrayRef().end());
  std::vector<Param> params;
  for (unsigned i = 0; i < func.getNumArguments(); ++i) {
    auto param = func.getArgAttrOfType<stp::ParamAttr>(i, "stp.param");
    if (!param)
      continue;
    auto local = dyn_cast<RankedTensorType>(func.getArgument(i).getType());
    if (!local || !local.hasStaticShape()) {
      error = "parameter '" + param.getName().str() +
              "' is not a statically shaped tensor";
      return false;
    }
    SmallVector<int64_t> shape(local.getShape());
    if (auto split = func.getArgAttrOfType<ArrayAttr>(i, "stp.split"))
      for (auto [d, axes] : llvm::enumerate(split))
        if (auto list = dyn_cast<ArrayAttr>(axes); list && d < shape.size())
          for (Attribute a : list)
            if (auto ia = dyn_cast<IntegerAttr>(a);
                ia && ia.getInt() >= 0 &&
                ia.getInt() < static_cast<int64_t>(gridShape.size()))
              shape[d] *= gridShape[ia.getInt()];
    params.push_back({i, param.getName().str(),
                      RankedTensorType::get(shape, local.getElementType())});
  }
  if (params.empty()) {
    // No parameters: an empty weights file.
  } else if (onnxPath.empty()) {
    error = "the module has parameters (stp.param); pass the model with "
            "--model";
    return false;
  }
  onnx::ModelProto model;
  llvm::StringMap<const onnx::TensorProto *> initializers;
  if (!params.empty()) {
    auto buffer = llvm::MemoryBuffer::getFile(onnxPath, /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false);
    if (!buffer) {
      error = "cannot read the model '" + onnxPath.str() +
              "': " + buffer.getError().message();
      return false;
    }
    StringRef bytes = (*buffer)->getBuffer();
    if (bytes.size() > static_cast<size_t>(INT32_MAX) ||
        !model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      error = "'" + onnxPath.str() + "' is not a valid ONNX model";
      return false;
    }
    for (const onnx::TensorProto &init : model.graph().initializer())
      initializers[init.name()] = &init;
  }
  StringRef modelDir = llvm::sys::path::parent_path(onnxPath);

  std::string header = "STPARW01";
  put<uint64_t>(header, params.size());
  std::vector<std::string> data;
  uint64_t headerSize = header.size();
  for (const Param &p : params) {
    headerSize += 8 + 4 + 4 + 8 * p.global.getRank() + 8 + 8 + 4 + p.name.size();
  }
  uint64_t offset = (headerSize + 63) / 64 * 64;
  std::string index;
  for (const Param &p : params) {
    uint32_t code = 0;
    size_t size = 0;
    if (!getCode(p.global.getElementType(), code, size)) {
      error = "parameter '" + p.name + "' has an element type weights.bin "
              "cannot hold";
      return false;
    }
    auto it = initializers.find(p.name);
    if (it == initializers.end()) {
      error = "parameter '" + p.name + "' has no initializer in '" +
              onnxPath.str() + "' (data absent)";
      return false;
    }
    int64_t elements = p.global.getNumElements();
    int64_t protoElements = 1;
    for (int64_t d : it->second->dims())
      protoElements *= d;
    if (protoElements != elements) {
      error = "parameter '" + p.name + "' has " +
              std::to_string(protoElements) + " elements in the model, " +
              std::to_string(elements) + " in the IR";
      return false;
    }
    std::string bytes, why;
    if (!tensorBytes(*it->second, p.global.getElementType(), elements,
                     modelDir, bytes, why)) {
      error = "parameter '" + p.name + "': " + why;
      return false;
    }
    put<uint64_t>(index, p.arg);
    put<uint32_t>(index, code);
    put<uint32_t>(index, static_cast<uint32_t>(p.global.getRank()));
    for (int64_t d : p.global.getShape())
      put<int64_t>(index, d);
    put<uint64_t>(index, offset);
    put<uint64_t>(index, bytes.size());
    put<uint32_t>(index, static_cast<uint32_t>(p.name.size()));
    index += p.name;
    offset += (bytes.size() + 63) / 64 * 64;
    data.push_back(std::move(bytes));
  }
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
  if (ec) {
    error = "cannot write '" + path.str() + "': " + ec.message();
    return false;
  }
  os << header << index;
  uint64_t written = header.size() + index.size();
  auto pad = [&]() {
    while (written % 64) {
      os << '\0';
      ++written;
    }
  };
  pad();
  for (const std::string &d : data) {
    os << d;
    written += d.size();
    pad();
  }
  os.close();
  if (os.has_error()) {
    error = "cannot write '" + path.str() + "'";
    os.clear_error();
    return false;
  }
  return true;
}

} // namespace stpar::target
