// Model-local functions (ModelProto.functions, IR 8+) inlined at import, before the importer
// checks ops: every node calling a function (op_type = the function's name, domain = its domain,
// overload = its overload, IR 10) is replaced by the function's body.
//
//  - Formal inputs and outputs are bound to the call's actual values; an omitted optional input
//    stays omitted inside the body, an omitted optional output becomes an internal value.
//  - Every other value of the body (subgraphs included) is renamed "<call node>/<inner name>"
//    (a suffix "_<n>" added if that name is taken), and every inlined node is named
//    "<call node>/<inner node>": node names keep their provenance, so policy rules and the report
//    can still select "everything inside this call" by scope.
//  - Attribute references (ref_attr_name) are resolved from the call's attributes, else from the
//    function's defaults (attribute_proto, IR 9); a reference with neither is dropped (the op's
//    own default applies), as ONNX specifies.
//  - Functions may call functions (at most 64 deep); recursion is refused with the call chain in
//    the message.
//  - A function's own opset_import is honoured where Kiln can express it: each default-domain op
//    of the body must mean the same op version at the function's opset and at the model's (Kiln
//    runs one opset per model); otherwise the import fails naming the function, node and versions.
//
// The fields newer than Debian's onnx 1.12 protobuf (FunctionProto.attribute_proto, overload;
// NodeProto.overload) are read from the messages' unknown fields.
#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace onnx {
class ModelProto;
}  // namespace onnx

namespace kiln::import {

/// Largest number of nodes inlining may create in one model (nested calls multiply): a crafted
/// model cannot make the import run out of memory.
constexpr int64_t kMaxInlinedNodes = int64_t{1} << 20;

/// Replaces every call of a model-local function in `model`'s graph and subgraphs by the
/// function's body (see above), then drops ModelProto.functions. A model without functions is
/// left as it is. Errors name the call node and the function: InvalidArgument for a malformed
/// function or call (recursion, a formal input count exceeded, an undeclared attribute, a body
/// using a value it does not define), Unimplemented for an opset Kiln cannot express.
absl::Status InlineModelFunctions(onnx::ModelProto& model);

}  // namespace kiln::import
