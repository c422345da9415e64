#include "engine/report/render.h"
#include "google/protobuf/util/json_util.h"

namespace kiln::report {

std::string RenderJson(const v1::AccuracyReport& report) {
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = true;
  opts.always_print_primitive_fields = true;
  opts.preserve_proto_field_names = false;
  std::string out;
  // Printing a valid message cannot fail; an empty string would be the only failure mode.
  (void)google::protobuf::util::MessageToJsonString(report, &out, opts);
  return out;
}

}  // namespace kiln::report
