// Structural checks of a SentencePiece model file's bytes that SentencePiece itself skips. Its
// loader parses the protobuf and no more: a damaged normalization table (the precompiled
// character map, a double-array trie with offsets into a string table) is then read out of bounds
// on the first sentence encoded, a crash or silently wrong text; and a file cut short where a
// field ends parses as a model without its normalizer.
#pragma once

#include <string>
#include <string_view>

namespace tessera::data {

// What is wrong with `model` (a serialized ModelProto), or "" when nothing found: a protobuf
// structure that does not parse, no normalizer section (a truncated file), or a normalizer or
// denormalizer character map whose trie leads outside itself or outside its string table.
std::string spm_model_defect(std::string_view model);

}  // namespace tessera::data
