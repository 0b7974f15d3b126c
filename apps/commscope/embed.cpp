// The capture that lets a host program run the CLI's verbs (embed.h).
#include "embed.h"

namespace commscope::cli {

namespace {
thread_local Capture* t_capture = nullptr;
}

Capture* current_capture() {
  return t_capture;
}

CaptureScope::CaptureScope(Capture& c) : previous_(t_capture) {
  t_capture = &c;
}
CaptureScope::~CaptureScope() {
  t_capture = previous_;
}

void check_interrupt() {
  if (t_capture && t_capture->poll) t_capture->poll();
}

std::function<void(std::size_t, std::size_t)> with_interrupt_check(
    std::function<void(std::size_t, std::size_t)> inner) {
  if (!t_capture || !t_capture->poll) return inner;
  return [inner = std::move(inner)](std::size_t done, std::size_t total) {
    check_interrupt();
    if (inner) inner(done, total);
  };
}

}  // namespace commscope::cli
