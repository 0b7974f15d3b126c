// Links the installed commscope::core: loads a model preset from the installed presets
// (COMMSCOPE_PRESET_DIR of the CMake package) and prints its exact parameter count.
#include <cstdio>
#include <cstdlib>

#include "commscope/spec/model.h"
#include "commscope/workload/params.h"

int main(int argc, char** argv) {
  ::setenv("COMMSCOPE_PRESETS", PRESETS, 1);
  auto model = commscope::load_model(argc > 1 ? argv[1] : "gpt2-large");
  if (!model) {
    std::fprintf(stderr, "uses_commscope: %s\n", model.error().message.c_str());
    return 2;
  }
  std::printf("%lld\n", static_cast<long long>(commscope::count_params(*model).total));
  return 0;
}
