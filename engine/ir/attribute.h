// Node attributes (the subset of ONNX attribute kinds Kiln's ops use; graphs are not supported).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/ir/tensor.h"

namespace kiln::ir {

/// One attribute value; `type` says which member holds it.
struct Attribute {
  enum class Type { kFloat, kInt, kString, kTensor, kFloats, kInts, kStrings };
  Type type = Type::kInt;
  float f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;

  static Attribute Int(int64_t v) {
    Attribute a;
    a.type = Type::kInt;
    a.i = v;
    return a;
  }
  static Attribute Float(float v) {
    Attribute a;
    a.type = Type::kFloat;
    a.f = v;
    return a;
  }
  static Attribute String(std::string v) {
    Attribute a;
    a.type = Type::kString;
    a.s = std::move(v);
    return a;
  }
  static Attribute Ints(std::vector<int64_t> v) {
    Attribute a;
    a.type = Type::kInts;
    a.ints = std::move(v);
    return a;
  }
  static Attribute Floats(std::vector<float> v) {
    Attribute a;
    a.type = Type::kFloats;
    a.floats = std::move(v);
    return a;
  }
};

/// Name of an attribute kind ("ints", ...), for error messages.
const char* AttributeTypeName(Attribute::Type t);

}  // namespace kiln::ir
