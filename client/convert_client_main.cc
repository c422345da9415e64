// convert-client: builds an engine on a kiln-server (DESIGN.md §9, §10). A thin client: it speaks
// only the kiln.v1 proto and links no engine code but the HTML report renderer.
#include <iostream>

#include "client/client_options.h"
#include "client/convert.h"

int main(int argc, char** argv) {
  auto options = kiln::client::ParseArgs(argc, argv);
  if (!options.ok()) {
    std::cerr << "convert-client: " << options.status().message() << "\n\n"
              << kiln::client::UsageText();
    return kiln::client::kExitUsage;
  }
  if (options->help) {
    std::cout << kiln::client::UsageText();
    return kiln::client::kExitOk;
  }
  return kiln::client::RunConvert(*options);
}
