#include "components/audio/manifest_file.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "lib/logging/logger.h"

namespace kiln::audio {

absl::StatusOr<std::vector<AudioEntry>> ReadJsonlManifest(const std::string& path,
                                                          const ManifestFields& f, bool need_text,
                                                          OnError on_error) {
  namespace fs = std::filesystem;
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open manifest"));
  const fs::path base = fs::path(path).parent_path();
  std::vector<AudioEntry> entries;
  std::string line, first_error;
  int64_t number = 0, skipped = 0;
  while (std::getline(in, line)) {
    ++number;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    std::string where = absl::StrCat(path, ":", number);
    std::string error;
    AudioEntry e;
    e.where = where;
    const nlohmann::json json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    auto field = [&](const std::string& name) { return json.find(name); };
    if (json.is_discarded() || !json.is_object()) {
      error = absl::StrCat(where, ": not a JSON object");
    } else if (field(f.audio) == json.end() || !field(f.audio)->is_string()) {
      error = absl::StrCat(where, ": no \"", f.audio, "\" field (a string: the audio file)");
    } else if (need_text && (field(f.text) == json.end() || !field(f.text)->is_string())) {
      error = absl::StrCat(where, ": no \"", f.text, "\" field (a string: the transcript)");
    } else if (field(f.duration) != json.end() && !field(f.duration)->is_number()) {
      error = absl::StrCat(where, ": \"", f.duration, "\" must be a number of seconds");
    } else {
      fs::path audio = field(f.audio)->get<std::string>();
      e.path = (audio.is_absolute() ? audio : base / audio).string();
      if (field(f.text) != json.end() && field(f.text)->is_string())
        e.text = field(f.text)->get<std::string>();
      if (field(f.duration) != json.end()) e.duration = field(f.duration)->get<double>();
    }
    if (!error.empty()) {
      if (on_error == OnError::kFail) return absl::InvalidArgumentError(error);
      if (skipped++ == 0) first_error = error;
      continue;
    }
    entries.push_back(std::move(e));
  }
  if (skipped > 0) {
    Logger::Instance().Warning(absl::StrCat("skipped ", skipped, " of ", number, " lines of ", path,
                                            " (data.on_error=skip); first: ", first_error));
  }
  if (entries.empty())
    return absl::InvalidArgumentError(absl::StrCat(path, ": no utterances (empty manifest)"));
  return entries;
}

}  // namespace kiln::audio
