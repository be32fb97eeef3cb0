//===- EmitDirectory.cpp - write an emitted program's directory -----------===//
//
// Part of stpar.
//
//===----------------------------------------------------------------------===//

#include "stpar/Target/Emit.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace stpar::target {

namespace {

LogicalResult writeFile(ModuleOp module, StringRef path, StringRef contents) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
  if (ec)
    return module.emitError("cannot write '") << path << "': " << ec.message();
  os << contents;
  os.close();
  if (os.has_error()) {
    os.clear_error();
    return module.emitError("cannot write '") << path << "'";
  }
  return success();
}

/// Removes `dir` and everything under it (errors ignored).
void removeTree(StringRef dir) {
  if (!llvm::sys::fs::exists(dir))
    return;
  llvm::sys::fs::remove_directories(dir, /*IgnoreErrors=*/true);
}

} // namespace

LogicalResult emitDirectory(ModuleOp module, EmitTarget target, StringRef dir,
                            StringRef runtimeDir) {
  if (failed(legalizeForEmission(module, target)))
    return failure();
  FailureOr<EmittedProgram> program = emitProgram(module, target);
  if (failed(program))
    return failure();

  // Everything goes to a temporary sibling first.
  llvm::SmallString<256> absDir(dir);
  llvm::sys::fs::make_absolute(absDir);
  llvm::sys::path::remove_dots(absDir, /*remove_dot_dot=*/true);
  llvm::SmallString<256> tmp;
  if (std::error_code ec = llvm::sys::fs::createUniqueDirectory(
          (absDir + ".tmp").str(), tmp))
    return module.emitError("cannot create a directory next to '")
           << dir << "': " << ec.message();
  auto fail = [&]() {
    removeTree(tmp);
    return failure();
  };
  auto path = [&](StringRef file) {
    llvm::SmallString<256> p(tmp);
    llvm::sys::path::append(p, file);
    return std::string(p);
  };
  if (failed(writeFile(module, path(program->sourceName), program->source)) ||
      failed(writeFile(module, path("CMakeLists.txt"), program->cmakeLists)) ||
      failed(writeFile(module, path("io.json"), program->ioJson)))
    return fail();
  for (const std::string &file : program->runtimeFiles) {
    llvm::SmallString<256> src(runtimeDir);
    llvm::sys::path::append(src, file);
    auto buffer = llvm::MemoryBuffer::getFile(src, /*IsText=*/true);
    if (!buffer) {
      module.emitError("cannot read the runtime file '")
          << src << "': " << buffer.getError().message()
          << " (set STPAR_RUNTIME_DIR to stpar's runtime/ folder)";
      return fail();
    }
    if (failed(writeFile(module, path(llvm::sys::path::filename(file)),
                         (*buffer)->getBuffer())))
      return fail();
  }
  removeTree(absDir);
  if (std::error_code ec = llvm::sys::fs::rename(tmp, absDir)) {
    module.emitError("cannot rename '")
        << tmp << "' to '" << absDir << "': " << ec.message();
    return fail();
  }
  return success();
}

} // namespace stpar::target
