// Inlining of model-local functions at import (functions.h): the function table (with the
// IR 9/10 fields read from unknown fields), the opset check of each function body, and the
// instantiation of a body at a call (renaming, attribute references, subgraphs).
#include "engine/import/functions.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/common/status.h"
#include "engine/import/op_schemas.h"
#include "engine/ir/graph.h"
#include "engine/ir/op_type.h"
#include "google/protobuf/unknown_field_set.h"
#include "onnx/onnx_pb.h"

namespace kiln::import {
namespace {

using NodeList = google::protobuf::RepeatedPtrField<onnx::NodeProto>;

// Field numbers newer than Debian's onnx 1.12 protobuf (onnx.proto of ONNX 1.15+).
constexpr int kFunctionAttributeProtoField = 11;    // FunctionProto.attribute_proto (IR 9)
constexpr int kFunctionOverloadField = 13;          // FunctionProto.overload (IR 10)
constexpr int kNodeOverloadField = 8;               // NodeProto.overload (IR 10)
constexpr int kNodeDeviceConfigurationsField = 10;  // NodeProto.device_configurations (IR 11)
// Subgraphs nest at most this deep inside one function body (the parser's own recursion limit
// is lower; this bound only keeps the walk finite).
constexpr int kMaxDepth = 64;
// Functions nest (a call inside a called body) at most this deep: a crafted chain of thousands
// of functions would otherwise exhaust the stack.
constexpr int kMaxCallDepth = 64;

std::string NormalDomain(const std::string& d) { return d == "ai.onnx" ? std::string() : d; }

// The length-delimited unknown fields numbered `number` of `m`, in order.
std::vector<std::string> UnknownBytes(const google::protobuf::Message& m, int number) {
  std::vector<std::string> out;
  const auto& fields = m.GetReflection()->GetUnknownFields(m);
  for (int i = 0; i < fields.field_count(); ++i) {
    const auto& f = fields.field(i);
    if (f.number() == number && f.type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) {
      out.push_back(f.length_delimited());
    }
  }
  return out;
}

bool HasUnknownField(const google::protobuf::Message& m, int number) {
  const auto& fields = m.GetReflection()->GetUnknownFields(m);
  for (int i = 0; i < fields.field_count(); ++i) {
    if (fields.field(i).number() == number) return true;
  }
  return false;
}

std::string OverloadOf(const google::protobuf::Message& m, int number) {
  std::vector<std::string> v = UnknownBytes(m, number);
  return v.empty() ? std::string() : v.back();  // a repeated optional field: the last one wins
}

std::string Key(const std::string& domain, const std::string& name, const std::string& overload) {
  return absl::StrCat(NormalDomain(domain), "\n", name, "\n", overload);
}

std::string FunctionLabel(const onnx::FunctionProto& f, const std::string& overload) {
  std::string s =
      absl::StrCat("function '", f.domain().empty() ? "" : f.domain() + ".", f.name(), "'");
  if (!overload.empty()) absl::StrAppend(&s, " (overload '", overload, "')");
  return s;
}

std::string CallLabel(const onnx::NodeProto& n, const std::string& where) {
  return absl::StrCat("[node '", n.name(), "' (", n.op_type(), ")", where, "]");
}

struct Function {
  const onnx::FunctionProto* proto = nullptr;
  std::string overload;
  std::string label;
  absl::flat_hash_map<std::string, onnx::AttributeProto> defaults;  // attribute_proto
  absl::flat_hash_set<std::string> attributes;                      // every declared attribute name
};

class Inliner {
 public:
  explicit Inliner(onnx::ModelProto& model) : model_(model) {}

  absl::Status Run() {
    if (model_.functions_size() == 0) return absl::OkStatus();
    for (const auto& imp : model_.opset_import()) {
      model_opsets_[NormalDomain(imp.domain())] = imp.version();
    }
    RETURN_IF_ERROR(ReadFunctions());
    RETURN_IF_ERROR(CheckSize());
    CollectNames(model_.graph(), 0);
    RETURN_IF_ERROR(ExpandGraph(*model_.mutable_graph(), {}, 0));
    model_.clear_functions();
    return absl::OkStatus();
  }

 private:
  absl::Status ReadFunctions() {
    for (const onnx::FunctionProto& f : model_.functions()) {
      Function fn;
      fn.proto = &f;
      fn.overload = OverloadOf(f, kFunctionOverloadField);
      fn.label = FunctionLabel(f, fn.overload);
      if (f.name().empty()) return absl::InvalidArgumentError("a model function has no name");
      for (const std::string& a : f.attribute()) fn.attributes.insert(a);
      for (const std::string& bytes : UnknownBytes(f, kFunctionAttributeProtoField)) {
        onnx::AttributeProto a;
        if (!a.ParseFromString(bytes) || a.name().empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat(fn.label, " has an unreadable attribute_proto entry"));
        }
        fn.attributes.insert(a.name());
        fn.defaults[a.name()] = std::move(a);
      }
      const std::string key = Key(f.domain(), f.name(), fn.overload);
      if (!functions_.emplace(key, std::move(fn)).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(FunctionLabel(f, OverloadOf(f, kFunctionOverloadField)),
                         " is defined twice in ModelProto.functions"));
      }
    }
    // Once the table is complete: the check tells calls from ops.
    for (const onnx::FunctionProto& f : model_.functions()) {
      RETURN_IF_ERROR(CheckOpsets(
          functions_.at(Key(f.domain(), f.name(), OverloadOf(f, kFunctionOverloadField)))));
    }
    return absl::OkStatus();
  }

  // Kiln runs every node at the model's opset: a body written for another opset is accepted when
  // each of its default-domain ops resolves to the same version at both.
  absl::Status CheckOpsets(const Function& fn) {
    int64_t fn_opset = -1;
    for (const auto& imp : fn.proto->opset_import()) {
      const std::string d = NormalDomain(imp.domain());
      if (d.empty()) {
        fn_opset = imp.version();
        continue;
      }
      auto it = model_opsets_.find(d);
      if (it != model_opsets_.end() && it->second != imp.version() && UsesDomain(fn, d)) {
        return absl::UnimplementedError(
            absl::StrCat(fn.label, " imports domain '", d, "' version ", imp.version(),
                         " but the model imports ", "version ", it->second,
                         ": Kiln runs one version of each domain per model"));
      }
    }
    auto model_it = model_opsets_.find("");
    if (fn_opset < 0 || model_it == model_opsets_.end() || fn_opset == model_it->second) {
      return absl::OkStatus();
    }
    const int model_opset = static_cast<int>(model_it->second);
    absl::Status st;
    ForEachBodyNode(fn.proto->node(), 0, [&](const onnx::NodeProto& n) {
      if (!st.ok() || !NormalDomain(n.domain()).empty()) return;
      auto op = ir::OpFromName(n.op_type());
      if (!op) return;  // an op Kiln does not know: the importer's op check names it
      auto at_fn = ResolveOpVersion(*op, static_cast<int>(fn_opset));
      auto at_model = ResolveOpVersion(*op, model_opset);
      if (at_fn && at_model && at_fn->since_version == at_model->since_version) return;
      st = absl::UnimplementedError(absl::StrCat(
          fn.label, " imports default-domain opset ", fn_opset, " but the model imports ",
          model_opset, ", and its node '", n.name(), "' (", n.op_type(), ") is ", n.op_type(), "-",
          at_fn ? absl::StrCat(at_fn->since_version) : std::string("(undefined)"),
          " at the function's opset but ", n.op_type(), "-",
          at_model ? absl::StrCat(at_model->since_version) : std::string("(undefined)"),
          " at the model's: Kiln runs one opset per model"));
    });
    return st;
  }

  bool UsesDomain(const Function& fn, const std::string& domain) {
    bool used = false;
    ForEachBodyNode(fn.proto->node(), 0, [&](const onnx::NodeProto& n) {
      used |= NormalDomain(n.domain()) == domain && !IsCall(n);
    });
    return used;
  }

  template <typename F>
  static void ForEachBodyNode(const NodeList& nodes, int depth, F&& f) {
    for (const onnx::NodeProto& n : nodes) {
      f(n);
      if (depth >= kMaxDepth) continue;
      for (const auto& a : n.attribute()) {
        if (a.has_g()) ForEachBodyNode(a.g().node(), depth + 1, f);
        for (const auto& g : a.graphs()) ForEachBodyNode(g.node(), depth + 1, f);
      }
    }
  }

  // Refuses, before making any node, a model whose calls would expand past kMaxInlinedNodes
  // (nested calls multiply: 25 functions each calling the next twice make 2^25 nodes).
  absl::Status CheckSize() {
    int64_t total = 0;
    for (const onnx::NodeProto& n : model_.graph().node()) {
      total += SizeOf(n, 0, 0);
      if (too_deep_) {
        return absl::InvalidArgumentError(absl::StrCat(CallLabel(n, ""),
                                                       " nests function calls deeper than ",
                                                       kMaxCallDepth, " levels (the limit)"));
      }
      if (total > kMaxInlinedNodes) return TooMany(n);
    }
    return absl::OkStatus();
  }

  // The nodes expanding `n` makes, saturated just past the limit. A recursive call counts as
  // one here: the expansion refuses it.
  int64_t SizeOf(const onnx::NodeProto& n, int depth, int calls) {
    int64_t total = 1;
    if (const Function* fn = FindFunction(n)) {
      auto [it, fresh] = sizes_.emplace(fn, 1);  // 1 while in progress
      if (!fresh) return it->second;
      if (calls >= kMaxCallDepth) {
        too_deep_ = true;
        return 1;
      }
      total = 0;
      for (const onnx::NodeProto& m : fn->proto->node()) {
        total = std::min(total + SizeOf(m, depth, calls + 1), kMaxInlinedNodes + 1);
      }
      total = std::max<int64_t>(total, 1);
      sizes_[fn] = total;
      return total;
    }
    if (depth >= kMaxDepth) return total;
    for (const auto& a : n.attribute()) {
      auto sub = [&](const onnx::GraphProto& g) {
        for (const onnx::NodeProto& m : g.node()) {
          total = std::min(total + SizeOf(m, depth + 1, calls), kMaxInlinedNodes + 1);
        }
      };
      if (a.has_g()) sub(a.g());
      for (const auto& g : a.graphs()) sub(g);
    }
    return total;
  }

  const Function* FindFunction(const onnx::NodeProto& n) const {
    if (functions_.empty()) return nullptr;
    auto it = functions_.find(Key(n.domain(), n.op_type(), OverloadOf(n, kNodeOverloadField)));
    return it == functions_.end() ? nullptr : &it->second;
  }
  bool IsCall(const onnx::NodeProto& n) const { return FindFunction(n) != nullptr; }

  // Every value name of `g` and its subgraphs, so that renamed values never collide.
  void CollectNames(const onnx::GraphProto& g, int depth) {
    for (const auto& v : g.input()) taken_.insert(v.name());
    for (const auto& v : g.output()) taken_.insert(v.name());
    for (const auto& v : g.value_info()) taken_.insert(v.name());
    for (const auto& t : g.initializer()) taken_.insert(t.name());
    for (const auto& n : g.node()) {
      for (const auto& s : n.input()) taken_.insert(s);
      for (const auto& s : n.output()) taken_.insert(s);
      if (depth >= kMaxDepth) continue;
      for (const auto& a : n.attribute()) {
        if (a.has_g()) CollectNames(a.g(), depth + 1);
        for (const auto& sg : a.graphs()) CollectNames(sg, depth + 1);
      }
    }
  }

  // `base`, or `base_<n>` for the first n that makes it a name no value has.
  std::string Fresh(const std::string& base) {
    std::string name = base;
    for (int i = 1; taken_.contains(name); ++i) name = absl::StrCat(base, "_", i);
    taken_.insert(name);
    return name;
  }

  // Expands the calls among the nodes of `g` and of its subgraphs. `chain` lists the functions
  // being expanded around these nodes (recursion check).
  absl::Status ExpandGraph(onnx::GraphProto& g, const std::vector<const Function*>& chain,
                           int depth) {
    if (depth > kMaxDepth) {
      return absl::InvalidArgumentError(
          absl::StrCat("subgraphs nest deeper than ", kMaxDepth, " levels"));
    }
    NodeList out;
    RETURN_IF_ERROR(ExpandNodes(*g.mutable_node(), chain, depth, out));
    g.mutable_node()->Swap(&out);
    return absl::OkStatus();
  }

  absl::Status ExpandNodes(NodeList& nodes, const std::vector<const Function*>& chain, int depth,
                           NodeList& out) {
    for (int i = 0; i < nodes.size(); ++i) {
      onnx::NodeProto& n = nodes[i];
      const Function* fn = FindFunction(n);
      if (fn == nullptr) {
        for (auto& a : *n.mutable_attribute()) {
          if (a.has_g()) RETURN_IF_ERROR(ExpandGraph(*a.mutable_g(), chain, depth + 1));
          for (auto& sg : *a.mutable_graphs()) RETURN_IF_ERROR(ExpandGraph(sg, chain, depth + 1));
        }
        if (++made_ > kMaxInlinedNodes) return TooMany(n);
        *out.Add() = std::move(n);
        continue;
      }
      for (const Function* f : chain) {
        if (f != fn) continue;
        std::vector<std::string> names;
        for (const Function* c : chain) names.push_back(c->label);
        names.push_back(fn->label);
        return absl::InvalidArgumentError(
            absl::StrCat(CallLabel(n, ""), " calls ", fn->label, " recursively (",
                         absl::StrJoin(names, " -> "), "): recursive functions cannot be inlined"));
      }
      if (chain.size() >= static_cast<size_t>(kMaxCallDepth)) {  // a backstop for CheckSize
        return absl::InvalidArgumentError(absl::StrCat(
            CallLabel(n, ""), " nests function calls deeper than ", kMaxCallDepth, " levels"));
      }
      const std::string prefix =
          n.name().empty() ? Fresh(absl::StrCat(n.op_type(), "_", i)) : n.name();
      ASSIGN_OR_RETURN(NodeList body, Instantiate(n, *fn, prefix));
      std::vector<const Function*> inner = chain;
      inner.push_back(fn);
      RETURN_IF_ERROR(ExpandNodes(body, inner, depth, out));
    }
    return absl::OkStatus();
  }

  absl::Status TooMany(const onnx::NodeProto& n) const {
    return absl::InvalidArgumentError(absl::StrCat(CallLabel(n, ""),
                                                   " inlining model functions makes more than ",
                                                   kMaxInlinedNodes, " nodes (the limit)"));
  }

  // One instantiation of a function body at a call: what the body's names become, and the
  // attributes of the call.
  struct Binding {
    const Function* fn;
    std::string label;   // the call's, for errors
    std::string prefix;  // "<call node>"
    absl::flat_hash_map<std::string, std::string> names;
    absl::flat_hash_map<std::string, const onnx::AttributeProto*> attrs;
  };

  absl::StatusOr<NodeList> Instantiate(const onnx::NodeProto& call, const Function& fn,
                                       const std::string& prefix) {
    const onnx::FunctionProto& f = *fn.proto;
    Binding b{&fn, absl::StrCat(CallLabel(call, ""), " calling ", fn.label), prefix, {}, {}};
    if (call.input_size() > f.input_size() || call.output_size() > f.output_size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          b.label, " has ", call.input_size(), " inputs and ", call.output_size(),
          " outputs; the function takes ", f.input_size(), " and gives ", f.output_size()));
    }
    for (const auto& a : call.attribute()) {
      if (!fn.attributes.contains(a.name())) {
        return absl::InvalidArgumentError(absl::StrCat(b.label, " sets attribute '", a.name(),
                                                       "', which the function does not declare"));
      }
      if (!b.attrs.emplace(a.name(), &a).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(b.label, " sets attribute '", a.name(), "' twice"));
      }
    }
    // Formal inputs: the call's actual values ("" for an omitted optional input).
    absl::flat_hash_set<std::string> formal_inputs;
    for (int i = 0; i < f.input_size(); ++i) {
      b.names[f.input(i)] = i < call.input_size() ? call.input(i) : std::string();
      formal_inputs.insert(f.input(i));
    }
    // Every name the body defines (subgraphs included) gets a fresh name, formal outputs the
    // call's actual ones (a fresh one when the call omits that output).
    absl::flat_hash_set<std::string> defined;
    std::vector<std::string> order;  // of definition: fresh names do not depend on hashing
    absl::Status st;
    auto define = [&](const std::string& s) {
      if (s.empty() || defined.contains(s)) return;
      if (formal_inputs.contains(s)) {
        st.Update(absl::InvalidArgumentError(
            absl::StrCat(b.label, ": the body redefines the function input '", s, "'")));
        return;
      }
      defined.insert(s);
      order.push_back(s);
    };
    for (const auto& n : f.node()) {
      for (const auto& s : n.output()) define(s);
    }
    absl::flat_hash_set<std::string> top_level = defined;
    ForEachBodyNode(f.node(), 0, [&](const onnx::NodeProto& n) {
      for (const auto& a : n.attribute()) {
        auto sub = [&](const onnx::GraphProto& g) {
          for (const auto& v : g.input()) define(v.name());
          for (const auto& t : g.initializer()) define(t.name());
          for (const auto& m : g.node()) {
            for (const auto& s : m.output()) define(s);
          }
        };
        if (a.has_g()) sub(a.g());
        for (const auto& g : a.graphs()) sub(g);
      }
    });
    RETURN_IF_ERROR(st);
    NodeList body;
    for (int j = 0; j < f.output_size(); ++j) {
      const std::string& formal = f.output(j);
      const bool given = j < call.output_size() && !call.output(j).empty();
      if (top_level.contains(formal)) {
        b.names[formal] = given ? call.output(j) : Fresh(absl::StrCat(prefix, "/", formal));
      } else if (formal_inputs.contains(formal)) {
        // A function input returned as it is: an Identity makes the output.
        if (!given) continue;
        onnx::NodeProto* id = body.Add();
        id->set_op_type("Identity");
        id->set_name(absl::StrCat(prefix, "/output_", j));
        id->add_input(b.names[formal]);
        id->add_output(call.output(j));
        if (b.names[formal].empty()) {
          return absl::InvalidArgumentError(absl::StrCat(
              b.label, " omits input '", formal, "', which the function returns as output ", j));
        }
      } else {
        return absl::InvalidArgumentError(absl::StrCat(b.label, ": function output '", formal,
                                                       "' is made by no node of the body"));
      }
    }
    for (const std::string& s : order) {
      if (!b.names.contains(s)) b.names[s] = Fresh(absl::StrCat(prefix, "/", s));
    }
    for (int i = 0; i < f.node_size(); ++i) {
      onnx::NodeProto* n = body.Add();
      *n = f.node(i);
      const std::string inner = n->name().empty() ? absl::StrCat(n->op_type(), "_", i) : n->name();
      n->set_name(absl::StrCat(prefix, "/", inner));
      RETURN_IF_ERROR(RewriteNode(*n, b, 0));
    }
    return body;
  }

  absl::StatusOr<std::string> Rename(const std::string& s, const Binding& b,
                                     const onnx::NodeProto& n) const {
    if (s.empty()) return s;
    auto it = b.names.find(s);
    if (it == b.names.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(b.label, ": body node '", n.name(), "' (", n.op_type(), ") uses '", s,
                       "', which is neither a function input nor defined in the function body"));
    }
    return it->second;
  }

  // Renames the values of body node `n` (and of its subgraphs) and resolves its attribute
  // references.
  absl::Status RewriteNode(onnx::NodeProto& n, const Binding& b, int depth) {
    if (HasUnknownField(n, kNodeDeviceConfigurationsField)) {
      return absl::UnimplementedError(absl::StrCat(
          b.label, ": body node '", n.name(),
          "' sets NodeProto.device_configurations (multi-device sharding, IR 11), which is not "
          "supported: Kiln builds for a single CPU device"));
    }
    for (auto& s : *n.mutable_input()) {
      ASSIGN_OR_RETURN(s, Rename(s, b, n));
    }
    for (auto& s : *n.mutable_output()) {
      ASSIGN_OR_RETURN(s, Rename(s, b, n));
    }
    google::protobuf::RepeatedPtrField<onnx::AttributeProto> attrs;
    for (auto& a : *n.mutable_attribute()) {
      if (!a.ref_attr_name().empty()) {
        const onnx::AttributeProto* value = nullptr;
        auto given = b.attrs.find(a.ref_attr_name());
        if (given != b.attrs.end()) {
          value = given->second;
        } else if (auto d = b.fn->defaults.find(a.ref_attr_name()); d != b.fn->defaults.end()) {
          value = &d->second;
        } else if (!b.fn->attributes.contains(a.ref_attr_name())) {
          return absl::InvalidArgumentError(absl::StrCat(
              b.label, ": body node '", n.name(), "' attribute '", a.name(), "' refers to '",
              a.ref_attr_name(), "', which the function does not declare"));
        }
        if (value == nullptr) continue;  // not set and no default: the op's default applies
        if (a.type() != onnx::AttributeProto::UNDEFINED &&
            value->type() != onnx::AttributeProto::UNDEFINED && a.type() != value->type()) {
          return absl::InvalidArgumentError(
              absl::StrCat(b.label, ": attribute '", a.ref_attr_name(), "' is of type ",
                           onnx::AttributeProto::AttributeType_Name(value->type()),
                           " but body node '", n.name(), "' uses it as '", a.name(), "' of type ",
                           onnx::AttributeProto::AttributeType_Name(a.type())));
        }
        onnx::AttributeProto resolved = *value;
        resolved.set_name(a.name());
        resolved.clear_ref_attr_name();
        *attrs.Add() = std::move(resolved);
        continue;
      }
      if (depth < kMaxDepth) {
        if (a.has_g()) RETURN_IF_ERROR(RewriteGraph(*a.mutable_g(), b, depth + 1));
        for (auto& g : *a.mutable_graphs()) RETURN_IF_ERROR(RewriteGraph(g, b, depth + 1));
      }
      *attrs.Add() = std::move(a);
    }
    n.mutable_attribute()->Swap(&attrs);
    return absl::OkStatus();
  }

  absl::Status RewriteGraph(onnx::GraphProto& g, const Binding& b, int depth) {
    onnx::NodeProto where;  // names the subgraph in errors
    where.set_name(g.name());
    where.set_op_type("subgraph");
    for (auto& v : *g.mutable_input()) {
      ASSIGN_OR_RETURN(*v.mutable_name(), Rename(v.name(), b, where));
    }
    for (auto& v : *g.mutable_output()) {
      ASSIGN_OR_RETURN(*v.mutable_name(), Rename(v.name(), b, where));
    }
    for (auto& t : *g.mutable_initializer()) {
      ASSIGN_OR_RETURN(*t.mutable_name(), Rename(t.name(), b, where));
    }
    // value_info entries name values of the body: renamed; any other is dropped (a hint only).
    google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> infos;
    for (auto& v : *g.mutable_value_info()) {
      auto it = b.names.find(v.name());
      if (it == b.names.end() || it->second.empty()) continue;
      v.set_name(it->second);
      *infos.Add() = std::move(v);
    }
    g.mutable_value_info()->Swap(&infos);
    // Node names stay: the importer prefixes them with their node's (already renamed) name.
    for (auto& n : *g.mutable_node()) RETURN_IF_ERROR(RewriteNode(n, b, depth));
    return absl::OkStatus();
  }

  onnx::ModelProto& model_;
  absl::flat_hash_map<std::string, int64_t> model_opsets_;
  absl::flat_hash_map<std::string, Function> functions_;
  absl::flat_hash_set<std::string> taken_;
  absl::flat_hash_map<const Function*, int64_t> sizes_;
  bool too_deep_ = false;
  int64_t made_ = 0;  // a backstop for CheckSize
};

}  // namespace

absl::Status InlineModelFunctions(onnx::ModelProto& model) { return Inliner(model).Run(); }

}  // namespace kiln::import
