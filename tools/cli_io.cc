#include "tools/cli_io.h"

#include <sys/stat.h>

#include <cstdio>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/common/sample_sets.h"
#include "engine/common/status.h"
#include "engine/import/onnx_importer.h"
#include "engine/import/tensor_proto.h"
#include "engine/import/value_proto.h"

namespace kiln::tools {

absl::StatusOr<std::vector<ir::Tensor>> ReadTensorDir(const std::string& dir,
                                                      const std::string& prefix,
                                                      const std::vector<ir::Value*>* types) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat("'", dir, "' is not a folder"));
  }
  std::vector<ir::Tensor> out;
  for (int i = 0;; ++i) {
    std::string path = absl::StrCat(dir, "/", prefix, "_", i, ".pb");
    if (stat(path.c_str(), &st) != 0) break;
    ASSIGN_OR_RETURN(std::string bytes, import::ReadFile(path, int64_t{1} << 34));
    const ir::Value* type =
        types != nullptr && i < static_cast<int>(types->size()) ? (*types)[i] : nullptr;
    if (type != nullptr && type->kind != ir::ValueKind::kTensor) {
      ASSIGN_OR_RETURN(ir::Tensor v, import::ParseValueProto(bytes, type->kind, type->dtype, path));
      out.push_back(std::move(v));
      continue;
    }
    ASSIGN_OR_RETURN(ir::Tensor t, import::ParseTensorProto(bytes, path));
    out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<std::vector<std::vector<ir::Tensor>>> ReadSampleSets(
    const std::string& dir, const std::vector<ir::Value*>* types) {
  ASSIGN_OR_RETURN(std::vector<std::string> folders, SampleSetFolders(dir));
  std::vector<std::vector<ir::Tensor>> sets;
  for (const std::string& folder : folders) {
    ASSIGN_OR_RETURN(std::vector<ir::Tensor> set, ReadTensorDir(folder, "input", types));
    sets.push_back(std::move(set));
  }
  return sets;
}

absl::Status WriteTensorDir(const std::string& dir, const std::string& prefix,
                            const std::vector<ir::Tensor>& tensors,
                            const std::vector<std::string>& names) {
  // Every file's head first: a tensor that cannot be written (one past protobuf's 2 GiB limit)
  // fails the command before any file is written, not after some of them.
  std::vector<std::string> heads;
  for (size_t i = 0; i < tensors.size(); ++i) {
    // A sequence or an empty optional: the whole SequenceProto / OptionalProto is the head.
    auto head =
        tensors[i].kind() == ir::TensorKind::kDense
            ? import::TensorProtoHead(tensors[i], names[i])
            : import::SerializeValueProto(tensors[i],
                                          tensors[i].is_sequence() ? ir::ValueKind::kSequence
                                                                   : ir::ValueKind::kOptionalTensor,
                                          names[i]);
    if (!head.ok()) {
      return absl::Status(head.status().code(), absl::StrCat("cannot write ", prefix, "_", i,
                                                             ".pb: ", head.status().message(),
                                                             "; no ", prefix, " was written"));
    }
    heads.push_back(*std::move(head));
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    if (mkdir(dir.c_str(), 0755) != 0) {
      return absl::PermissionDeniedError(absl::StrCat("cannot create folder '", dir, "'"));
    }
  } else if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("'", dir, "' exists and is not a folder"));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    // The payload goes to the file from the tensor itself: no copy of a big output in memory
    // (only the packed low-bit types, int4 and the like, are packed into a buffer first).
    std::string packed;
    const absl::string_view parts[] = {heads[i],
                                       tensors[i].kind() == ir::TensorKind::kDense
                                           ? import::TensorProtoPayload(tensors[i], &packed)
                                           : absl::string_view()};
    RETURN_IF_ERROR(WriteFilePartsAtomic(absl::StrCat(dir, "/", prefix, "_", i, ".pb"), parts));
  }
  return absl::OkStatus();
}

}  // namespace kiln::tools
