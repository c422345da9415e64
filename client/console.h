// What convert-client shows while a build streams: on a terminal, log lines scrolling above a
// progress bar redrawn in place; otherwise plain, greppable lines. Also the short summary table
// of the accuracy report.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kiln/v1/report.pb.h"
#include "kiln/v1/service.pb.h"

namespace kiln::client {

/// Renders the live stream on `out` (stderr). Thread-safe: the upload thread reports upload
/// progress while the main thread renders events.
class Console {
 public:
  /// `tty`: redraw a progress bar in place with ANSI sequences; `quiet`: only warnings and
  /// errors.
  Console(FILE* out, bool tty, bool quiet);

  /// Renders one event from the server (engine chunks only move the bar).
  void OnEvent(const v1::BuildEvent& event);

  /// The client's own upload progress.
  void OnUpload(uint64_t sent, uint64_t total);

  /// A line of the client itself ("retrying on another replica ...").
  void Note(const std::string& text);

  /// Clears the bar (terminal) so what follows starts on a clean line.
  void Finish();

  /// Precision decisions seen, by effective precision ("fp16" -> 40).
  std::map<std::string, int> decisions() const;

 private:
  void PrintLineLocked(const std::string& line) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DrawBarLocked(bool force) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  FILE* out_;
  const bool tty_;
  const bool quiet_;
  const absl::Time start_;
  mutable absl::Mutex mu_;
  std::string stage_ ABSL_GUARDED_BY(mu_) = "connect";
  double progress_ ABSL_GUARDED_BY(mu_) = 0;
  std::string detail_ ABSL_GUARDED_BY(mu_);  // "queue 2", "engine 3.1/9.0 MiB"
  bool bar_shown_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_draw_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool upload_reported_ ABSL_GUARDED_BY(mu_) = false;
  std::map<std::string, int> decisions_ ABSL_GUARDED_BY(mu_);
};

/// A log line as printed: "[12:03:04.123] info  text" (local time).
std::string FormatLogLine(const v1::LogLine& line);

/// The progress bar line for a terminal `width` columns wide.
std::string FormatBar(const std::string& stage, double progress, const std::string& detail,
                      absl::Duration elapsed, int width);

/// A short summary of the accuracy report: verdict, per-output errors, worst offenders and the
/// suggested policy. At most `max_offenders` offender rows.
std::string ReportSummary(const v1::AccuracyReport& report, int max_offenders = 5);

}  // namespace kiln::client
