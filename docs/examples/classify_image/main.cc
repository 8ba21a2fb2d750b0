// Classifies an image with a model kiln trained, through kiln::Predictor (docs/deploy.md):
//   classify_image MODEL IMAGE     MODEL: a run directory, a checkpoint or a `kiln export` folder
// The image gets exactly the evaluation preprocessing of the run's data module.
#include <kiln/predictor.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

int main(int argc, char** argv) {
  if (argc != 3) return std::fprintf(stderr, "usage: classify_image MODEL IMAGE\n"), 2;
  auto predictor = kiln::Predictor::Load(argv[1]);
  if (!predictor.ok())
    return std::fprintf(stderr, "%s\n", predictor.status().ToString().c_str()), 1;
  std::ifstream file(argv[2], std::ios::binary);
  std::string image((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  auto answer = (*predictor)->Predict(image);
  if (!answer.ok()) return std::fprintf(stderr, "%s\n", answer.status().ToString().c_str()), 1;
  std::printf("%s %lld %.6f\n", answer->label.c_str(), static_cast<long long>(answer->class_index),
              answer->probability);
  return 0;
}
