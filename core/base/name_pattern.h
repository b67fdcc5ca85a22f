// Selecting parameters by name: the one matching rule that trainable sets, optimizer parameter
// groups and LoRA targets share.
//
// Parameter names are '/'-separated paths ("block3/attn/qkv/w"). A pattern selects a name when
// it matches, as a shell glob (fnmatch without FNM_PATHNAME: '*' and '?' cross '/', "[...]"
// is a class), either the whole name or a '/'-aligned tail of it. So "attn/qkv/w" selects
// "block3/attn/qkv/w"; "*/b" every bias; "norm*" both "norm/g" and "block0/norm1/g";
// "block1/*" everything in block 1; "w" every weight named w at any depth.
#pragma once

#include <string>
#include <vector>

namespace fjit {

bool name_matches(const std::string& pattern, const std::string& name);
// True when any of `patterns` selects `name`.
bool name_matches_any(const std::vector<std::string>& patterns, const std::string& name);

}  // namespace fjit
