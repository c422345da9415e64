#include "client/console.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace kiln::client {
namespace {

int TerminalWidth(FILE* out) {
  winsize ws{};
  if (ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
  return 80;
}

// "%.3g" with non-finite values spelled inf / -inf / nan.
std::string Num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return absl::StrFormat("%.3g", v);
}

// "812 B", "17.8 KiB", "3.1 MiB", "1.20 GiB".
std::string HumanBytes(uint64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  if (bytes < (uint64_t{1} << 20)) return absl::StrFormat("%.1f KiB", bytes / 1024.0);
  if (bytes < (uint64_t{1} << 30)) return absl::StrFormat("%.1f MiB", bytes / 1048576.0);
  return absl::StrFormat("%.2f GiB", bytes / 1073741824.0);
}

// Clips `s` to `width` columns, with an ellipsis (the report's names can be long paths).
std::string Clip(const std::string& s, size_t width) {
  if (s.size() <= width) return s;
  return width < 4 ? s.substr(0, width) : s.substr(0, width - 3) + "...";
}

}  // namespace

std::string FormatLogLine(const v1::LogLine& line) {
  int64_t us = line.timestamp_us();
  time_t secs = static_cast<time_t>(us / 1000000);
  tm local{};
  localtime_r(&secs, &local);
  return absl::StrFormat("[%02d:%02d:%02d.%03d] %-5s %s", local.tm_hour, local.tm_min, local.tm_sec,
                         static_cast<int>((us / 1000) % 1000), line.level(), line.text());
}

std::string FormatBar(const std::string& stage, double progress, const std::string& detail,
                      absl::Duration elapsed, int width) {
  progress = std::clamp(std::isfinite(progress) ? progress : 0.0, 0.0, 1.0);
  std::string tail =
      absl::StrFormat(" %3d%% %s%s%s %.1fs", static_cast<int>(progress * 100), stage,
                      detail.empty() ? "" : " ", detail, absl::ToDoubleSeconds(elapsed));
  int bar_width = std::clamp(width - static_cast<int>(tail.size()) - 3, 10, 50);
  int filled = static_cast<int>(std::lround(progress * bar_width));
  std::string bar =
      absl::StrCat("[", std::string(filled, '#'), std::string(bar_width - filled, '.'), "]", tail);
  return Clip(bar, std::max(width - 1, 20));
}

Console::Console(FILE* out, bool tty, bool quiet)
    : out_(out), tty_(tty), quiet_(quiet), start_(absl::Now()) {}

void Console::PrintLineLocked(const std::string& line) {
  if (tty_ && bar_shown_) std::fputs("\r\033[K", out_);
  std::fputs(line.c_str(), out_);
  std::fputc('\n', out_);
  bar_shown_ = false;
  if (tty_) DrawBarLocked(true);
  std::fflush(out_);
}

void Console::DrawBarLocked(bool force) {
  if (!tty_ || quiet_) return;
  absl::Time now = absl::Now();
  // About 10 redraws a second: engine chunks and upload progress arrive far faster.
  if (!force && now - last_draw_ < absl::Milliseconds(100)) return;
  last_draw_ = now;
  std::string bar = FormatBar(stage_, progress_, detail_, now - start_, TerminalWidth(out_));
  std::fputs("\r\033[K", out_);
  std::fputs(bar.c_str(), out_);
  std::fflush(out_);
  bar_shown_ = true;
}

void Console::OnEvent(const v1::BuildEvent& event) {
  absl::MutexLock lock(&mu_);
  switch (event.event_case()) {
    case v1::BuildEvent::kAccepted: {
      const v1::Accepted& a = event.accepted();
      stage_ = a.cache_hit() ? "cache" : (a.queue_position() > 0 ? "queued" : "accepted");
      detail_ = a.queue_position() > 0 ? absl::StrCat("position ", a.queue_position()) : "";
      if (!quiet_) {
        PrintLineLocked(absl::StrCat(
            "accepted: build ", a.build_id(), a.cache_hit() ? " (cache hit: no upload needed)" : "",
            a.queue_position() > 0 ? absl::StrCat(" (queue position ", a.queue_position(), ")")
                                   : ""));
      }
      break;
    }
    case v1::BuildEvent::kQueuePosition:
      stage_ = "queued";
      detail_ = absl::StrCat("position ", event.queue_position().position());
      if (!quiet_ && !tty_)
        PrintLineLocked(absl::StrCat("queue position ", event.queue_position().position()));
      DrawBarLocked(true);
      break;
    case v1::BuildEvent::kStage:
      stage_ = event.stage().name();
      progress_ = event.stage().progress();
      detail_.clear();
      if (!quiet_ && !tty_) {
        PrintLineLocked(absl::StrFormat("stage %s (%d%%)", stage_,
                                        static_cast<int>(std::clamp(progress_, 0.0, 1.0) * 100)));
      }
      DrawBarLocked(true);
      break;
    case v1::BuildEvent::kLog: {
      const std::string& level = event.log().level();
      bool important = level == "warn" || level == "error";
      if (!quiet_ || important) {
        std::string line = FormatLogLine(event.log());
        if (tty_ && important)
          line = absl::StrCat(level == "error" ? "\033[31m" : "\033[33m", line, "\033[0m");
        PrintLineLocked(line);
      }
      break;
    }
    case v1::BuildEvent::kWarning:
      PrintLineLocked(
          absl::StrCat(tty_ ? "\033[33mwarning:\033[0m " : "warning: ", event.warning().text()));
      break;
    case v1::BuildEvent::kDecision: {
      const std::string& p = event.decision().effective_precision();
      ++decisions_[p.empty() ? "none" : p];
      break;
    }
    case v1::BuildEvent::kReport:
      if (!quiet_ && !tty_) PrintLineLocked("accuracy report received");
      break;
    case v1::BuildEvent::kEngineChunk: {
      uint64_t end = event.engine_chunk().offset() + event.engine_chunk().data().size();
      stage_ = "engine";
      detail_ = HumanBytes(end);
      DrawBarLocked(false);
      break;
    }
    case v1::BuildEvent::kResult:
      stage_ = "done";
      progress_ = 1;
      detail_.clear();
      DrawBarLocked(true);
      break;
    case v1::BuildEvent::EVENT_NOT_SET:
      break;
  }
}

void Console::OnUpload(uint64_t sent, uint64_t total) {
  absl::MutexLock lock(&mu_);
  if (stage_ == "connect") stage_ = "upload";
  if (stage_ != "upload") return;
  detail_ = absl::StrCat(HumanBytes(sent), " of ", HumanBytes(total));
  if (tty_) {
    DrawBarLocked(sent == total);
  } else if (!quiet_ && sent == total && !upload_reported_) {
    // Plain output: one line when the model is sent (a line per chunk would flood CI logs).
    upload_reported_ = true;
    PrintLineLocked(absl::StrCat("uploaded the model: ", HumanBytes(total)));
  }
}

void Console::Note(const std::string& text) {
  absl::MutexLock lock(&mu_);
  PrintLineLocked(text);
}

void Console::Finish() {
  absl::MutexLock lock(&mu_);
  if (tty_ && bar_shown_) {
    std::fputs("\r\033[K", out_);
    std::fflush(out_);
    bar_shown_ = false;
  }
}

std::map<std::string, int> Console::decisions() const {
  absl::MutexLock lock(&mu_);
  return decisions_;
}

std::string ReportSummary(const v1::AccuracyReport& report, int max_offenders) {
  std::string out = absl::StrFormat(
      "accuracy report: %s  (%s; %d sample(s), %s; atol %s rtol %s)\n",
      report.pass() ? "PASS" : "FAIL", report.model_name().empty() ? "model" : report.model_name(),
      report.samples(), report.sample_source().empty() ? "?" : report.sample_source(),
      Num(report.atol()), Num(report.rtol()));
  if (!report.arithmetic().empty())
    absl::StrAppend(&out, "  arithmetic: ", report.arithmetic(), "\n");
  size_t name_width = 6;
  for (const auto& o : report.outputs()) name_width = std::max(name_width, o.tensor().size());
  name_width = std::min<size_t>(name_width, 40);
  absl::StrAppend(&out, absl::StrFormat("  %-*s  %-4s  %10s  %10s  %10s  %9s  %8s\n",
                                        static_cast<int>(name_width), "output", "", "max_abs",
                                        "max_rel", "cosine", "snr_db", "outside"));
  for (const auto& o : report.outputs()) {
    const v1::ErrorStats& e = o.error();
    std::string outside = absl::StrFormat("%.3g%%", e.fraction_outside() * 100);
    absl::StrAppend(
        &out, absl::StrFormat(
                  "  %-*s  %-4s  %10s  %10s  %10s  %9s  %8s%s\n", static_cast<int>(name_width),
                  Clip(o.tensor(), name_width), o.pass() ? "ok" : "FAIL", Num(e.max_abs()),
                  Num(e.max_rel()), absl::StrFormat("%.6g", e.cosine()), Num(e.snr_db()), outside,
                  e.nan_count() + e.inf_count() > 0
                      ? absl::StrCat("  (", e.nan_count(), " NaN, ", e.inf_count(), " Inf)")
                      : ""));
  }
  int shown = 0;
  for (const auto& w : report.worst_offenders()) {
    if (shown == 0) absl::StrAppend(&out, "  worst offenders:\n");
    if (shown++ >= max_offenders) {
      absl::StrAppend(&out, "    ... ", report.worst_offenders_size() - max_offenders, " more\n");
      break;
    }
    absl::StrAppend(&out, absl::StrFormat("    %-40s %-18s %-5s %s\n", Clip(w.node_name(), 40),
                                          Clip(w.op_type(), 18), w.effective_precision(), w.why()));
  }
  const v1::Suggestion& s = report.suggestion();
  if (s.searched()) {
    if (s.found()) {
      absl::StrAppend(
          &out, absl::StrFormat("  suggestion: raise %d node(s) to fp32 (worst output max_abs %s "
                                "-> %s; latency %.3g -> %.3g ms)\n",
                                s.nodes_size(), Num(s.output_max_abs_before()),
                                Num(s.output_max_abs_after()), s.latency_ms_before(),
                                s.latency_ms_after()));
      for (absl::string_view line : absl::StrSplit(s.policy_text(), '\n', absl::SkipEmpty())) {
        absl::StrAppend(&out, "    | ", line, "\n");
      }
    } else {
      absl::StrAppend(&out, "  suggestion: none found", s.note().empty() ? "" : ": ", s.note(),
                      "\n");
    }
  }
  for (const std::string& n : report.notes()) absl::StrAppend(&out, "  note: ", n, "\n");
  return out;
}

}  // namespace kiln::client
