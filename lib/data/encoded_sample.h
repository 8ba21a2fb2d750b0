// A sample as files, WebDataset's way (`kiln shard` writes them as KEY.EXT members of a tar):
// extension -> bytes, e.g. {"jpg": <the JPEG file>, "cls": "3"}. Without LibTorch, so that the tar
// reader builds alone (fuzz/).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace kiln::data {

using EncodedSample = std::vector<std::pair<std::string, std::string>>;

}  // namespace kiln::data
