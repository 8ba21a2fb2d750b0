// `kiln`: the command-line front end. All the work lives in lib/app.
#include <string>
#include <vector>

#include "lib/app/application.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return kiln::app::RunApplication(args);
}
