// kiln-server's settings: command-line flags and an optional `--config FILE` of `key = value`
// lines using the same names as the flags (without the leading dashes). Flags given on the
// command line override the file, whatever their order.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace kiln::server {

/// Largest model chunk a client may send in one message (DESIGN.md §9).
constexpr int64_t kMaxChunkBytes = int64_t{1} << 20;

/// Everything kiln-server can be told. The defaults serve on 127.0.0.1:50051 with one worker.
struct ServerConfig {
  std::string listen = "127.0.0.1:50051";  ///< --listen HOST:PORT (port 0: any free port)
  std::string port_file;                   ///< --port-file F: write the bound port there
  int workers = 1;                         ///< --workers N: concurrent builds
  int queue = 8;                           ///< --queue M: builds waiting for a worker
  std::string cache_dir;                   ///< --cache-dir DIR: engine cache (empty: none)
  std::string work_dir;                    ///< --work-dir DIR: job folders (default: a temp dir)
  int64_t max_model_bytes = int64_t{1} << 30;  ///< --max-model-bytes
  /// --max-sample-bytes: largest SampleSet message (one sample set). It also sets the server's
  /// max_receive_message_length (the larger of this and 1 MiB, plus 64 KiB of headroom), since
  /// a sample set is sent as one message; model chunks are refused above 1 MiB. The default
  /// keeps the receive limit near the 1 MiB chunk size (a BERT-base sample of 128 tokens or a
  /// 224x224 fp32 image fits); larger samples need a larger --max-sample-bytes.
  int64_t max_sample_bytes = int64_t{1} << 20;
  int max_samples = 64;              ///< --max-samples: sample sets per build
  int64_t worker_memory_mb = 4096;   ///< --worker-memory-mb: RLIMIT_AS of a worker
  int64_t worker_cpu_seconds = 600;  ///< --worker-cpu-seconds: RLIMIT_CPU of a worker
  int drain_seconds = 30;            ///< --drain-seconds: SIGTERM lets builds finish this long
  /// --max-uploads: Build calls uploading at once. Uploads do not take queue places (a spec
  /// that sends nothing more must not keep others out of the queue); they have a limit of
  /// their own, and a finished upload needs a free place in the queue.
  int max_uploads = 32;
  /// --upload-idle-seconds: an upload that sends nothing for this long fails
  /// (DEADLINE_EXCEEDED) and frees its place.
  int upload_idle_seconds = 30;
  /// --upload-seconds: the longest a whole upload may take, however steadily it trickles in.
  int upload_seconds = 3600;
  int keep_builds = 64;            ///< --keep-builds: finished builds kept for WatchBuild
  int event_buffer = 10000;        ///< --event-buffer: log lines buffered per build
  std::string token;               ///< --token T: required bearer token (empty: no auth)
  std::string token_file;          ///< --token-file F: the token, read from a file
  std::string tls_cert, tls_key;   ///< --tls-cert / --tls-key: PEM files (both or neither)
  std::string tls_client_ca;       ///< --tls-client-ca: require client certs signed by it
  bool reflection = false;         ///< --reflection: gRPC server reflection
  bool enable_test_hooks = false;  ///< --enable-test-hooks: see worker_main.h
  std::string worker_binary;       ///< --worker-binary: default: this executable
};

/// Usage text of kiln-server.
const char* ServerUsage();

/// Parses argv (argv[0] is the program). Reads --config FILE first, then applies the flags.
/// `--token-file` is read here (its trimmed contents become `token`). InvalidArgument naming
/// the flag (or FILE:LINE) on any error.
absl::StatusOr<ServerConfig> ParseServerFlags(int argc, char** argv);

}  // namespace kiln::server
