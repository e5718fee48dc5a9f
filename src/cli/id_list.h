// Token ids given on the command line: a file of ids, or the ids themselves,
// separated by commas or whitespace, optionally in brackets, so that
// `ntransformer tokenize --ids` output ("[1, 2, 3]") reads back as it is.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace nt::cli {

// `value` names an existing file (whose content is the list) or is the list;
// errors name `flag`, the file if any, and the bad item.
std::vector<int32_t> read_id_list(const std::string& value, std::string_view flag);

// Every id in [0, vocab_size), or an error naming `flag` and the first that is not.
void check_ids_in_vocabulary(const std::vector<int32_t>& ids, int64_t vocab_size, std::string_view flag);

}  // namespace nt::cli
