// Test helpers for kiln-server: a synchronous C++ client of kiln.v1.Converter that can upload
// in chunks, stop or cancel midway, and collect the events, engine and status of a build.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "kiln/v1/service.grpc.pb.h"

namespace kiln::server::testing {

/// The repository's file `rel` (tests/models/...), read whole.
std::string ReadRepoFile(const std::string& rel);

/// Lower-case hex SHA-256.
std::string Sha256Hex(const std::string& bytes);

/// A spec for `model` (size and digest filled).
v1::BuildSpec SpecFor(const std::string& model, const std::string& name,
                      const std::string& policy = "");

/// How to drive one Build call.
struct BuildCall {
  v1::BuildSpec spec;
  std::string model;
  size_t chunk_bytes = 64 << 10;
  std::vector<v1::SampleSet> samples;
  /// false: send only the spec, then read (a cache hit needs nothing more).
  bool upload = true;
  /// >= 0: after this many model bytes, stop uploading and do `after_stop`: send
  /// end_of_upload, cancel the call, or hold the stream open sending nothing more (an idle
  /// upload) and read events until the server ends the call or the deadline passes.
  int64_t stop_after = -1;
  enum class AfterStop { kEndOfUpload, kCancel, kHold } after_stop = AfterStop::kEndOfUpload;
  std::chrono::milliseconds deadline{0};  ///< 0: 60 s (only to prevent a hang)
  std::string token;
  /// Called for each event; may cancel the call through the context.
  std::function<void(const v1::BuildEvent&, grpc::ClientContext&)> on_event;
};

/// What came back.
struct BuildOutcome {
  grpc::Status status;
  std::vector<v1::BuildEvent> events;  ///< all but engine chunks
  std::string engine;                  ///< the chunks, concatenated in offset order
  bool chunks_in_order = true;
  v1::BuildResult result;
  std::string build_id;
  bool cache_hit = false;
  /// Events of one kind.
  int Count(v1::BuildEvent::EventCase c) const;
};

/// Runs one Build call on `channel`.
BuildOutcome RunBuild(const std::shared_ptr<grpc::Channel>& channel, const BuildCall& call);

/// Runs WatchBuild(id).
BuildOutcome Watch(const std::shared_ptr<grpc::Channel>& channel, const std::string& id,
                   const std::string& token = "");

/// ListPresets, as a health probe of the Converter service.
grpc::Status ListPresets(const std::shared_ptr<grpc::Channel>& channel,
                         const std::string& token = "", v1::ListPresetsResponse* out = nullptr);

/// Polls `pred` every 20 ms for up to `seconds`.
bool WaitFor(const std::function<bool()>& pred, double seconds);

}  // namespace kiln::server::testing
